"""The Responses API: the body, its event stream, and the conversation held provider-side.

With `store` on (the default), each response's id goes back to the runtime as `continuation_id`
metadata. While the runtime holds it, a request carries only the tail of the conversation: the
assistant message the provider itself produced (already part of the stored response, so it is
left out) and what came after it (tool outputs, user text), sent with `previous_response_id`.
`instructions` and `tools` are not inherited from a previous response, so they go every time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import openai_common as shared
from driverkit.errors import ProviderError, StreamError
from driverkit.sse import Event
from driverkit.stream_json import parse_arguments, parse_event
from driverkit.usage import report

USAGE = {"input_tokens": "input_tokens", "output_tokens": "output_tokens",
         "cached_tokens": "input_tokens_details.cached_tokens"}
THINKING_EVENTS = frozenset({"response.reasoning_summary_text.delta", "response.reasoning_text.delta"})

Emit = Callable[[str], None]


def stores(config: dict[str, Any]) -> bool:
    return config.get("store", True) is not False


def build_body(request: dict[str, Any], model: str, config: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    previous = request.get("continuation_id") if stores(config) else None
    messages = [m for m in request.get("messages", []) if isinstance(m, dict)]
    if previous:
        messages = [m for m in messages if m.get("role") != "assistant"]
    items = [item for m in messages for item in convert(m)]
    body: dict[str, Any] = {"model": model, "input": items, "stream": True, "store": stores(config),
                            "max_output_tokens": int(request.get("max_tokens") or 8192)}
    if isinstance(request.get("system"), str) and request["system"]:
        body["instructions"] = request["system"]
    if previous:
        body["previous_response_id"] = previous
    tools = [tool(t) for t in request.get("tools", []) if isinstance(t, dict)]
    if tools:
        body["tools"] = tools
    key = request.get("prompt_cache_key")
    if isinstance(key, str) and key and config.get("prompt_cache_key", True) is not False:
        body["prompt_cache_key"] = key
    body.update(extra)
    return body


def tool(spec: dict[str, Any]) -> dict[str, Any]:
    wire: dict[str, Any] = {"type": "function", "name": spec.get("name")}
    if spec.get("description"):
        wire["description"] = spec["description"]
    wire["parameters"] = spec.get("parameters") or {"type": "object", "properties": {}}
    wire["strict"] = False  # the runtime's schemas are not written for strict mode
    return wire


def convert(message: dict[str, Any]) -> list[dict[str, Any]]:
    role = message.get("role")
    if role == "tool":
        return [{"type": "function_call_output", "call_id": str(message.get("tool_call_id")),
                 "output": shared.text_of(message)}]
    text = shared.text_of(message)
    if role == "assistant":
        items: list[dict[str, Any]] = [{"role": "assistant", "content": text}] if text else []
        items.extend({"type": "function_call", "call_id": str(c.get("id")), "name": c.get("name"),
                      "arguments": shared.arguments(c)} for c in shared.tool_calls_of(message))
        return items
    return [{"role": "user", "content": [{"type": "input_text", "text": text}]}]


class Assembler:
    def __init__(self, emit_text: Emit, emit_thinking: Emit) -> None:
        self.emit_text, self.emit_thinking = emit_text, emit_thinking
        self.final: dict[str, Any] | None = None
        self.outcome: str | None = None

    def feed(self, event: Event) -> None:
        data = parse_event(event.data, f"event {event.event!r}")
        kind = data.get("type", event.event)
        if kind == "response.output_text.delta":
            self.emit_text(str(data.get("delta", "")))
        elif kind in THINKING_EVENTS:
            self.emit_thinking(str(data.get("delta", "")))
        elif kind == "error":
            raise ProviderError(None, f"stream error {data.get('code') or 'error'}: {data.get('message')}")
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            response = data.get("response")
            if not isinstance(response, dict):
                raise StreamError(f"malformed stream: {kind} without a response object")
            self.final, self.outcome = response, kind

    def response(self) -> tuple[dict[str, Any], str | None]:
        """The driver answer and the response id to hold (None when nothing is stored)."""
        final = self.final
        if final is None:
            raise StreamError("malformed stream: it ended before response.completed")
        if self.outcome == "response.failed":
            error = final.get("error") or {}
            code = f" {error['code']}" if error.get("code") else ""
            raise ProviderError(None, f"response failed{code}: {error.get('message') or 'no message'}")
        content = output_content(final.get("output"))
        if self.outcome == "response.incomplete":
            reason = (final.get("incomplete_details") or {}).get("reason")
            stop = "max_tokens" if reason == "max_output_tokens" else None
            answer: dict[str, Any] = {"stop_reason": stop or "error", "content": content}
            if stop is None:
                answer["error"] = f"the response is incomplete: {reason}"
        else:
            calls = any(b["type"] == "tool_call" for b in content)
            answer = {"stop_reason": "tool_call" if calls else "end_turn", "content": content}
        usage = report(final.get("usage"), USAGE)
        if usage:
            answer["usage"] = usage
        response_id = final.get("id")
        return answer, response_id if isinstance(response_id, str) and response_id else None


def output_content(output: Any) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = []
    for item in output if isinstance(output, list) else []:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "message":
            text = "".join(p.get("text", "") for p in item.get("content") or []
                           if isinstance(p, dict) and p.get("type") == "output_text")
            if text:
                content.append({"type": "text", "text": text})
        elif item.get("type") == "function_call":
            content.append({"type": "tool_call", "id": item.get("call_id"), "name": item.get("name"),
                            "input": parse_arguments(item.get("name"), str(item.get("arguments") or ""))})
    return content


def assemble(events: Iterable[Event], emit_text: Emit, emit_thinking: Emit) -> tuple[dict[str, Any], str | None]:
    assembler = Assembler(emit_text, emit_thinking)
    for event in events:
        assembler.feed(event)
        if assembler.final is not None:
            break
    return assembler.response()
