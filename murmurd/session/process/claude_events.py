"""Claude Code's `--output-format stream-json` (process-transport.md §6), one line at a time. Pure.

An `assistant` event holding anything but thinking is one turn (`tool_call` when a block is a
`tool_use`); a `result` event ends the stream, `success` with its text and anything else (or a
`success` flagged `is_error`, an API error Claude Code reports as its answer) as a failure; every other event (`system/init`, `user` tool results, rate limits) is ignored here:
the bridge traced each tool call when it ran it. A line that is not JSON fails the run.
"""

from __future__ import annotations

import json
from typing import Any

from murmurd.session.process.stream import Done, StreamFailed, Turn

_THINKING = ("thinking", "redacted_thinking")


def read_line(line: str) -> list[Turn | Done]:
    """The events one stdout line brings ([] for a blank or ignored line)."""
    line = line.strip()
    if not line:
        return []
    try:
        event = json.loads(line)
    except ValueError as exc:
        raise StreamFailed(f"malformed JSON on subprocess stdout: {exc}: {line[:500]}") from None
    if not isinstance(event, dict):
        raise StreamFailed(f"malformed JSON on subprocess stdout: not an object: {line[:500]}")
    kind = event.get("type")
    if kind == "assistant":
        turn = _assistant(event)
        return [turn] if turn is not None else []
    if kind == "result":
        result = event.get("result")
        if event.get("subtype") == "success" and event.get("is_error") is not True:
            return [Done(result if isinstance(result, str) else "")]
        if event.get("subtype") == "success":  # an API error Claude Code reports as its answer
            raise StreamFailed(f"claude returned error: {result if isinstance(result, str) and result else 'is_error'}")
        detail = event.get("result") if isinstance(event.get("result"), str) and event.get("result") else None
        raise StreamFailed(f"claude returned error: {detail or event.get('subtype') or 'no subtype'}")
    return []


def _assistant(event: dict[str, Any]) -> Turn | None:
    message = event.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    blocks = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
    if not any(b.get("type") not in _THINKING for b in blocks):
        return None  # only thinking (or nothing): not a turn, not traced
    tool_call = any(b.get("type") == "tool_use" for b in blocks)
    text = "".join(b["text"] for b in blocks if b.get("type") == "text" and isinstance(b.get("text"), str))
    return Turn("tool_call" if tool_call else "end_turn", text, json.dumps(content, ensure_ascii=False))
