"""A non-durable task store: no state directory, or tests."""

from __future__ import annotations

import json
from collections.abc import Collection

from murmurd.a2a.stores.base import (
    CONTEXT_FOREIGN,
    ID_TAKEN,
    INTERRUPTED_MESSAGE,
    NO_RETENTION,
    Ids,
    Records,
    Retention,
    CreateRefusal,
    StoredMessages,
    interrupt,
    member_name,
    prunable,
)
from murmurd.a2a.core.tasks import TaskRecord, TaskState, now_ms
from murmurd.text import json_text


class MemoryTaskStore:
    """A non-durable store (tests, or no --state-dir). Keeps JSON copies, like SQLite does, so
    callers mutating a returned record never change the stored one."""

    keeps_its_tasks = True  # see TaskStore

    def __init__(self, retention: Retention = NO_RETENTION) -> None:
        self._rows: dict[str, str] = {}
        self._members: dict[str, set[str]] = {}  # context id -> who created a task in it
        self.retention = retention
        self._terminal_puts = 0
        self._closed = False

    def _all(self) -> Records:
        return [TaskRecord.from_json(json.loads(row)) for row in self._rows.values()]

    async def put(self, record: TaskRecord) -> bool:
        self._rows[record.id] = json_text(record.to_json())
        if record.state.terminal and self.retention.max_count is not None:
            self._terminal_puts += 1
            if self._terminal_puts >= self.retention.slack:
                await self.prune(Retention(max_age_secs=None, max_count=self.retention.max_count))
        return True

    async def create(self, record: TaskRecord, *, exclusive_context: bool = False) -> CreateRefusal | None:
        # no await before the write: one step of the event loop, so nothing can slip between
        member = member_name(record.principal)
        members = self._members.get(record.context_id, set())
        if exclusive_context and members - {member}:
            return CONTEXT_FOREIGN
        if record.id in self._rows:
            return ID_TAKEN
        self._members.setdefault(record.context_id, set()).add(member)
        await self.put(record)
        return None

    async def context_members(self, context_id: str) -> set[str]:
        return set(self._members.get(context_id, set()))

    async def open_contexts(self, principal: str | None, context_id: str | None) -> tuple[int, bool]:
        live = {r.context_id for r in self._all() if r.principal == principal and not r.state.terminal}
        return len(live), context_id in live

    async def orphaned_contexts(self, limit: int = 100) -> Ids:
        held = {r.context_id for r in self._all()}
        return [c for c in self._members if c not in held][:limit]

    async def contexts_with_tasks(self, context_ids: Collection[str]) -> set[str]:
        wanted = set(context_ids)
        return {r.context_id for r in self._all() if r.context_id in wanted}

    async def forget_context(self, context_id: str) -> bool:
        if any(r.context_id == context_id for r in self._all()):
            return False
        return self._members.pop(context_id, None) is not None

    async def prune(self, retention: Retention) -> int:
        self._terminal_puts = 0
        doomed = prunable(self._all(), retention, now_ms())
        for task_id in doomed:
            del self._rows[task_id]
        return len(doomed)

    async def get(self, task_id: str) -> TaskRecord | None:
        row = self._rows.get(task_id)
        return TaskRecord.from_json(json.loads(row)) if row is not None else None

    def _matching(self, context_id: str | None, state: TaskState | None, principal: str | None) -> Records:
        return [r for r in self._all()
                if (context_id is None or r.context_id == context_id) and (state is None or r.state is state)
                and (principal is None or r.principal == principal)]

    async def list(self, context_id: str | None = None, limit: int = 100, offset: int = 0,
                   state: TaskState | None = None, principal: str | None = None) -> Records:
        records = self._matching(context_id, state, principal)
        records.sort(key=lambda r: (r.updated_at, r.created_at, r.id), reverse=True)
        return records[offset:offset + limit]

    async def count(self, context_id: str | None = None, state: TaskState | None = None,
                    principal: str | None = None) -> int:
        return len(self._matching(context_id, state, principal))

    async def mark_interrupted(self, message: str = INTERRUPTED_MESSAGE) -> Ids:
        ids: Ids = []
        for record in self._all():
            if not record.state.terminal:
                await self.put(interrupt(record, message))
                ids.append(record.id)
        return ids

    async def load_history(self, context_id: str) -> StoredMessages | None:
        return None

    async def save_history(self, context_id: str, messages: StoredMessages) -> None:
        return None

    async def ping(self) -> None:
        if self._closed:
            raise RuntimeError("task store is closed")

    async def close(self) -> None:
        self._closed = True
