"""The task store protocol every backend implements, and the retention rules they share.

`TaskStore` is the whole storage interface, as httpx keeps one transport interface with several
transports beside it: `SqliteTaskStore` (the embedded default), `MemoryTaskStore` (no state
directory, tests) and `PostgresTaskStore` (several replicas on one database). Records travel as
`TaskRecord.to_json()`, so every part kind and artifact survives verbatim.

Finished tasks (terminal: completed, failed, canceled, rejected) are kept under a `Retention`
policy, by age and by count, so a flood of rejected sends cannot grow the store without bound;
tasks still running are never pruned.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from murmurd.a2a.core.tasks import TERMINAL_STATES, TaskRecord, TaskState, now_ms

INTERRUPTED_MESSAGE = "interrupted: daemon restarted"

Records = list[TaskRecord]
Ids = list[str]
StoredMessages = list[dict[str, Any]]
TERMINAL_VALUES = tuple(sorted(s.value for s in TERMINAL_STATES))
REJECTED = (TaskState.REJECTED.value,)
ANSWERED = tuple(v for v in TERMINAL_VALUES if v not in REJECTED)
COUNT_CLASSES = (REJECTED, ANSWERED)  # each keeps `max_count`: a flood of rejections evicts no answer
LIVE_VALUES = tuple(sorted(s.value for s in TaskState if not s.terminal))
log = logging.getLogger("murmurd.a2a.store")

# Why `TaskStore.create` inserted nothing: a task with that id exists, or (for a credential that
# may only join its own contexts) the context holds another credential's task.
ID_TAKEN = "id-taken"
CONTEXT_FOREIGN = "context-foreign"
CreateRefusal = Literal["id-taken", "context-foreign"]


def member_name(principal: str | None) -> str:
    """How a task's creating credential is recorded among its context's members (`""`: none
    configured, the anonymous operator)."""
    return principal or ""

_USERINFO = re.compile(r"(?<=//).*@", re.DOTALL)  # greedy: to the last `@`, however the password is written
_SECRET_PARAMETERS = re.compile(r"(?i)\b((?:ssl)?password|passfile)=[^&#]*")


def redact(location: str) -> str:
    """A store location (a connection string) as messages and logs may show it: no user
    information (up to the last `@`, so an unescaped `@` or `/` in a password hides it too)
    and no password given as a parameter."""
    return _SECRET_PARAMETERS.sub(r"\1=***", _USERINFO.sub("***@", location, count=1))


class TaskStoreError(Exception):
    """The task store cannot be opened; the message names it and how to recover."""


class StoreUnreachable(Exception):
    """A write did not reach a shared store (connection refused, lost or timed out): worth trying
    again once it answers, unlike a write the store refused."""


@dataclass(frozen=True)
class Retention:
    """How long finished tasks stay answerable: at most `max_age_secs` after their last change,
    and only the `max_count` most recently changed (None: no limit of that kind). Rejected tasks
    are counted apart from the others (completed, failed, canceled), so a flood of rejected
    sends never pushes out a finished task's answer."""

    max_age_secs: float | None = 7 * 24 * 3600.0
    max_count: int | None = 10_000

    def cutoff_ms(self, now: int) -> int | None:
        """Finished tasks last changed before this are pruned."""
        return None if self.max_age_secs is None else now - int(self.max_age_secs * 1000)

    @property
    def slack(self) -> int:
        """Terminal writes a store may take between count prunes (a tenth of the cap)."""
        return max(1, (self.max_count or 0) // 10)


NO_RETENTION = Retention(max_age_secs=None, max_count=None)


class TaskStore(Protocol):
    # True when a `put` of a task this daemon holds is never refused nor unreachable (one daemon
    # alone on its store: SQLite's file lock, memory); False for a shared database, where the
    # save that starts a task can give it to another daemon or put it off.
    keeps_its_tasks: bool

    async def put(self, record: TaskRecord) -> bool:
        """Insert or replace the record; durable when this returns. False when the record is not
        this daemon's to write (replicas: another replica owns the task now), and nothing changed."""

    async def create(self, record: TaskRecord, *, exclusive_context: bool = False) -> CreateRefusal | None:
        """Insert a new task in one atomic step, and record its creator among its context's
        members; None when it was inserted. Nothing is written, and the refusal says why, when a
        task with its id exists (ID_TAKEN: never overwritten, whoever wrote it), or, with
        `exclusive_context` (a credential that may join only its own contexts), when the context
        has a member other than the record's creator (CONTEXT_FOREIGN)."""

    async def context_members(self, context_id: str) -> set[str]:
        """Every credential that created a task in the context (`member_name`), whether or not
        those tasks are still retained: kept until `forget_context`."""

    async def open_contexts(self, principal: str | None, context_id: str | None) -> tuple[int, bool]:
        """How many contexts hold an unfinished task `principal` created, and whether
        `context_id` is one of them."""

    async def orphaned_contexts(self, limit: int = 100) -> Ids:
        """Contexts with members recorded but no task retained (their last task was pruned)."""

    async def contexts_with_tasks(self, context_ids: Collection[str]) -> set[str]:
        """Which of `context_ids` hold a retained task, in one round trip (the workdir sweep
        asks it of every closed context session at once, not one count each)."""

    async def forget_context(self, context_id: str) -> bool:
        """Delete the context's members and stored history, when it holds no task (in one step:
        no history outlives the record of whose it is); whether it did."""

    async def get(self, task_id: str) -> TaskRecord | None: ...

    async def list(self, context_id: str | None = None, limit: int = 100, offset: int = 0,
                   state: TaskState | None = None, principal: str | None = None) -> Records:
        """Most recently updated first, optionally only one context, one state and one creating
        credential (`principal`: a peer reads only its own tasks); the filters apply before
        `offset` and `limit`, so a filtered page is full when enough tasks match."""

    async def count(self, context_id: str | None = None, state: TaskState | None = None,
                    principal: str | None = None) -> int:
        """How many tasks match the filters, whatever the page (A2A `ListTasks.totalSize`)."""

    async def mark_interrupted(self, message: str = INTERRUPTED_MESSAGE) -> Ids:
        """At startup: every non-terminal record this daemon left becomes FAILED with `message`;
        returns their ids. (A shared store scopes it to the restarting replica's own tasks.)"""

    async def prune(self, retention: Retention) -> int:
        """Delete finished tasks past the retention policy (never a non-terminal one); returns
        how many went."""

    async def load_history(self, context_id: str) -> StoredMessages | None:
        """A threaded context's stored conversation, or None when this store keeps no histories
        (the embedded stores leave them in the context's workdir, where hooks read them)."""

    async def save_history(self, context_id: str, messages: StoredMessages) -> None:
        """Replace the context's stored conversation (a no-op where histories live in files)."""

    async def ping(self) -> None:
        """One cheap round trip; raises when the store is unreachable (readiness probes)."""

    async def close(self) -> None: ...


async def prune_periodically(store: TaskStore, retention: Retention, interval_secs: float) -> None:
    """Apply `retention` now and every `interval_secs` until cancelled (age limits need a clock,
    count limits are also enforced by the stores as they write)."""
    while True:
        try:
            await store.prune(retention)
        except Exception:  # a failed prune is retried on the next tick, it never stops serving
            log.exception("pruning finished tasks failed")
        await asyncio.sleep(interval_secs)


def prunable(records: Records, retention: Retention, now: int) -> Ids:
    """Ids of the finished records `retention` no longer keeps (pure)."""
    finished = sorted((r for r in records if r.state.terminal),
                      key=lambda r: (r.updated_at, r.created_at, r.id), reverse=True)
    cutoff = retention.cutoff_ms(now)
    aged = {r.id for r in finished if cutoff is not None and r.updated_at < cutoff}
    over: Ids = []
    if retention.max_count is not None:
        for states in COUNT_CLASSES:
            kept = [r.id for r in finished if r.id not in aged and r.state.value in states]
            over += kept[retention.max_count:]
    return sorted(aged) + over


def interrupt(record: TaskRecord, message: str) -> TaskRecord:
    """The record, FAILED with `message` (the daemon that ran it is gone)."""
    record.state = TaskState.FAILED
    record.status_message = message
    record.updated_at = now_ms()
    return record
