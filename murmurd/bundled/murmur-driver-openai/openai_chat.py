"""The Chat Completions API: the body, and its chunk stream assembled into a driver response.

Chat is the default because every OpenAI-compatible server speaks it (vLLM, llama.cpp, Ollama).
Reasoning those servers stream as `delta.reasoning_content` or `delta.reasoning` becomes
thinking chunks; the API takes no reasoning back, so it is not kept in the answer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

import openai_common as shared
from driverkit.errors import ProviderError, StreamError
from driverkit.sse import Event
from driverkit.stream_json import parse_arguments, parse_event
from driverkit.usage import report

FINISH_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_call", "function_call": "tool_call"}
USAGE = {"input_tokens": "prompt_tokens", "output_tokens": "completion_tokens",
         "cached_tokens": "prompt_tokens_details.cached_tokens"}

Emit = Callable[[str], None]


def max_tokens_field(endpoint: str, config: dict[str, Any]) -> str:
    """OpenAI's own API wants `max_completion_tokens` (reasoning models refuse `max_tokens`);
    compatible servers have long read `max_tokens`. `config.max_tokens_field` overrides."""
    chosen = config.get("max_tokens_field")
    if chosen in ("max_tokens", "max_completion_tokens"):
        return chosen
    return "max_completion_tokens" if urlsplit(endpoint).hostname == "api.openai.com" else "max_tokens"


def build_body(request: dict[str, Any], model: str, endpoint: str, config: dict[str, Any],
               extra: dict[str, Any]) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    if isinstance(request.get("system"), str) and request["system"]:
        messages.append({"role": "system", "content": request["system"]})
    for message in request.get("messages", []):
        if isinstance(message, dict):
            messages.extend(convert(message))
    body: dict[str, Any] = {"model": model, "messages": messages, "stream": True}
    if config.get("stream_usage", True) is not False:
        body["stream_options"] = {"include_usage": True}
    body[max_tokens_field(endpoint, config)] = int(request.get("max_tokens") or 8192)
    tools = [tool(t) for t in request.get("tools", []) if isinstance(t, dict)]
    if tools:
        body["tools"] = tools
    key = request.get("prompt_cache_key")
    if isinstance(key, str) and key and config.get("prompt_cache_key", True) is not False:
        body["prompt_cache_key"] = key
    body.update(extra)
    return body


def tool(spec: dict[str, Any]) -> dict[str, Any]:
    function: dict[str, Any] = {"name": spec.get("name")}
    if spec.get("description"):
        function["description"] = spec["description"]
    function["parameters"] = spec.get("parameters") or {"type": "object", "properties": {}}
    return {"type": "function", "function": function}


def convert(message: dict[str, Any]) -> list[dict[str, Any]]:
    role = message.get("role")
    if role == "tool":
        return [{"role": "tool", "tool_call_id": str(message.get("tool_call_id")), "content": shared.text_of(message)}]
    if role == "assistant":
        wire: dict[str, Any] = {"role": "assistant", "content": shared.text_of(message) or None}
        calls = shared.tool_calls_of(message)
        if calls:
            wire["tool_calls"] = [{"id": str(c.get("id")), "type": "function",
                                   "function": {"name": c.get("name"), "arguments": shared.arguments(c)}} for c in calls]
        elif wire["content"] is None:
            wire["content"] = ""
        return [wire]
    return [{"role": "user", "content": shared.text_of(message)}]


class Assembler:
    def __init__(self, emit_text: Emit, emit_thinking: Emit) -> None:
        self.emit_text, self.emit_thinking = emit_text, emit_thinking
        self.text: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: Any = None
        self.done = False

    def feed(self, event: Event) -> None:
        if event.data.strip() == "[DONE]":
            self.done = True
            return
        chunk = parse_event(event.data, "chunk")
        if "error" in chunk:  # servers report a failure mid-stream as an error object
            error = chunk["error"] if isinstance(chunk["error"], dict) else {"message": chunk["error"]}
            kind = error.get("type") or error.get("code") or "error"
            raise ProviderError(None, f"stream error {kind}: {error.get('message')}")
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                self._choice(choice)

    def _choice(self, choice: dict[str, Any]) -> None:
        delta = choice.get("delta") or {}
        thinking = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(thinking, str) and thinking:
            self.emit_thinking(thinking)
        if isinstance(delta.get("content"), str) and delta["content"]:
            self.text.append(delta["content"])
            self.emit_text(delta["content"])
        for call in delta.get("tool_calls") or []:
            index = call.get("index", len(self.calls))
            slot = self.calls.setdefault(index, {"id": None, "name": "", "arguments": []})
            slot["id"] = call.get("id") or slot["id"]
            function = call.get("function") or {}
            slot["name"] += function.get("name") or ""
            slot["arguments"].append(function.get("arguments") or "")
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]

    def response(self) -> dict[str, Any]:
        if self.finish_reason is None:
            raise StreamError("malformed stream: it ended before a finish_reason")
        content: list[dict[str, Any]] = []
        if self.text:
            content.append({"type": "text", "text": "".join(self.text)})
        for index, call in sorted(self.calls.items()):
            content.append({"type": "tool_call", "id": call["id"] or f"call_{index}", "name": call["name"],
                            "input": parse_arguments(call["name"], "".join(call["arguments"]))})
        # some compatible servers finish a tool-calling turn with "stop"
        stop = "tool_call" if self.calls else FINISH_REASONS.get(self.finish_reason)
        answer: dict[str, Any] = {"stop_reason": stop or "error", "content": content}
        if stop is None:
            answer["error"] = f"the model stopped with finish_reason {self.finish_reason!r}"
        usage = report(self.usage, USAGE)
        if usage:
            answer["usage"] = usage
        return answer


def assemble(events: Iterable[Event], emit_text: Emit, emit_thinking: Emit) -> dict[str, Any]:
    assembler = Assembler(emit_text, emit_thinking)
    for event in events:
        assembler.feed(event)
        if assembler.done:
            break
    return assembler.response()
