"""Durable task records, so `tasks/get` still answers after the daemon restarts.

`TaskStore` is the whole storage interface: a shared store (several daemons behind one load
balancer) replaces `SqliteTaskStore` by implementing these five methods. Records travel as
`TaskRecord.to_json()`, so every part kind and artifact survives verbatim.

SQLite runs on one dedicated thread per store: the event loop never blocks on disk, and
writes from many asyncio tasks are serialised without locks of our own.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol, TypeVar

from murmurd.a2a.tasks import TERMINAL_STATES, TaskRecord, TaskState, now_ms

INTERRUPTED_MESSAGE = "interrupted: daemon restarted"
DEFAULT_FILENAME = "tasks.sqlite3"

_T = TypeVar("_T")


class TaskStoreError(Exception):
    """The task store cannot be opened; the message names the file and how to recover."""

_Records = list[TaskRecord]
_Ids = list[str]
_TERMINAL_VALUES = tuple(sorted(s.value for s in TERMINAL_STATES))


class TaskStore(Protocol):
    async def put(self, record: TaskRecord) -> None:
        """Insert or replace the record; durable when this returns."""

    async def get(self, task_id: str) -> TaskRecord | None: ...

    async def list(self, context_id: str | None = None, limit: int = 100, offset: int = 0) -> _Records:
        """Most recently updated first, optionally only one context."""

    async def mark_interrupted(self, message: str = INTERRUPTED_MESSAGE) -> _Ids:
        """At startup: every non-terminal record becomes FAILED with `message`; returns their ids.
        (A store shared by several daemons must scope this to the restarting daemon's tasks.)"""

    async def close(self) -> None: ...


def _interrupt(record: TaskRecord, message: str) -> TaskRecord:
    record.state = TaskState.FAILED
    record.status_message = message
    record.updated_at = now_ms()
    return record


class MemoryTaskStore:
    """A non-durable store (tests, or no --state-dir). Keeps JSON copies, like SQLite does, so
    callers mutating a returned record never change the stored one."""

    def __init__(self) -> None:
        self._rows: dict[str, str] = {}

    def _all(self) -> _Records:
        return [TaskRecord.from_json(json.loads(row)) for row in self._rows.values()]

    async def put(self, record: TaskRecord) -> None:
        self._rows[record.id] = json.dumps(record.to_json())

    async def get(self, task_id: str) -> TaskRecord | None:
        row = self._rows.get(task_id)
        return TaskRecord.from_json(json.loads(row)) if row is not None else None

    async def list(self, context_id: str | None = None, limit: int = 100, offset: int = 0) -> _Records:
        records = [r for r in self._all() if context_id is None or r.context_id == context_id]
        records.sort(key=lambda r: (r.updated_at, r.created_at, r.id), reverse=True)
        return records[offset:offset + limit]

    async def mark_interrupted(self, message: str = INTERRUPTED_MESSAGE) -> _Ids:
        ids: _Ids = []
        for record in self._all():
            if not record.state.terminal:
                await self.put(_interrupt(record, message))
                ids.append(record.id)
        return ids

    async def close(self) -> None:
        return None


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
            json.dumps(record.to_json(), ensure_ascii=False))


def _prepare(db: sqlite3.Connection) -> None:
    """WAL, the schema, and a quick integrity check: a damaged file is refused at start-up,
    not discovered by the first client whose task lands on a broken page."""
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.executescript(_SCHEMA)
    problems = [row[0] for row in db.execute("PRAGMA quick_check(5)").fetchall()]
    if problems != ["ok"]:
        raise sqlite3.DatabaseError("integrity check failed: " + "; ".join(problems))


class SqliteTaskStore:
    """Task records in one SQLite file (WAL, a commit per write; terminal states fsynced)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="murmurd-taskstore")
        self._db: sqlite3.Connection | None = None
        self._closed = False

    @classmethod
    async def open(cls, path: Path) -> SqliteTaskStore:
        """Create the parent directory and the schema, and return the ready store."""
        store = cls(path)
        await store._call(lambda db: None)
        return store

    @classmethod
    async def in_state_dir(cls, state_dir: Path) -> SqliteTaskStore:
        return await cls.open(Path(state_dir) / DEFAULT_FILENAME)

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

        def upsert(db: sqlite3.Connection) -> None:
            db.execute(f"PRAGMA synchronous={level}")
            db.execute(_UPSERT, row)

        await self._call(upsert)

    async def get(self, task_id: str) -> TaskRecord | None:
        row = await self._call(
            lambda db: db.execute("SELECT record FROM tasks WHERE id = ?", (task_id,)).fetchone())
        return TaskRecord.from_json(json.loads(row[0])) if row else None

    async def list(self, context_id: str | None = None, limit: int = 100, offset: int = 0) -> _Records:
        where, args = ("WHERE context_id = ?", [context_id]) if context_id is not None else ("", [])
        sql = (f"SELECT record FROM tasks {where}"
               " ORDER BY updated_at DESC, created_at DESC, id DESC LIMIT ? OFFSET ?")
        rows = await self._call(lambda db: db.execute(sql, (*args, limit, offset)).fetchall())
        return [TaskRecord.from_json(json.loads(r[0])) for r in rows]

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
