"""What both OpenAI APIs share: message text, tool-call arguments, and the usage mapping."""

from __future__ import annotations

import json
from typing import Any

from driverkit.errors import StreamError


def text_of(message: dict[str, Any]) -> str:
    blocks = message.get("content")
    if not isinstance(blocks, list):
        return ""
    return "".join(b.get("text", "") for b in blocks if isinstance(b, dict) and b.get("type") == "text"
                   and isinstance(b.get("text"), str))


def tool_calls_of(message: dict[str, Any]) -> list[dict[str, Any]]:
    blocks = message.get("content")
    return [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_call"] if isinstance(blocks, list) else []


def arguments(call: dict[str, Any]) -> str:
    tool_input = call.get("input")
    return json.dumps(tool_input if isinstance(tool_input, dict) else {}, ensure_ascii=False)


def parse_arguments(name: Any, raw: str) -> dict[str, Any]:
    """A tool call's JSON arguments; the model writing something else is a clear failure."""
    raw = raw.strip()
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        raise StreamError(f"the model's arguments for tool {name!r} are not JSON: {raw[:120]!r}") from None
    if not isinstance(value, dict):
        raise StreamError(f"the model's arguments for tool {name!r} are not a JSON object: {raw[:120]!r}")
    return value


def parse_event(data: str, where: str) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except ValueError:
        raise StreamError(f"malformed stream: {where} data is not JSON: {data[:120]!r}") from None
    if not isinstance(value, dict):
        raise StreamError(f"malformed stream: {where} data is not an object")
    return value
