"""An Anthropic Messages event stream assembled into a driver protocol response.

Text deltas are emitted as they arrive and thinking deltas as thinking chunks. Thinking blocks
come back in `content` with their signature (the API wants them again on the next tool turn);
the runtime keeps and returns them, and ignores them for the result text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from driverkit.errors import ProviderError, StreamError
from driverkit.sse import Event
from driverkit.usage import report

STOP_REASONS = {
    "end_turn": "end_turn",
    "stop_sequence": "end_turn",
    "tool_use": "tool_call",
    "max_tokens": "max_tokens",
    "model_context_window_exceeded": "max_tokens",
}
USAGE = {
    "input_tokens": "input_tokens",
    "output_tokens": "output_tokens",
    "cached_tokens": "cache_read_input_tokens",
    "cache_write_tokens": "cache_creation_input_tokens",
}

Emit = Callable[[str], None]


class Assembler:
    def __init__(self, emit_text: Emit, emit_thinking: Emit) -> None:
        self.emit_text, self.emit_thinking = emit_text, emit_thinking
        self.blocks: dict[int, dict[str, Any]] = {}
        self.partial_json: dict[int, list[str]] = {}
        self.usage: dict[str, Any] = {}
        self.stop_reason: str | None = None
        self.started = self.stopped = False

    def feed(self, event: Event) -> None:
        try:
            data = json.loads(event.data)
        except ValueError:
            raise StreamError(f"malformed stream: event {event.event!r} data is not JSON: {event.data[:120]!r}") from None
        if not isinstance(data, dict):
            raise StreamError(f"malformed stream: event {event.event!r} data is not an object")
        kind = data.get("type", event.event)
        if kind == "error":
            error = data.get("error") if isinstance(data.get("error"), dict) else {}
            raise ProviderError(None, f"stream error {error.get('type', 'error')}: {error.get('message', event.data[:200])}")
        if kind == "message_start":
            self.started = True
            self.usage.update(_fields(data.get("message", {}).get("usage")))
        elif kind == "content_block_start":
            self._start(data)
        elif kind == "content_block_delta":
            self._delta(data)
        elif kind == "content_block_stop":
            self._stop(data)
        elif kind == "message_delta":
            self.stop_reason = (data.get("delta") or {}).get("stop_reason") or self.stop_reason
            self.usage.update(_fields(data.get("usage")))
        elif kind == "message_stop":
            self.stopped = True

    def _block(self, data: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        index = data.get("index")
        if not isinstance(index, int) or index not in self.blocks:
            raise StreamError(f"malformed stream: {data.get('type')} for unknown block {index!r}")
        return index, self.blocks[index]

    def _start(self, data: dict[str, Any]) -> None:
        block = data.get("content_block")
        index = data.get("index")
        if not isinstance(block, dict) or not isinstance(index, int):
            raise StreamError("malformed stream: content_block_start without a block and an index")
        kind = block.get("type")
        if kind == "text":
            self.blocks[index] = {"type": "text", "text": block.get("text") or ""}
        elif kind == "tool_use":
            self.blocks[index] = {"type": "tool_call", "id": block.get("id"), "name": block.get("name"), "input": {}}
            self.partial_json[index] = []
        elif kind == "thinking":
            self.blocks[index] = {"type": "thinking", "thinking": block.get("thinking") or "",
                                  "signature": block.get("signature") or ""}
        elif kind == "redacted_thinking":
            self.blocks[index] = {"type": "redacted_thinking", "data": block.get("data") or ""}
        else:  # a block this driver does not use (server tools): kept out of the answer
            self.blocks[index] = {"type": f"ignored:{kind}"}

    def _delta(self, data: dict[str, Any]) -> None:
        index, block = self._block(data)
        delta = data.get("delta") or {}
        kind = delta.get("type")
        if kind == "text_delta":
            block["text"] += delta.get("text", "")
            self.emit_text(delta.get("text", ""))
        elif kind == "thinking_delta":
            block["thinking"] += delta.get("thinking", "")
            self.emit_thinking(delta.get("thinking", ""))
        elif kind == "signature_delta":
            block["signature"] = block.get("signature", "") + delta.get("signature", "")
        elif kind == "input_json_delta":
            self.partial_json.setdefault(index, []).append(delta.get("partial_json", ""))

    def _stop(self, data: dict[str, Any]) -> None:
        index, block = self._block(data)
        if block["type"] != "tool_call":
            return
        raw = "".join(self.partial_json.get(index, [])).strip()
        try:
            block["input"] = json.loads(raw) if raw else {}
        except ValueError:
            raise StreamError(f"malformed stream: tool_use {block.get('name')!r} input is not JSON: {raw[:120]!r}") from None

    def response(self) -> dict[str, Any]:
        if not self.started or not self.stopped:
            raise StreamError("malformed stream: it ended before message_stop" if self.started
                              else "malformed stream: no message_start event")
        content = [b for _, b in sorted(self.blocks.items()) if not b["type"].startswith("ignored:")]
        content = [b for b in content if not (b["type"] == "text" and not b["text"])]
        stop = STOP_REASONS.get(self.stop_reason or "")
        answer: dict[str, Any] = {"stop_reason": stop or "error", "content": content}
        if stop is None:
            answer["error"] = f"the model stopped with stop_reason {self.stop_reason!r}"
        usage = report(self.usage, USAGE)
        if usage:
            answer["usage"] = usage
        return answer


def _fields(usage: Any) -> dict[str, Any]:
    """The members a usage object carries, nulls left out (a later event adds, never erases)."""
    return {k: v for k, v in usage.items() if v is not None} if isinstance(usage, dict) else {}


def assemble(events: Iterable[Event], emit_text: Emit, emit_thinking: Emit) -> dict[str, Any]:
    assembler = Assembler(emit_text, emit_thinking)
    for event in events:
        if event.event == "ping":
            continue
        assembler.feed(event)
        if assembler.stopped:
            break
    return assembler.response()
