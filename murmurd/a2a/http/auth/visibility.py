"""Which tasks a credential may read (pure).

An operator credential reads every task. A peer credential reads only the tasks it created (the
task records the creating credential's name): another capsule or partner holding a peer token
has no business reading the operator's prompts and answers, nor another peer's. The read routes
(tasks/get, tasks/list, tasks/resubscribe, the GET streams, the watch streams) answer a task it
may not read as they answer a task that does not exist, so its existence is not confirmed either.
Replies and cancels follow their own rule (`principal.at_least_as_trusted`).
"""

from __future__ import annotations

from murmurd.a2a.http.auth.principal import OPERATOR, Principal


def may_read(reader: Principal, creator: str | None) -> bool:
    """May `reader` read a task created by the credential named `creator`?"""
    return reader.origin == OPERATOR or (reader.name is not None and creator == reader.name)


def creator_filter(reader: Principal) -> str | None:
    """The creator a task listing is restricted to for `reader` (None: every task)."""
    return None if reader.origin == OPERATOR else (reader.name or "")
