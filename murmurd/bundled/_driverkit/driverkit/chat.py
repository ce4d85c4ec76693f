"""Chat Completions chunk streams, read alike by every driver that speaks them (openai, deepseek).

`ChatStream` reads what the dialects share: `[DONE]`, an error object mid-stream, the usage
chunk, and choice 0's delta (content, reasoning, tool-call fragments merged by `index`, the
finish reason). A driver subclasses it to name its reasoning fields and how fragments merge,
and writes `response()`, where the dialects differ (what a tool-call turn keeps, what an
unknown finish means). A non-streamed completion (`choices[0].message`) is taken into the same
state (`take_whole`), so both answers come from one `response()`. Standard library only, so
tests import it under CPython.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from driverkit.errors import ProviderError, StreamError
from driverkit.sse import Event
from driverkit.stream_json import parse_arguments, parse_event
from driverkit.usage import report

Emit = Callable[[str], None]


def raise_error_object(body: dict[str, Any], where: str) -> None:
    """A provider's `error` object (in a chunk or a whole response) as a `ProviderError`."""
    if "error" not in body:
        return
    error = body["error"] if isinstance(body["error"], dict) else {"message": body["error"]}
    kind = error.get("type") or error.get("code") or "error"
    raise ProviderError(None, f"{where} error {kind}: {error.get('message')}")


class ChatStream:
    """One streamed answer's deltas, collected; `emit_*` hear each text or reasoning delta as it comes."""

    REASONING_FIELDS: tuple[str, ...] = ("reasoning_content",)
    """Delta fields read as reasoning, the first non-empty one wins."""
    FIRST_NAME_WINS = True
    """A tool call's id and name: the first fragment's (True) or the last id and every name
    fragment joined (False)."""
    USAGE: dict[str, str] = {}
    """The driver's usage map, as `driverkit.usage.report` reads it."""

    def __init__(self, emit_text: Emit, emit_thinking: Emit) -> None:
        self.emit_text, self.emit_thinking = emit_text, emit_thinking
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: Any = None
        self.done = False

    def feed(self, event: Event) -> None:
        if event.data.strip() == "[DONE]":
            self.done = True
            return
        chunk = parse_event(event.data, "chunk")
        raise_error_object(chunk, "stream")  # servers report a failure mid-stream as an error object
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                self._choice(choice)

    def take_whole(self, completion: dict[str, Any]) -> None:
        """A non-streamed completion, taken as if streamed; it emits nothing (no chunks on that path)."""
        raise_error_object(completion, "response")
        choices = completion.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else None
        if not isinstance(choice, dict):
            raise StreamError("malformed answer: the response has no choices[0]")
        message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
        reasoning = self._reasoning_of(message)
        if reasoning is not None:
            self.reasoning.append(reasoning)
        content = message.get("content")
        if isinstance(content, str) and content:
            self.text.append(content)
        calls = message.get("tool_calls")
        for index, call in enumerate(calls if isinstance(calls, list) else []):
            if isinstance(call, dict):
                self._fragment({**call, "index": call.get("index", index)})
        self.finish_reason = choice.get("finish_reason") or None
        self.usage = completion.get("usage") or None

    def _reasoning_of(self, part: dict[str, Any]) -> str | None:
        return next((part[f] for f in self.REASONING_FIELDS if isinstance(part.get(f), str) and part[f]), None)

    def _choice(self, choice: dict[str, Any]) -> None:
        delta = choice.get("delta") or {}
        reasoning = self._reasoning_of(delta)
        if reasoning is not None:
            self.reasoning.append(reasoning)
            self.emit_thinking(reasoning)
        content = delta.get("content")
        if isinstance(content, str) and content:
            self.text.append(content)
            self.emit_text(content)
        for call in delta.get("tool_calls") or []:
            if isinstance(call, dict):
                self._fragment(call)
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]

    def _fragment(self, call: dict[str, Any]) -> None:
        slot = self.calls.setdefault(call.get("index", len(self.calls)), {"id": None, "name": None, "arguments": []})
        function = call.get("function") or {}
        if self.FIRST_NAME_WINS:
            slot["id"] = slot["id"] or call.get("id")
            slot["name"] = slot["name"] or function.get("name")
        else:
            slot["id"] = call.get("id") or slot["id"]
            slot["name"] = (slot["name"] or "") + (function.get("name") or "")
        arguments = function.get("arguments")
        # a server sending an object rather than its JSON text is judged by the same parser
        slot["arguments"].append(arguments if isinstance(arguments, str) else json.dumps(arguments) if arguments else "")

    def tool_call_blocks(self) -> list[dict[str, Any]]:
        """The calls in index order as `tool_call` blocks, arguments parsed; one with no id is `call_<index>`."""
        return [{"type": "tool_call", "id": call["id"] or f"call_{index}", "name": call["name"] or "",
                 "input": parse_arguments(call["name"] or "", "".join(call["arguments"]))}
                for index, call in sorted(self.calls.items())]

    def with_usage(self, answer: dict[str, Any]) -> dict[str, Any]:
        """`answer`, with the usage the provider reported (if any) in the driver protocol's terms."""
        usage = report(self.usage, self.USAGE)
        if usage:
            answer["usage"] = usage
        return answer

    def response(self) -> dict[str, Any]:
        raise NotImplementedError


def assemble(stream: ChatStream, events: Iterable[Event]) -> dict[str, Any]:
    """Feed `events` to `stream` up to `[DONE]` (or their end), then its answer."""
    for event in events:
        stream.feed(event)
        if stream.done:
            break
    return stream.response()


def answer_whole(stream: ChatStream, completion: dict[str, Any]) -> dict[str, Any]:
    """A non-streamed completion's answer, by the same rules as the streamed one."""
    stream.take_whole(completion)
    return stream.response()


def quiet(_text: str) -> None:
    """An emit for the non-streamed path, which emits nothing."""
