"""Task records in one SQLite file beside the daemon: the embedded default.

SQLite runs on one thread per store (`sqlite_thread.StoreThread`: its own, or `murmurd serve`'s
thread for short blocking work, a batch at a time): the event loop never
blocks on disk, writes from many asyncio tasks are serialised without locks of our own, and the
terminal states of tasks that end together share one sync.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Collection
from concurrent.futures import Executor
from pathlib import Path
from typing import TypeVar

from murmurd.a2a.stores.base import (
    CONTEXT_FOREIGN,
    COUNT_CLASSES,
    ID_TAKEN,
    INTERRUPTED_MESSAGE,
    LIVE_VALUES,
    NO_RETENTION,
    TERMINAL_VALUES,
    Ids,
    Records,
    Retention,
    CreateRefusal,
    StoredMessages,
    TaskStoreError,
    interrupt,
    member_name,
)
from murmurd.a2a.core.tasks import TaskRecord, TaskState, now_ms
from murmurd.a2a.stores.sqlite_thread import LostSync, StoreThread
from murmurd.text import json_text

DEFAULT_FILENAME = "tasks.sqlite3"
_IDS_PER_QUERY = 500  # bound parameters per `IN (...)`: far below SQLite's limit

_T = TypeVar("_T")


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
CREATE TABLE IF NOT EXISTS context_members (
    context_id TEXT NOT NULL,
    principal TEXT NOT NULL,
    PRIMARY KEY (context_id, principal)
);
CREATE TABLE IF NOT EXISTS store_syncs (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    n INTEGER NOT NULL
);
"""

# One commit at `synchronous=FULL`: it syncs the write-ahead log, and with it every commit before.
_SYNC_MARK = "INSERT INTO store_syncs (id, n) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET n = n + 1"

# Issue 21: the creating credential in a column of its own (filtered without parsing the record),
# and every context's members (who created a task in it), kept when its tasks are pruned.
_ADD_PRINCIPAL = """
ALTER TABLE tasks ADD COLUMN principal TEXT;
UPDATE tasks SET principal = json_extract(record, '$.principal');
CREATE INDEX tasks_by_principal ON tasks (principal, state);
INSERT OR IGNORE INTO context_members (context_id, principal)
    SELECT DISTINCT context_id, coalesce(principal, '') FROM tasks;
"""

_COLUMNS = "(id, context_id, state, created_at, updated_at, record, principal) VALUES (?, ?, ?, ?, ?, ?, ?)"
_UPSERT = f"""
INSERT INTO tasks {_COLUMNS}
ON CONFLICT (id) DO UPDATE SET context_id = excluded.context_id, state = excluded.state,
    created_at = excluded.created_at, updated_at = excluded.updated_at, record = excluded.record,
    principal = excluded.principal
"""
_INSERT_NEW = f"INSERT INTO tasks {_COLUMNS} ON CONFLICT (id) DO NOTHING"


def _row(record: TaskRecord) -> tuple[str, str, str, int, int, str, str | None]:
    return (record.id, record.context_id, record.state.value, record.created_at, record.updated_at,
            json_text(record.to_json()), record.principal)


def _prepare(db: sqlite3.Connection) -> bool:
    """WAL, the schema, and a quick integrity check: a damaged file is refused at start-up,
    not discovered by the first client whose task lands on a broken page. True in WAL mode: commits
    are synced by the store (`_sync_log`); a file system without it syncs every commit itself."""
    wal = str(db.execute("PRAGMA journal_mode=WAL").fetchone()[0]).lower() == "wal"
    db.execute("PRAGMA synchronous=NORMAL" if wal else "PRAGMA synchronous=FULL")
    db.executescript(_SCHEMA)
    if not any(column[1] == "principal" for column in db.execute("PRAGMA table_info(tasks)").fetchall()):
        db.executescript("BEGIN;" + _ADD_PRINCIPAL + "COMMIT;")
    problems = [row[0] for row in db.execute("PRAGMA quick_check(5)").fetchall()]
    if problems != ["ok"]:
        raise sqlite3.DatabaseError("integrity check failed: " + "; ".join(problems))
    return wal


def _filters(context_id: str | None, state: TaskState | None,
             principal: str | None = None) -> tuple[str, tuple[str, ...]]:
    """The WHERE clause (context and state are indexed columns; the creating credential is read
    from the record, only for a peer's listing) and its arguments for `list` and `count`."""
    clauses: list[str] = []
    args: list[str] = []
    if context_id is not None:
        clauses.append("context_id = ?")
        args.append(context_id)
    if state is not None:
        clauses.append("state = ?")
        args.append(state.value)
    if principal is not None:
        clauses.append("principal = ?")
        args.append(principal)
    return ("WHERE " + " AND ".join(clauses) if clauses else ""), tuple(args)


