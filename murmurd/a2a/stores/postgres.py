"""Task records, threaded histories and stream events in PostgreSQL, shared by replicas.

asyncpg (not psycopg 3): it is asyncio-native with its own connection pool, speaks the binary
protocol with prepared statements cached per connection (the fewest round trips per task), and
has LISTEN built in (`add_listener`), which `murmurd.a2a.replicas` needs for events across
replicas. The store is `TaskStore` and nothing more; ownership, leases and notifications live in
`murmurd.a2a.replicas`, on the same pool.

Records are stored as JSON text (not jsonb), so every byte of a part survives verbatim, as in
SQLite. `mark_interrupted` touches only this replica's own tasks: the others may be running.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Collection
from typing import Any

import asyncpg

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
    StoreUnreachable,
    TaskStoreError,
    interrupt,
    member_name,
    redact,
)
from murmurd.a2a.stores.migrations import MIGRATIONS
from murmurd.a2a.core.tasks import TaskRecord, TaskState, now_ms
from murmurd.text import json_text

log = logging.getLogger("murmurd.a2a.store")

MIGRATION_LOCK = 0x6D75726D  # "murm": one advisory lock key for schema changes

# A record is written by the replica that owns its task, or by anyone while nobody does, but never
# made live (working, input-required) by one that does not own it: only a claim makes a task
# this replica's to run. So a replica declared dead (its lease ran out) can neither overwrite the
# FAILED its survivor wrote nor start a queued task its survivor handed back or claimed.
_UPSERT = """
INSERT INTO tasks (id, context_id, state, created_at, updated_at, record, principal)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (id) DO UPDATE SET context_id = excluded.context_id, state = excluded.state,
    created_at = excluded.created_at, updated_at = excluded.updated_at, record = excluded.record,
    principal = excluded.principal
WHERE tasks.owner = $8 OR (tasks.owner IS NULL AND excluded.state NOT IN ('working', 'input-required'))
""".strip()

# A new task: inserted only when no task has its id (whichever replica wrote that one, claimed or
# not), never an update; and for a credential confined to its own contexts, only when the
# context has no other member. The context's lock (`_LOCK_CONTEXT`, taken by a statement of its
# own so the insert's snapshot sees whatever the previous holder committed) makes the member
# check and the insert one step against a replica creating the context's first task meanwhile.
_LOCK_CONTEXT = "SELECT pg_advisory_xact_lock(hashtext('murmurd-context:' || $1::text))"
_CREATE = """
WITH foreign_member AS (
    SELECT 1 FROM context_members WHERE $8::boolean AND context_id = $2 AND principal <> $9 LIMIT 1),
inserted AS (
    INSERT INTO tasks (id, context_id, state, created_at, updated_at, record, principal)
    SELECT $1, $2, $3, $4, $5, $6, $7 WHERE NOT EXISTS (SELECT 1 FROM foreign_member)
    ON CONFLICT (id) DO NOTHING
    RETURNING context_id),
member AS (
    INSERT INTO context_members (context_id, principal) SELECT context_id, $9 FROM inserted
    ON CONFLICT DO NOTHING)
