"""What both OpenAI APIs share: message text and tool-call arguments (checked JSON: driverkit.stream_json)."""

from __future__ import annotations

import json
from typing import Any



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
