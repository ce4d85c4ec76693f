"""Scripted inference driver: replays canned responses, one per turn.

Demonstrates the `driver` world: one `murmur:tool/run` call per turn with a JSON driver
request in and a JSON driver response out, configuration read from the environment
(`MURMUR_INFERENCE_DRIVER_CONFIG`, a JSON object `{"responses": [...], "rules": [...]}`), and
streaming text and thinking through `murmur:text/chunks`. A rule `{"when": text, "response": {...}}`
answers any request whose system prompt or last message contains `text` (the first rule that
matches wins): a conversation whose history was compacted, reopened or summarized by a hook
reads the same every run. Otherwise turn n (counted by the assistant messages already in the
request) gets `responses[n]`.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from wit_world import exports
from wit_world.exports import run
from wit_world.imports import chunks

CONFIG_ENV = "MURMUR_INFERENCE_DRIVER_CONFIG"
_WORD = re.compile(r"\S+\s*|\s+")


class DriverError(Exception):
    """A problem reported to the runtime as an ERROR result with this message."""


def _load_config() -> dict[str, Any]:
    raw = os.environ.get(CONFIG_ENV)
    if not raw:
        raise DriverError(f"scripted driver: {CONFIG_ENV} is not set")
    try:
        config = json.loads(raw)
    except ValueError as exc:
        raise DriverError(f"scripted driver: {CONFIG_ENV} is not valid JSON: {exc}") from exc
    if not isinstance(config, dict):
        raise DriverError(f"scripted driver: {CONFIG_ENV} must be a JSON object")
    if not isinstance(config.get("responses"), list):
        raise DriverError(f'scripted driver: {CONFIG_ENV} needs a "responses" list')
    if not isinstance(config.get("rules", []), list):
        raise DriverError(f'scripted driver: {CONFIG_ENV} "rules" must be a list')
    return config


def _parse_request(data: str | None) -> dict[str, Any]:
    if data is None:
        raise DriverError("scripted driver: no request data")
    try:
        request = json.loads(data)
    except ValueError as exc:
        raise DriverError(f"scripted driver: request is not valid JSON: {exc}") from exc
    if not isinstance(request, dict):
        raise DriverError("scripted driver: request must be a JSON object")
    if not isinstance(request.get("messages", []), list):
        raise DriverError('scripted driver: request "messages" must be a list')
    return request


def _assistant_turns(request: dict[str, Any]) -> int:
    """How many assistant messages the request already holds."""
    return sum(1 for m in request.get("messages", []) if isinstance(m, dict) and m.get("role") == "assistant")


def _text(message: Any) -> str:
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return ""
    return "".join(b.get("text", "") for b in content if isinstance(b, dict) and isinstance(b.get("text"), str))


def _rule_response(rules: list[Any], request: dict[str, Any]) -> Any:
    """The response of the first rule whose `when` is in the system prompt or the last message."""
    messages = request.get("messages") or []
    system = request.get("system") if isinstance(request.get("system"), str) else ""
    last = _text(messages[-1]) if messages else ""
    for rule in rules:
        when = rule.get("when") if isinstance(rule, dict) else None
        if isinstance(when, str) and when and (when in system or when in last):
            return rule.get("response")
    return None


def _stream(response: dict[str, Any]) -> None:
    """Emit the response's thinking, then each text block split into word-sized chunks."""
    thinking = response.get("thinking")
    if isinstance(thinking, str):
        del response["thinking"]
        if thinking:
            chunks.emit_thinking_chunk(thinking)
    content = response.get("content")
    if not isinstance(content, list):
        return
    for block in content:
        if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
            for piece in _WORD.findall(block["text"]):
                chunks.emit_chunk(piece)


def _error(summary: str) -> run.ToolResult:
    return run.ToolResult(
        status=run.Status.ERROR, summary=summary, data=None, data_path=None, truncated=False, metadata=[]
    )


class Run(exports.Run):
    def run(self, input: run.ToolInput) -> run.ToolResult:
        try:
            config = _load_config()
            request = _parse_request(input.data)
        except DriverError as exc:
            return _error(str(exc))
        responses = config["responses"]
        turn = _assistant_turns(request)
        chosen = _rule_response(config.get("rules", []), request)
        if chosen is None:
            if turn >= len(responses):
                return _error(f"scripted driver: no response for turn {turn + 1} ({len(responses)} scripted)")
            chosen = responses[turn]
        if not isinstance(chosen, dict):
            return _error(f"scripted driver: response {turn + 1} is not a JSON object")
        response = dict(chosen)
        metadata: list[tuple[str, str]] = []
        if "continuation_id" in response:
            continuation = response.pop("continuation_id")
            value = continuation if isinstance(continuation, str) else json.dumps(continuation)
            metadata.append(("continuation_id", value))
        _stream(response)
        return run.ToolResult(
            status=run.Status.PASSED,
            summary=f"scripted response {turn + 1} of {len(responses)}",
            data=json.dumps(response),
            data_path=None,
            truncated=False,
            metadata=metadata,
        )
