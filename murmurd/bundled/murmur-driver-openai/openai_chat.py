"""The Chat Completions API: the body, and its chunk stream assembled into a driver response.

Chat is the default because every OpenAI-compatible server speaks it (vLLM, llama.cpp, Ollama).
Reasoning those servers stream as `delta.reasoning_content` or `delta.reasoning` becomes
thinking chunks; the API takes no reasoning back, so it is not kept in the answer.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

import openai_common as shared
from driverkit import chat
from driverkit.chat import ChatStream, Emit
from driverkit.errors import StreamError
from driverkit.sse import Event

FINISH_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_call", "function_call": "tool_call"}


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


class Assembler(ChatStream):
    """OpenAI-compatible chunks: `reasoning_content` or `reasoning` is streamed as thinking, not kept;
    a call's last id wins and its name fragments are joined."""

    REASONING_FIELDS = ("reasoning_content", "reasoning")
    FIRST_NAME_WINS = False
    USAGE = {"input_tokens": "prompt_tokens", "output_tokens": "completion_tokens",
             "cached_tokens": "prompt_tokens_details.cached_tokens"}

    def response(self) -> dict[str, Any]:
        if self.finish_reason is None:
            raise StreamError("malformed stream: it ended before a finish_reason")
        content: list[dict[str, Any]] = []
        if self.text:
            content.append({"type": "text", "text": "".join(self.text)})
        content += self.tool_call_blocks()
        # some compatible servers finish a tool-calling turn with "stop"
        stop = "tool_call" if self.calls else FINISH_REASONS.get(self.finish_reason)
        answer: dict[str, Any] = {"stop_reason": stop or "error", "content": content}
        if stop is None:
            answer["error"] = f"the model stopped with finish_reason {self.finish_reason!r}"
        return self.with_usage(answer)


def assemble(events: Iterable[Event], emit_text: Emit, emit_thinking: Emit) -> dict[str, Any]:
    return chat.assemble(Assembler(emit_text, emit_thinking), events)
