"""Redundant calls: a resource read again with no mutate between (fact sheet §5, the seed's
`murmur:tool/run` metadata).

Only `tool_call` lines count, in file order, one map for the whole file. A call's identity is its
`resource_id` (byte-equal), else the first string among the input's path-like keys. A `read` of
an identity already read is flagged; a `mutate`, an undeclared effect or anything else forgets
the identity and is never flagged. A call with no identity is ignored. `status` is not read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from murmurd.traceview.parse import Event

PATH_KEYS = ("path", "file", "file_path", "filepath", "filename")


@dataclass(frozen=True)
class RedundantCall:
    turn: int
    tool_name: str
    resource: str
    prior_turn: int
    line: int  # the flagged call's line in the trace

    def to_json(self) -> dict[str, Any]:
        return {"turn": self.turn, "tool_name": self.tool_name, "resource": self.resource,
                "prior_turn": self.prior_turn, "line": self.line}


def identity(call: Event) -> str | None:
    """`resource_id` when present and non-empty, else the first path-like input string."""
    resource = call.get("resource_id")
    if isinstance(resource, str) and resource:
        return resource
    given = call.get("input")
    if not isinstance(given, dict):
        return None
    lowered: dict[str, Any] = {}
    for key, value in given.items():
        if isinstance(key, str):
            lowered.setdefault(key.lower(), value)
    for key in PATH_KEYS:
        value = lowered.get(key)
        if isinstance(value, str):
            return value
    return None


def redundant_calls(events: Iterable[Event]) -> list[RedundantCall]:
    last_read: dict[str, int] = {}
    found: list[RedundantCall] = []
    for call in events:
        if call.type != "tool_call":
            continue
        key = identity(call)
        if key is None:
            continue
        turn = call.get("turn") if isinstance(call.get("turn"), int) else 0
        if call.get("state_effect") == "read":
            if key in last_read:
                found.append(RedundantCall(turn, call.get("tool_name"), key, last_read[key], call.line))
            last_read[key] = turn
        else:
            last_read.pop(key, None)
    return found
