"""Durable task records, so `tasks/get` still answers after the daemon restarts.

`TaskStore` is the whole storage interface: a shared store (several daemons behind one load
balancer) replaces `SqliteTaskStore` by implementing these eight methods. Records travel as
`TaskRecord.to_json()`, so every part kind and artifact survives verbatim.

SQLite runs on one dedicated thread per store: the event loop never blocks on disk, and
writes from many asyncio tasks are serialised without locks of our own.

Finished tasks (terminal: completed, failed, canceled, rejected) are kept under a `Retention`
policy, by age and by count, so a flood of rejected sends cannot grow the store without bound;
tasks still running are never pruned.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from murmurd.a2a.tasks import TERMINAL_STATES, TaskRecord, TaskState, now_ms
from murmurd.text import json_text

INTERRUPTED_MESSAGE = "interrupted: daemon restarted"
DEFAULT_FILENAME = "tasks.sqlite3"

_T = TypeVar("_T")


class TaskStoreError(Exception):
    """The task store cannot be opened; the message names the file and how to recover."""

_Records = list[TaskRecord]
_Ids = list[str]
_TERMINAL_VALUES = tuple(sorted(s.value for s in TERMINAL_STATES))
_REJECTED = (TaskState.REJECTED.value,)
_ANSWERED = tuple(v for v in _TERMINAL_VALUES if v not in _REJECTED)
_COUNT_CLASSES = (_REJECTED, _ANSWERED)  # each keeps `max_count`: a flood of rejections evicts no answer
log = logging.getLogger("murmurd.a2a.store")


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
    async def put(self, record: TaskRecord) -> None:
        """Insert or replace the record; durable when this returns."""

    async def get(self, task_id: str) -> TaskRecord | None: ...

    async def list(self, context_id: str | None = None, limit: int = 100, offset: int = 0,
                   state: TaskState | None = None) -> _Records:
        """Most recently updated first, optionally only one context and one state; the filters
        apply before `offset` and `limit`, so a filtered page is full when enough tasks match."""

    async def count(self, context_id: str | None = None, state: TaskState | None = None) -> int:
        """How many tasks match the filters, whatever the page (A2A `ListTasks.totalSize`)."""

    async def mark_interrupted(self, message: str = INTERRUPTED_MESSAGE) -> _Ids:
        """At startup: every non-terminal record becomes FAILED with `message`; returns their ids.
        (A store shared by several daemons must scope this to the restarting daemon's tasks.)"""

    async def prune(self, retention: Retention) -> int:
        """Delete finished tasks past the retention policy (never a non-terminal one); returns
        how many went."""

    async def ping(self) -> None:
        """The cheapest round trip to the storage (readiness); raises when it cannot answer."""

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


def _prunable(records: _Records, retention: Retention, now: int) -> _Ids:
    """Ids of the finished records `retention` no longer keeps (pure)."""
    finished = sorted((r for r in records if r.state.terminal),
                      key=lambda r: (r.updated_at, r.created_at, r.id), reverse=True)
    cutoff = retention.cutoff_ms(now)
    aged = {r.id for r in finished if cutoff is not None and r.updated_at < cutoff}
    over: _Ids = []
    if retention.max_count is not None:
        for states in _COUNT_CLASSES:
            kept = [r.id for r in finished if r.id not in aged and r.state.value in states]
            over += kept[retention.max_count:]
    return sorted(aged) + over


def _interrupt(record: TaskRecord, message: str) -> TaskRecord:
    record.state = TaskState.FAILED
    record.status_message = message
    record.updated_at = now_ms()
    return record


class MemoryTaskStore:
    """A non-durable store (tests, or no --state-dir). Keeps JSON copies, like SQLite does, so
    callers mutating a returned record never change the stored one."""

    def __init__(self, retention: Retention = NO_RETENTION) -> None:
        self._rows: dict[str, str] = {}
        self.retention = retention
        self._terminal_puts = 0
        self._closed = False

    def _all(self) -> _Records:
        return [TaskRecord.from_json(json.loads(row)) for row in self._rows.values()]

    async def put(self, record: TaskRecord) -> None:
        self._rows[record.id] = json_text(record.to_json())
        if record.state.terminal and self.retention.max_count is not None:
            self._terminal_puts += 1
            if self._terminal_puts >= self.retention.slack:
                await self.prune(Retention(max_age_secs=None, max_count=self.retention.max_count))

    async def prune(self, retention: Retention) -> int:
        self._terminal_puts = 0
        doomed = _prunable(self._all(), retention, now_ms())
        for task_id in doomed:
            del self._rows[task_id]
        return len(doomed)

    async def get(self, task_id: str) -> TaskRecord | None:
        row = self._rows.get(task_id)
        return TaskRecord.from_json(json.loads(row)) if row is not None else None

    def _matching(self, context_id: str | None, state: TaskState | None) -> _Records:
        return [r for r in self._all()
                if (context_id is None or r.context_id == context_id) and (state is None or r.state is state)]

    async def list(self, context_id: str | None = None, limit: int = 100, offset: int = 0,
                   state: TaskState | None = None) -> _Records:
        records = self._matching(context_id, state)
        records.sort(key=lambda r: (r.updated_at, r.created_at, r.id), reverse=True)
        return records[offset:offset + limit]

    async def count(self, context_id: str | None = None, state: TaskState | None = None) -> int:
        return len(self._matching(context_id, state))

    async def mark_interrupted(self, message: str = INTERRUPTED_MESSAGE) -> _Ids:
        ids: _Ids = []
        for record in self._all():
            if not record.state.terminal:
                await self.put(_interrupt(record, message))
                ids.append(record.id)
        return ids

    async def ping(self) -> None:
        if self._closed:
            raise RuntimeError("task store is closed")

    async def close(self) -> None:
        self._closed = True


_SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    id TEXT PRIMARY KEY,
    context_id TEXT NOT NULL,
    state TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS tasks_by_context ON tasks (context_id, updated_at);
CREATE INDEX IF NOT EXISTS tasks_by_updated ON tasks (updated_at);
CREATE INDEX IF NOT EXISTS tasks_by_state ON tasks (state);
"""

_UPSERT = """
INSERT INTO tasks (id, context_id, state, created_at, updated_at, record) VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (id) DO UPDATE SET context_id = excluded.context_id, state = excluded.state,
    created_at = excluded.created_at, updated_at = excluded.updated_at, record = excluded.record
"""


def _row(record: TaskRecord) -> tuple[str, str, str, int, int, str]:
    return (record.id, record.context_id, record.state.value, record.created_at, record.updated_at,
            json_text(record.to_json()))


def _prepare(db: sqlite3.Connection) -> None:
    """WAL, the schema, and a quick integrity check: a damaged file is refused at start-up,
    not discovered by the first client whose task lands on a broken page."""
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.executescript(_SCHEMA)
    problems = [row[0] for row in db.execute("PRAGMA quick_check(5)").fetchall()]
    if problems != ["ok"]:
        raise sqlite3.DatabaseError("integrity check failed: " + "; ".join(problems))


def _filters(context_id: str | None, state: TaskState | None) -> tuple[str, tuple[str, ...]]:
    """The WHERE clause (both columns are indexed) and its arguments for `list` and `count`."""
    clauses: list[str] = []
    args: list[str] = []
    if context_id is not None:
        clauses.append("context_id = ?")
        args.append(context_id)
    if state is not None:
        clauses.append("state = ?")
        args.append(state.value)
    return ("WHERE " + " AND ".join(clauses) if clauses else ""), tuple(args)


class SqliteTaskStore:
    """Task records in one SQLite file (WAL, a commit per write; terminal states fsynced)."""

    def __init__(self, path: Path, retention: Retention = NO_RETENTION) -> None:
        self.path = Path(path)
        self.retention = retention
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="murmurd-taskstore")
        self._db: sqlite3.Connection | None = None
        self._closed = False
        self._terminal_puts = 0  # touched on the store thread only

    @classmethod
    async def open(cls, path: Path, retention: Retention = NO_RETENTION) -> SqliteTaskStore:
        """Create the parent directory and the schema, and return the ready store."""
        store = cls(path, retention)
        await store._call(lambda db: None)
        return store

    @classmethod
    async def in_state_dir(cls, state_dir: Path, retention: Retention = NO_RETENTION) -> SqliteTaskStore:
        return await cls.open(Path(state_dir) / DEFAULT_FILENAME, retention)

    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, isolation_level=None, timeout=10.0)
            try:
                _prepare(db)
            except sqlite3.Error as exc:
                db.close()
                raise TaskStoreError(
                    f"task store {self.path} is unusable ({exc}); move it aside "
                    f"(mv {self.path} {self.path}.broken, with its -wal and -shm files) "
                    "to start with an empty store"
                ) from None
            self._db = db
        return self._db

    async def _call(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        if self._closed:
            raise RuntimeError("task store is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, lambda: fn(self._connect()))

    async def put(self, record: TaskRecord) -> None:
        row = _row(record)  # serialise on the caller's thread: the record may change later
        # Every commit survives a daemon crash (WAL). A terminal state, which carries the answer,
        # is also synced to disk before put returns (FULL), which syncs everything before it;
        # the intermediate states (submitted, working, input-required) skip that fsync (NORMAL).
        level = "FULL" if record.state.terminal else "NORMAL"

        terminal = record.state.terminal

        def upsert(db: sqlite3.Connection) -> None:
            db.execute(f"PRAGMA synchronous={level}")
            db.execute(_UPSERT, row)
            if terminal and self.retention.max_count is not None:
                self._terminal_puts += 1
                if self._terminal_puts >= self.retention.slack:
                    self._prune(db, Retention(max_age_secs=None, max_count=self.retention.max_count))

        await self._call(upsert)

    def _prune(self, db: sqlite3.Connection, retention: Retention) -> int:
        """On the store thread: one transaction deleting what `retention` no longer keeps."""
        self._terminal_puts = 0
        marks = ",".join("?" * len(_TERMINAL_VALUES))
        cutoff = retention.cutoff_ms(now_ms())
        deleted = 0
        db.execute("BEGIN IMMEDIATE")
        try:
            if cutoff is not None:
                deleted += db.execute(f"DELETE FROM tasks WHERE state IN ({marks}) AND updated_at < ?",
                                      (*_TERMINAL_VALUES, cutoff)).rowcount
            for states in _COUNT_CLASSES if retention.max_count is not None else ():
                deleted += db.execute(
                    f"DELETE FROM tasks WHERE id IN (SELECT id FROM tasks WHERE state IN ({','.join('?' * len(states))})"
                    " ORDER BY updated_at DESC, created_at DESC, id DESC LIMIT -1 OFFSET ?)",
                    (*states, retention.max_count)).rowcount
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return deleted

    async def prune(self, retention: Retention) -> int:
        return await self._call(lambda db: self._prune(db, retention))

    async def get(self, task_id: str) -> TaskRecord | None:
        row = await self._call(
            lambda db: db.execute("SELECT record FROM tasks WHERE id = ?", (task_id,)).fetchone())
        return TaskRecord.from_json(json.loads(row[0])) if row else None

    async def list(self, context_id: str | None = None, limit: int = 100, offset: int = 0,
                   state: TaskState | None = None) -> _Records:
        where, args = _filters(context_id, state)
        sql = (f"SELECT record FROM tasks {where}"
               " ORDER BY updated_at DESC, created_at DESC, id DESC LIMIT ? OFFSET ?")
        rows = await self._call(lambda db: db.execute(sql, (*args, limit, offset)).fetchall())
        return [TaskRecord.from_json(json.loads(r[0])) for r in rows]

    async def count(self, context_id: str | None = None, state: TaskState | None = None) -> int:
        where, args = _filters(context_id, state)
        row = await self._call(lambda db: db.execute(f"SELECT COUNT(*) FROM tasks {where}", args).fetchone())
        return int(row[0])

    async def ping(self) -> None:
        await self._call(lambda db: db.execute("SELECT 1").fetchone())

    async def mark_interrupted(self, message: str = INTERRUPTED_MESSAGE) -> _Ids:
        def run(db: sqlite3.Connection) -> _Ids:
            marks = ",".join("?" * len(_TERMINAL_VALUES))
            db.execute("BEGIN IMMEDIATE")
            try:
                rows = db.execute(f"SELECT id, record FROM tasks WHERE state NOT IN ({marks}) ORDER BY created_at",
                                  _TERMINAL_VALUES).fetchall()
                records = [_interrupt(self._decode(task_id, record), message) for task_id, record in rows]
                db.executemany(_UPSERT, [_row(r) for r in records])
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            return [r.id for r in records]

        return await self._call(run)

    def _decode(self, task_id: str, row: str) -> TaskRecord:
        try:
            return TaskRecord.from_json(json.loads(row))
        except (ValueError, KeyError, TypeError) as exc:
            raise TaskStoreError(
                f"task store {self.path}: the record of task {task_id!r} is damaged ({type(exc).__name__}: {exc}); "
                f"move the store aside (mv {self.path} {self.path}.broken) to start with an empty one"
            ) from None

    async def close(self) -> None:
        if self._closed:
            return
        loop = asyncio.get_running_loop()

        def shut() -> None:
            if self._db is not None:
                self._db.close()
                self._db = None

        await loop.run_in_executor(self._executor, shut)
        self._closed = True
        self._executor.shutdown(wait=True)
