"""Conversation messages as the loop keeps them, and their driver wire form (runtime-notes §2).

The loop keeps `id` (`msg_` + uuid) and `source_id` on every message for bookkeeping; neither
reaches a driver, because a uuid at the head of a cached prefix would defeat prompt caching.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from murmurd.ids import random_bytes


def new_message_id() -> str:
    return f"msg_{uuid.UUID(bytes=random_bytes(16), version=4)}"


@dataclass
class Message:
    role: str  # user | assistant | tool
    content: list[dict[str, Any]]
    tool_call_id: str | None = None
    is_error: bool | None = None
    id: str = field(default_factory=new_message_id)
    source_id: str | None = None

    def to_driver(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"role": self.role}
        if self.role == "tool":
            wire["tool_call_id"] = self.tool_call_id
            wire["is_error"] = bool(self.is_error)
        wire["content"] = self.content
        return wire

    @property
    def text(self) -> str:
        return "".join(block.get("text", "") for block in self.content if block.get("type") == "text")

    def tool_calls(self) -> list[dict[str, Any]]:
        return [block for block in self.content if block.get("type") == "tool_call"]


def user_message(text: str, source_id: str | None = None) -> Message:
    return Message("user", [{"type": "text", "text": text}], source_id=source_id)


def tool_message(call_id: str, text: str, is_error: bool) -> Message:
    return Message("tool", [{"type": "text", "text": text}], tool_call_id=call_id, is_error=is_error)


def pairing_problem(messages: list[Message]) -> str | None:
    """Why a message list's tool calls and tool answers do not pair up, or None when they do."""
    open_calls: list[str] = []
    for message in messages:
        if message.role == "assistant":
            if open_calls:
                return f"tool call(s) {', '.join(open_calls)} have no tool answer"
            open_calls = [str(call.get("id")) for call in message.tool_calls()]
        elif message.role == "tool":
            if message.tool_call_id not in open_calls:
                return f"tool answer {message.tool_call_id!r} answers no preceding tool call"
            open_calls.remove(message.tool_call_id)
        elif open_calls:
            return f"tool call(s) {', '.join(open_calls)} have no tool answer"
    return f"tool call(s) {', '.join(open_calls)} have no tool answer" if open_calls else None
