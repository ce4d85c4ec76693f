"""codex exec's `--json` stream (process-transport.md §7), one line at a time. Pure.

`item.completed` of an `agent_message` or an `mcp_tool_call` is one turn (the last message is
the result); a `command_execution` is a host command that got past the disabled features;
`turn.completed` ends the stream; `turn.failed` and a top-level `error` fail it. Lines that are
not JSON are progress text codex sometimes prints: skipped. codex's warning items (`type:
error` inside `item.completed`) are no failure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from murmurd.session.process.stream import Done, HostCommand, StreamFailed, Turn


@dataclass
class CodexStream:
    """The stream's memory: the last agent message is the result."""

    last_message: str = ""

    def read_line(self, line: str) -> list[Turn | HostCommand | Done]:
        try:
            event = json.loads(line)
        except ValueError:
            return []
        if not isinstance(event, dict):
            return []
        kind = event.get("type")
        if kind == "item.completed" and isinstance(event.get("item"), dict):
            return self._item(event["item"])
        if kind == "turn.completed":
            return [Done(self.last_message)]
        if kind in ("turn.failed", "error"):
            error = event.get("error")
            message = error.get("message") if isinstance(error, dict) else None
            raise StreamFailed(f"codex returned error: {message or event.get('message') or kind}")
        return []

    def _item(self, item: dict[str, Any]) -> list[Turn | HostCommand | Done]:
        kind = item.get("type")
        if kind == "agent_message":
            text = item.get("text") if isinstance(item.get("text"), str) else ""
            self.last_message = text
            return [Turn("end_turn", text, text)]
        if kind == "mcp_tool_call":
            tool = item.get("tool") if isinstance(item.get("tool"), str) else None
            return [Turn("tool_call", "", json.dumps(item, ensure_ascii=False), tool)]
        if kind == "command_execution":
            code = item.get("exit_code")
            output = item.get("aggregated_output")
            return [HostCommand(str(item.get("command") or ""), code if isinstance(code, int) else None,
                                output if isinstance(output, str) else "")]
        return []
