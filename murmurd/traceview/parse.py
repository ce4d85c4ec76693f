"""`trace.jsonl` lines into checked events (observability fact sheet §5, "Parsing").

Every line must decode to a JSON object; the events `mur trace` reads must carry their required
fields with the right JSON types. Unknown event types and unknown keys are kept but never
required, so traces written by upstream's runtime and by murmurd both parse. Blank lines are
skipped (a file ends with a newline).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from murmurd.traceview.errors import BAD_TRACE, ReadError

_INT, _STR = "integer", "string"

# event type -> required field -> JSON type (fact sheet §5).
REQUIRED: dict[str, dict[str, str]] = {
    "session_start": {"session_id": _STR, "capsule_name": _STR, "capsule_version": _STR, "model": _STR,
                      "max_turns": _INT},
    "inference": {"turn": _INT, "decision": _STR},
    "tool_call": {"tool_name": _STR, "duration_ms": _INT, "status": _STR},
    "skill_call": {"skill_name": _STR, "duration_ms": _INT, "status": _STR},
    "shell": {"exit_code": _INT, "duration_ms": _INT},
    "compaction": {"turn": _INT, "tokens_before": _INT, "tokens_after": _INT},
    "session_end": {"total_turns": _INT, "total_input_tokens": _INT, "total_output_tokens": _INT,
                    "total_tool_calls": _INT, "total_shell_calls": _INT, "duration_ms": _INT, "exit_status": _STR},
    "task_start": {"task_id": _STR, "context_id": _STR, "source": _STR},
    "task_end": {"task_id": _STR, "exit_status": _STR, "duration_ms": _INT, "turns": _INT, "input_tokens": _INT,
                 "output_tokens": _INT, "tool_calls": _INT, "shell_calls": _INT},
    "task_reopened": {"hook_name": _STR, "reason": _STR, "reopen_number": _INT},
}


@dataclass(frozen=True)
class Event:
    line: int  # 1-based line number in the file
    type: str
    fields: dict[str, Any]

    def get(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key, default)


@dataclass
class Trace:
    path: str  # as shown in messages
    events: list[Event] = field(default_factory=list)

    def of(self, *types: str) -> list[Event]:
        return [e for e in self.events if e.type in types]

    def last(self, event_type: str) -> Event | None:
        return next((e for e in reversed(self.events) if e.type == event_type), None)

    @property
    def session_id(self) -> str:
        start = self.last("session_start")
        return start.get("session_id") if start is not None else ""


def _has_type(value: Any, kind: str) -> bool:
    if kind == _INT:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, str)


def _event(raw: str, path: str, number: int) -> Event:
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise ReadError(BAD_TRACE, f"{path}:{number}: not a JSON line ({exc})") from None
    except RecursionError:
        raise ReadError(BAD_TRACE, f"{path}:{number}: JSON nested too deeply") from None
    if not isinstance(value, dict):
        raise ReadError(BAD_TRACE, f"{path}:{number}: not a JSON object")
    event_type = value.get("event_type")
    if not isinstance(event_type, str):
        raise ReadError(BAD_TRACE, f"{path}:{number}: no string event_type")
    for name, kind in REQUIRED.get(event_type, {}).items():
        if not _has_type(value.get(name), kind):
            got = "missing" if name not in value else f"not a {kind}"
            raise ReadError(BAD_TRACE, f"{path}:{number}: {event_type}.{name} is {got}")
    return Event(number, event_type, value)


def parse_trace(data: bytes | str, path: str, *, allow_open: bool = False) -> Trace:
    """Every line checked; `E-TRC-001` (with `path:line`) for the first bad one (not UTF-8, not a
    JSON object, a required field missing), an empty file, or no `session_start`/`session_end`
    (with `allow_open`, a missing `session_end` is a session still running)."""
    trace = Trace(path)
    lines = data.split(b"\n") if isinstance(data, bytes) else [s.encode("utf-8", "surrogatepass") for s in data.split("\n")]
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ReadError(BAD_TRACE, f"{path}:{number}: not UTF-8") from None
        trace.events.append(_event(text, path, number))
    if not trace.events:
        raise ReadError(BAD_TRACE, f"{path}:1: empty trace")
    for needed in ("session_start",) if allow_open else ("session_start", "session_end"):
        if trace.last(needed) is None:
            raise ReadError(BAD_TRACE, f"{path}:{len(lines)}: no {needed} (an incomplete session)")
    return trace