SELECT (SELECT count(*) FROM foreign_member) AS foreign_member, (SELECT count(*) FROM inserted) AS inserted
""".strip()


def _row(record: TaskRecord) -> tuple[str, str, str, int, int, str, str | None]:
    return (record.id, record.context_id, record.state.value, record.created_at, record.updated_at,
            json_text(record.to_json()), record.principal)


def _filters(context_id: str | None, state: TaskState | None, principal: str | None = None) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    args: list[Any] = []
    if context_id is not None:
        args.append(context_id)
        clauses.append(f"context_id = ${len(args)}")
    if state is not None:
        args.append(state.value)
        clauses.append(f"state = ${len(args)}")
    if principal is not None:  # the creating credential, read from the record (a peer's listing)
        args.append(principal)
        clauses.append(f"principal = ${len(args)}")
    return ("WHERE " + " AND ".join(clauses) if clauses else ""), args


async def migrate(conn: asyncpg.Connection) -> list[int]:
    """Apply the migrations this database lacks, under an advisory lock; return their numbers."""
    applied: list[int] = []
    await conn.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK)
    try:
        await conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations ("
                           "version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")
        done = {r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations")}
        newest = max((v for v, _ in MIGRATIONS), default=0)
        if done and max(done) > newest:
            raise TaskStoreError(f"the database schema is version {max(done)}, newer than this murmurd "
                                 f"knows ({newest}); upgrade murmurd before it joins these replicas")
        for version, sql in MIGRATIONS:
            if version in done:
                continue
            async with conn.transaction():
                await conn.execute(sql)
                await conn.execute("INSERT INTO schema_migrations (version) VALUES ($1)", version)
            applied.append(version)
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK)
    return applied


async def _keep_session(conn: asyncpg.Connection) -> None:
    """A connection goes back to the pool as it is: murmurd sets no session state (its advisory
    locks are transaction-scoped, LISTEN has a connection of its own), and asyncpg's default
    reset (`pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL`) would cost one more round
    trip after every statement."""


class PostgresTaskStore:
    """`TaskStore` on a PostgreSQL database; `replica_id` names this daemon among the replicas."""

    keeps_its_tasks = False  # see TaskStore

    def __init__(self, pool: asyncpg.Pool, dsn: str, replica_id: str, retention: Retention) -> None:
        self.pool = pool
        self.dsn = dsn
        self.replica_id = replica_id
        self.retention = retention
        self._terminal_puts = 0
        self._closed = False

    @classmethod
    async def open(cls, dsn: str, replica_id: str, retention: Retention = NO_RETENTION,
                   *, max_connections: int = 10, timeout: float = 10.0) -> PostgresTaskStore:
        """Connect, migrate the schema, and return the ready store (`TaskStoreError` if not)."""
        try:
            pool = await asyncpg.create_pool(dsn, min_size=1, max_size=max_connections, timeout=timeout,
                                             command_timeout=60, reset=_keep_session)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, ValueError, TimeoutError) as exc:
            # a plain ValueError is the URL's own parse failing, and it quotes the piece it choked on
            detail = "the connection string does not parse" if type(exc) is ValueError else f"{type(exc).__name__}: {exc}"
            raise TaskStoreError(f"task store {redact(dsn)} is unreachable ({detail})") from None
        try:
            async with pool.acquire() as conn:
                await migrate(conn)
        except TaskStoreError:
            await pool.close()
            raise
        except (asyncpg.PostgresError, OSError) as exc:
            await pool.close()
            raise TaskStoreError(f"task store {redact(dsn)}: the schema cannot be prepared ({exc})") from None
        return cls(pool, dsn, replica_id, retention)

    async def put(self, record: TaskRecord) -> bool:
        try:
            status = await self.pool.execute(_UPSERT, *_row(record), self.replica_id)
        except (OSError, TimeoutError, asyncpg.PostgresConnectionError) as exc:
            raise StoreUnreachable(f"task {record.id}: the database is unreachable ({type(exc).__name__})") from exc
        if status.endswith(" 0"):
            log.warning("task %s belongs to another replica now (this one was declared dead); "
                        "its %s state is not stored", record.id, record.state.value)
            return False
        await self._count_terminal(record)
        return True

    async def _count_terminal(self, record: TaskRecord) -> None:
        """One more terminal write; past the slack, a count prune (a flood of rejections too)."""
        if record.state.terminal and self.retention.max_count is not None:
            self._terminal_puts += 1
            if self._terminal_puts >= self.retention.slack:
                await self.prune(Retention(max_age_secs=None, max_count=self.retention.max_count))

    async def create(self, record: TaskRecord, *, exclusive_context: bool = False) -> CreateRefusal | None:
        try:
            async with self.pool.acquire() as conn, conn.transaction():
                await conn.execute(_LOCK_CONTEXT, record.context_id)
                row = await conn.fetchrow(_CREATE, *_row(record), exclusive_context, member_name(record.principal))
        except (OSError, TimeoutError, asyncpg.PostgresConnectionError) as exc:
            raise StoreUnreachable(f"task {record.id}: the database is unreachable ({type(exc).__name__})") from exc
        if row["foreign_member"]:
            return CONTEXT_FOREIGN
        if not row["inserted"]:
            return ID_TAKEN
        await self._count_terminal(record)
        return None

    async def context_members(self, context_id: str) -> set[str]:
        rows = await self.pool.fetch("SELECT principal FROM context_members WHERE context_id = $1", context_id)
        return {r["principal"] for r in rows}

    async def open_contexts(self, principal: str | None, context_id: str | None) -> tuple[int, bool]:
        row = await self.pool.fetchrow(
            "SELECT COUNT(DISTINCT context_id) AS open, coalesce(bool_or(context_id = $3), false) AS among"
            " FROM tasks WHERE principal IS NOT DISTINCT FROM $1 AND state = ANY($2::text[])",
            principal, list(LIVE_VALUES), context_id)
        return int(row["open"]), bool(row["among"])

    async def orphaned_contexts(self, limit: int = 100) -> Ids:
        rows = await self.pool.fetch(
            "SELECT DISTINCT m.context_id FROM context_members m WHERE NOT EXISTS"
            " (SELECT 1 FROM tasks t WHERE t.context_id = m.context_id) LIMIT $1", limit)
        return [r["context_id"] for r in rows]

    async def contexts_with_tasks(self, context_ids: Collection[str]) -> set[str]:
        if not context_ids:
            return set()
        rows = await self.pool.fetch("SELECT DISTINCT context_id FROM tasks WHERE context_id = ANY($1::text[])",
                                     list(context_ids))
        return {r["context_id"] for r in rows}

    async def forget_context(self, context_id: str) -> bool:
        """The history and the members go together, under the context's lock, and only while
        the context holds no task (a task created meanwhile keeps both)."""
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(_LOCK_CONTEXT, context_id)
            if await conn.fetchval("SELECT 1 FROM tasks WHERE context_id = $1 LIMIT 1", context_id):
                return False
            await conn.execute("DELETE FROM histories WHERE context_id = $1", context_id)
            status = await conn.execute("DELETE FROM context_members WHERE context_id = $1", context_id)
        return not status.endswith(" 0")

    async def get(self, task_id: str) -> TaskRecord | None:
        row = await self.pool.fetchval("SELECT record FROM tasks WHERE id = $1", task_id)
        return TaskRecord.from_json(json.loads(row)) if row is not None else None

    async def list(self, context_id: str | None = None, limit: int = 100, offset: int = 0,
                   state: TaskState | None = None, principal: str | None = None) -> Records:
        where, args = _filters(context_id, state, principal)
        n = len(args)
        rows = await self.pool.fetch(
            f"SELECT record FROM tasks {where} ORDER BY updated_at DESC, created_at DESC, id DESC"
            f" LIMIT ${n + 1} OFFSET ${n + 2}", *args, limit, offset)
        return [TaskRecord.from_json(json.loads(r["record"])) for r in rows]

    async def count(self, context_id: str | None = None, state: TaskState | None = None,
                    principal: str | None = None) -> int:
        where, args = _filters(context_id, state, principal)
        return int(await self.pool.fetchval(f"SELECT COUNT(*) FROM tasks {where}", *args))

    async def mark_interrupted(self, message: str = INTERRUPTED_MESSAGE) -> Ids:
        """This replica's own running tasks (a restart under the same replica id) fail; its
        queued ones are handed back, for whichever replica claims them first."""
        live = [TaskState.WORKING.value, TaskState.INPUT_REQUIRED.value]
        async with self.pool.acquire() as conn, conn.transaction():
            rows = await conn.fetch("SELECT id, record FROM tasks WHERE owner = $1 AND state = ANY($2::text[])"
                                    " ORDER BY created_at FOR UPDATE", self.replica_id, live)
            records = [interrupt(TaskRecord.from_json(json.loads(r["record"])), message) for r in rows]
            if records:
                await conn.executemany(_UPSERT, [(*_row(r), self.replica_id) for r in records])
            await conn.execute("UPDATE tasks SET owner = NULL WHERE owner = $1 AND state = 'submitted'",
                               self.replica_id)
        return [r.id for r in records]

    async def prune(self, retention: Retention) -> int:
        self._terminal_puts = 0
        cutoff = retention.cutoff_ms(now_ms())
        deleted = 0
        async with self.pool.acquire() as conn, conn.transaction():
            if cutoff is not None:
                status = await conn.execute("DELETE FROM tasks WHERE state = ANY($1::text[]) AND updated_at < $2",
                                            list(TERMINAL_VALUES), cutoff)
                deleted += int(status.split()[-1])
            for states in COUNT_CLASSES if retention.max_count is not None else ():
                status = await conn.execute(
                    "DELETE FROM tasks WHERE id IN (SELECT id FROM tasks WHERE state = ANY($1::text[])"
                    " ORDER BY updated_at DESC, created_at DESC, id DESC OFFSET $2)", list(states), retention.max_count)
                deleted += int(status.split()[-1])
        return deleted

    async def load_history(self, context_id: str) -> StoredMessages | None:
        row = await self.pool.fetchval("SELECT messages FROM histories WHERE context_id = $1", context_id)
        return json.loads(row) if row is not None else []

    async def save_history(self, context_id: str, messages: StoredMessages) -> None:
        """Written only by the replica holding the context's lease (`contexts`): one declared dead
        that still finishes a run cannot overwrite the conversation its survivor continued."""
        status = await self.pool.execute(
            "INSERT INTO histories (context_id, messages, updated_at) SELECT $1, $2, $3"
            " WHERE EXISTS (SELECT 1 FROM contexts WHERE context_id = $1 AND owner = $4)"
            " ON CONFLICT (context_id) DO UPDATE SET messages = excluded.messages, updated_at = excluded.updated_at",
            context_id, json_text(messages), now_ms(), self.replica_id)
        if status.endswith(" 0"):
            log.warning("context %s is leased to another replica now (this one was declared dead); "
                        "its history is not stored", context_id)

    async def ping(self) -> None:
        await self.pool.fetchval("SELECT 1")

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            async with asyncio.timeout(10):
                await self.pool.close()
        except TimeoutError:
            self.pool.terminate()
