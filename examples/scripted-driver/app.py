"""Scripted inference driver: replays canned responses, one per turn.

Demonstrates the `driver` world: one `murmur:tool/run` call per turn with a JSON driver
request in and a JSON driver response out, configuration read from the environment
(`MURMUR_INFERENCE_DRIVER_CONFIG`, a JSON object `{"responses": [...]}`), and streaming
text and thinking through `murmur:text/chunks`. Turn n (counted by the assistant messages
already in the request) gets `responses[n]`.
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


def _load_responses() -> list[Any]:
    raw = os.environ.get(CONFIG_ENV)
    if not raw:
        raise DriverError(f"scripted driver: {CONFIG_ENV} is not set")
    try:
        config = json.loads(raw)
    except ValueError as exc:
        raise DriverError(f"scripted driver: {CONFIG_ENV} is not valid JSON: {exc}") from exc
    if not isinstance(config, dict):
        raise DriverError(f"scripted driver: {CONFIG_ENV} must be a JSON object")
    responses = config.get("responses")
    if not isinstance(responses, list):
        raise DriverError(f'scripted driver: {CONFIG_ENV} needs a "responses" list')
    return responses


def _assistant_turns(data: str | None) -> int:
    """How many assistant messages the request already holds."""
    if data is None:
        raise DriverError("scripted driver: no request data")
    try:
        request = json.loads(data)
    except ValueError as exc:
        raise DriverError(f"scripted driver: request is not valid JSON: {exc}") from exc
    if not isinstance(request, dict):
        raise DriverError("scripted driver: request must be a JSON object")
    messages = request.get("messages", [])
    if not isinstance(messages, list):
        raise DriverError('scripted driver: request "messages" must be a list')
    return sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")


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
            responses = _load_responses()
            turn = _assistant_turns(input.data)
        except DriverError as exc:
            return _error(str(exc))
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
