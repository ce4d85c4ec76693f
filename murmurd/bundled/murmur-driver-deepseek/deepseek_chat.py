"""DeepSeek chat completions: the model check, the body, and the chunk stream (or a non-streamed
`application/json` completion) assembled into a driver response, as upstream's
murmur-driver-deepseek 0.1.0 maps them.

Thinking mode (`thinking: {type: enabled}`, the default) streams `delta.reasoning_content`,
which becomes thinking chunks and a `thinking` block in the answer. DeepSeek refuses (400) an
assistant turn with tool calls that does not carry its reasoning back, so an assistant message
with tool calls is sent with `reasoning_content` from its first non-empty thinking block.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from driverkit import chat
from driverkit.chat import ChatStream, Emit
from driverkit.errors import ConfigError
from driverkit.sse import Event

MODELS = ("deepseek-v4-flash", "deepseek-v4-pro")
DEPRECATED = ("deepseek-chat", "deepseek-reasoner")
FINISH_REASONS = {"stop": "end_turn", "tool_calls": "tool_call", "length": "max_tokens"}
# thinking mode ignores or refuses these sampling parameters
THINKING_STRIPS = ("temperature", "top_p", "presence_penalty", "frequency_penalty")


def checked_model(model: str) -> str:
    if model in MODELS:
        return model
    if model in DEPRECATED:
        raise ConfigError(f"model {model!r} is deprecated (removal 2026-07-24); use {' or '.join(MODELS)}")
    raise ConfigError(f"model {model!r} is not supported; use {' or '.join(MODELS)}")


def _string(config: dict[str, Any], key: str, default: str) -> str:
    value = config.get(key)
    return value if isinstance(value, str) else default  # only string values are read, as upstream


def build_body(request: dict[str, Any], model: str, config: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    thinking = _string(config, "thinking", "enabled")
    enabled = thinking == "enabled"
    body: dict[str, Any] = {"model": model, "messages": messages_of(request), "stream": True,
                            "stream_options": {"include_usage": True},
                            "max_tokens": int(request.get("max_tokens") or 8192),
                            "thinking": {"type": thinking}}
    if enabled:
        body["reasoning_effort"] = _string(config, "reasoning_effort", "high")
    tools = [tool(t) for t in request.get("tools", []) if isinstance(t, dict)]
    if tools:
        body["tools"] = tools
    params = request.get("params")
    for key, value in (params.items() if isinstance(params, dict) else ()):
        if key not in body and not (enabled and key in THINKING_STRIPS):
            body[key] = value
    body.update(extra)
    body["stream"] = True
    return body


def tool(spec: dict[str, Any]) -> dict[str, Any]:
    function: dict[str, Any] = {"name": spec.get("name"),
                                "parameters": spec.get("parameters") or {"type": "object", "properties": {}}}
    if spec.get("description"):
        function["description"] = spec["description"]
    return {"type": "function", "function": function}


def _blocks(message: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    content = message.get("content")
    return [b for b in content if isinstance(b, dict) and b.get("type") == kind] if isinstance(content, list) else []


def _texts(message: dict[str, Any]) -> list[str]:
    return [b["text"] for b in _blocks(message, "text") if isinstance(b.get("text"), str)]


def _thinking_text(block: dict[str, Any]) -> str:
    value = block.get("text", block.get("thinking"))
    return value if isinstance(value, str) else ""


def messages_of(request: dict[str, Any]) -> list[dict[str, Any]]:
    wire: list[dict[str, Any]] = []
    if isinstance(request.get("system"), str) and request["system"]:
        wire.append({"role": "system", "content": request["system"]})
    for message in request.get("messages", []):
        if isinstance(message, dict):
            wire.append(convert(message))
    return wire


def convert(message: dict[str, Any]) -> dict[str, Any]:
    role = message.get("role")
    if role == "tool":
        if not message.get("tool_call_id"):
            raise ConfigError("a tool message has no tool_call_id")
        return {"role": "tool", "tool_call_id": str(message["tool_call_id"]), "content": "\n".join(_texts(message))}
    if role == "assistant":
        calls = _blocks(message, "tool_call")
        if not calls:
            return {"role": "assistant", "content": "\n".join(_texts(message))}
        wire: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [
            {"id": str(c.get("id")), "type": "function",
             "function": {"name": c.get("name"),
                          "arguments": json.dumps(c.get("input") if isinstance(c.get("input"), dict) else {},
                                                  ensure_ascii=False)}} for c in calls]}
        reasoning = next((t for t in map(_thinking_text, _blocks(message, "thinking")) if t), None)
        if reasoning is not None:
            wire["reasoning_content"] = reasoning
        return wire
    if role == "user":
        images = _blocks(message, "image")
        if not images:
            return {"role": "user", "content": "\n".join(_texts(message))}
        parts: list[dict[str, Any]] = []
        for block in message.get("content", []):
            if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
                parts.append({"type": "text", "text": block["text"]})
            elif isinstance(block, dict) and block.get("type") == "image":
                source = block.get("source") or {}
                parts.append({"type": "image_url", "image_url": {
                    "url": f"data:{source.get('media_type')};base64,{source.get('data')}"}})
        return {"role": "user", "content": parts}
    raise ConfigError(f"unknown message role {role!r}")


class Assembler(ChatStream):
    """DeepSeek's chunks: `reasoning_content` is kept as the answer's thinking; the first id and name of a call win."""

    USAGE = {"input_tokens": "prompt_tokens", "output_tokens": "completion_tokens",
             "cached_tokens": "prompt_cache_hit_tokens"}

    def response(self) -> dict[str, Any]:
        stop = FINISH_REASONS.get(self.finish_reason or "stop")
        if stop is None:
            return {"stop_reason": "error", "content": [],
                    "error": f"the model stopped with finish_reason {self.finish_reason!r}"}
        if self.calls and stop == "end_turn":  # a compatible server finishing a tool turn with "stop"
            stop = "tool_call"
        content: list[dict[str, Any]] = []
        if self.reasoning:
            content.append({"type": "thinking", "text": "".join(self.reasoning)})
        if self.calls:  # text is dropped on a tool-call turn, as upstream
            content += self.tool_call_blocks()
        elif self.text:
            content.append({"type": "text", "text": "".join(self.text)})
        return self.with_usage({"stop_reason": stop, "content": content})


def assemble(events: Iterable[Event], emit_text: Emit, emit_thinking: Emit) -> dict[str, Any]:
    return chat.assemble(Assembler(emit_text, emit_thinking), events)


def answer_whole(completion: dict[str, Any]) -> dict[str, Any]:
    """The non-streamed fallback (an `application/json` answer): the same map, no chunks emitted."""
    return chat.answer_whole(Assembler(chat.quiet, chat.quiet), completion)