class SqliteTaskStore:
    """Task records in one SQLite file (WAL, a commit per write; terminal states synced before
    they are answered)."""

    keeps_its_tasks = True  # see TaskStore

    def __init__(self, path: Path, retention: Retention = NO_RETENTION, *, executor: Executor | None = None) -> None:
        """`executor`: run on that executor's thread (one batch at a time), not a thread of its own."""
        self.path = Path(path)
        self.retention = retention
        self._thread = StoreThread(self._connect, self._sync_log, executor=executor)
        self._one_thread = executor is None  # else the executor's threads take turns with the connection
        self._db: sqlite3.Connection | None = None
        self._wal = False  # the connection's journal is a write-ahead log (store thread)
        self._shut = False  # the connection was closed: no other is opened (store thread)
        self._synced_at_close = False  # and everything written before it was synced (store thread)
        self._closed = False
        self._terminal_puts = 0  # touched on the store thread only

    @classmethod
    async def open(cls, path: Path, retention: Retention = NO_RETENTION, *,
                   executor: Executor | None = None) -> SqliteTaskStore:
        """Create the parent directory and the schema, and return the ready store."""
        store = cls(path, retention, executor=executor)
        await store._call(lambda db: None)
        return store

    @classmethod
    async def in_state_dir(cls, state_dir: Path, retention: Retention = NO_RETENTION) -> SqliteTaskStore:
        return await cls.open(Path(state_dir) / DEFAULT_FILENAME, retention)

    def _connect(self) -> sqlite3.Connection:
        if self._shut:
            raise RuntimeError("task store is closed")
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, isolation_level=None, timeout=10.0, check_same_thread=self._one_thread)
            try:
                self._wal = _prepare(db)
            except sqlite3.Error as exc:
                db.close()
                raise TaskStoreError(
                    f"task store {self.path} is unusable ({exc}); move it aside "
                    f"(mv {self.path} {self.path}.broken, with its -wal and -shm files) "
                    "to start with an empty store"
                ) from None
            self._db = db
        return self._db

    def _sync_log(self) -> None:
        """On the store thread: every commit so far on disk. In WAL mode, one more commit at
        `synchronous=FULL` (a one-row counter) syncs the log, which holds every commit before it;
        without WAL each commit synced itself."""
        db = self._db
        if db is None:
            if self._synced_at_close:
                return  # closing synced everything before it
            raise TaskStoreError(f"task store {self.path}: closed before its writes were synced")
        if not self._wal:
            return
        db.execute("PRAGMA synchronous=FULL")
        try:
            db.execute(_SYNC_MARK)
        except sqlite3.Error as exc:
            if getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_IOERR:
                raise LostSync(f"task store {self.path}: the disk refused to sync it ({exc})") from None
            raise
        finally:
            db.execute("PRAGMA synchronous=NORMAL")

    async def _call(self, fn: Callable[[sqlite3.Connection], _T], *, durable: bool = False) -> _T:
        if self._closed:
            raise RuntimeError("task store is closed")
        return await self._thread.run(fn, durable=durable)

    async def put(self, record: TaskRecord) -> bool:
        row = _row(record)  # serialise on the caller's thread: the record may change later
        # Every commit survives a daemon crash (WAL). A terminal state, which carries the answer,
        # is also on disk before put returns (the batch's sync, which covers everything before
        # it); the intermediate states (submitted, working, input-required) are not waited on.
        terminal = record.state.terminal

        def upsert(db: sqlite3.Connection) -> None:
            db.execute(_UPSERT, row)
            self._count_terminal(db, terminal)

        await self._call(upsert, durable=terminal)
        return True

    def _count_terminal(self, db: sqlite3.Connection, terminal: bool) -> None:
        """On the store thread: one more terminal write; past the slack, a count prune."""
        if terminal and self.retention.max_count is not None:
            self._terminal_puts += 1
            if self._terminal_puts >= self.retention.slack:
                self._prune(db, Retention(max_age_secs=None, max_count=self.retention.max_count))

    async def create(self, record: TaskRecord, *, exclusive_context: bool = False) -> CreateRefusal | None:
        row = _row(record)
        member = member_name(record.principal)
        terminal = record.state.terminal

        def insert(db: sqlite3.Connection) -> CreateRefusal | None:
            db.execute("BEGIN IMMEDIATE")  # the one writer: the checks and the insert are one step
            try:
                refusal: CreateRefusal | None = None
                if exclusive_context and db.execute(
                        "SELECT 1 FROM context_members WHERE context_id = ? AND principal <> ? LIMIT 1",
                        (record.context_id, member)).fetchone():
                    refusal = CONTEXT_FOREIGN
                elif db.execute(_INSERT_NEW, row).rowcount == 0:
                    refusal = ID_TAKEN
                else:
                    db.execute("INSERT OR IGNORE INTO context_members (context_id, principal) VALUES (?, ?)",
                               (record.context_id, member))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            if refusal is None:
                self._count_terminal(db, terminal)
            return refusal

        return await self._call(insert, durable=terminal)

    async def context_members(self, context_id: str) -> set[str]:
        rows = await self._call(lambda db: db.execute(
            "SELECT principal FROM context_members WHERE context_id = ?", (context_id,)).fetchall())
        return {r[0] for r in rows}

    async def open_contexts(self, principal: str | None, context_id: str | None) -> tuple[int, bool]:
        marks = ",".join("?" * len(LIVE_VALUES))
        owner = "principal IS NULL" if principal is None else "principal = ?"
        args = () if principal is None else (principal,)

        def count(db: sqlite3.Connection) -> tuple[int, bool]:
            base = f"FROM tasks WHERE {owner} AND state IN ({marks})"
            total = db.execute(f"SELECT COUNT(DISTINCT context_id) {base}", (*args, *LIVE_VALUES)).fetchone()[0]
            among = context_id is not None and db.execute(
                f"SELECT 1 {base} AND context_id = ? LIMIT 1", (*args, *LIVE_VALUES, context_id)).fetchone() is not None
            return int(total), among

        return await self._call(count)

    async def orphaned_contexts(self, limit: int = 100) -> Ids:
        rows = await self._call(lambda db: db.execute(
            "SELECT DISTINCT m.context_id FROM context_members m WHERE NOT EXISTS "
            "(SELECT 1 FROM tasks t WHERE t.context_id = m.context_id) LIMIT ?", (limit,)).fetchall())
        return [r[0] for r in rows]

    async def contexts_with_tasks(self, context_ids: Collection[str]) -> set[str]:
        ids = list(context_ids)

        def held(db: sqlite3.Connection) -> set[str]:
            found: set[str] = set()
            for at in range(0, len(ids), _IDS_PER_QUERY):
                chunk = ids[at:at + _IDS_PER_QUERY]
                found.update(r[0] for r in db.execute(
                    f"SELECT DISTINCT context_id FROM tasks WHERE context_id IN ({','.join('?' * len(chunk))})",
                    chunk))
            return found

        return await self._call(held) if ids else set()

    async def forget_context(self, context_id: str) -> bool:
        return bool(await self._call(lambda db: db.execute(
            "DELETE FROM context_members WHERE context_id = ? AND NOT EXISTS "
            "(SELECT 1 FROM tasks WHERE context_id = ?)", (context_id, context_id)).rowcount))

    def _prune(self, db: sqlite3.Connection, retention: Retention) -> int:
        """On the store thread: one transaction deleting what `retention` no longer keeps."""
        self._terminal_puts = 0
        marks = ",".join("?" * len(TERMINAL_VALUES))
        cutoff = retention.cutoff_ms(now_ms())
        deleted = 0
        db.execute("BEGIN IMMEDIATE")
        try:
            if cutoff is not None:
                deleted += db.execute(f"DELETE FROM tasks WHERE state IN ({marks}) AND updated_at < ?",
                                      (*TERMINAL_VALUES, cutoff)).rowcount
            for states in COUNT_CLASSES if retention.max_count is not None else ():
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
                   state: TaskState | None = None, principal: str | None = None) -> Records:
        where, args = _filters(context_id, state, principal)
        sql = (f"SELECT record FROM tasks {where}"
               " ORDER BY updated_at DESC, created_at DESC, id DESC LIMIT ? OFFSET ?")
        rows = await self._call(lambda db: db.execute(sql, (*args, limit, offset)).fetchall())
        return [TaskRecord.from_json(json.loads(r[0])) for r in rows]

    async def count(self, context_id: str | None = None, state: TaskState | None = None,
                    principal: str | None = None) -> int:
        where, args = _filters(context_id, state, principal)
        row = await self._call(lambda db: db.execute(f"SELECT COUNT(*) FROM tasks {where}", args).fetchone())
        return int(row[0])

    async def mark_interrupted(self, message: str = INTERRUPTED_MESSAGE) -> Ids:
        def run(db: sqlite3.Connection) -> Ids:
            marks = ",".join("?" * len(TERMINAL_VALUES))
            db.execute("BEGIN IMMEDIATE")
            try:
                rows = db.execute(f"SELECT id, record FROM tasks WHERE state NOT IN ({marks}) ORDER BY created_at",
                                  TERMINAL_VALUES).fetchall()
                records = [interrupt(self._decode(task_id, record), message) for task_id, record in rows]
                db.executemany(_UPSERT, [_row(r) for r in records])
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            return [r.id for r in records]

        return await self._call(run, durable=True)

    def _decode(self, task_id: str, row: str) -> TaskRecord:
        try:
            return TaskRecord.from_json(json.loads(row))
        except (ValueError, KeyError, TypeError) as exc:
            raise TaskStoreError(
                f"task store {self.path}: the record of task {task_id!r} is damaged ({type(exc).__name__}: {exc}); "
                f"move the store aside (mv {self.path} {self.path}.broken) to start with an empty one"
            ) from None

    async def load_history(self, context_id: str) -> StoredMessages | None:
        return None  # threaded histories stay in the context's workdir (hooks read them there)

    async def save_history(self, context_id: str, messages: StoredMessages) -> None:
        return None

    async def ping(self) -> None:
        await self._call(lambda db: db.execute("SELECT 1").fetchone())

    async def close(self) -> None:
        if self._closed:
            return

        def shut(db: sqlite3.Connection) -> None:
            try:
                self._sync_log()  # what this batch wrote before the close is synced with the rest
                self._synced_at_close = True
            finally:
                db.close()
                self._db = None
                self._shut = True

        if self._db is not None:
            await self._thread.run(shut)
        self._closed = True
        await self._thread.stop()
