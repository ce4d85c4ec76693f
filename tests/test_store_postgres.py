"""The PostgreSQL task store on a real PostgreSQL 15 (tests/pgkit.py): the versioned schema,
replica-scoped recovery, threaded histories, reachability (issue 17)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import asyncpg
import pytest

from murmurd.a2a.stores import TaskStoreError, check_location, open_store
from murmurd.a2a.stores.base import NO_RETENTION, TaskStore
from murmurd.a2a.stores.memory import MemoryTaskStore
from murmurd.a2a.stores.migrations import MIGRATIONS
from murmurd.a2a.stores.postgres import PostgresTaskStore, redact
from murmurd.a2a.stores.sqlite import SqliteTaskStore
from murmurd.a2a.core.tasks import TaskRecord, TaskState, new_context_id, new_task_id

pytestmark = pytest.mark.anyio


def record(state: TaskState, context_id: str | None = None) -> TaskRecord:
    return TaskRecord(id=new_task_id(), context_id=context_id or new_context_id(), state=state)


async def test_the_schema_is_migrated_once_even_by_replicas_starting_together(postgres_dsn: str) -> None:
    stores = await asyncio.gather(*(PostgresTaskStore.open(postgres_dsn, f"r{i}") for i in range(4)))
    conn = await asyncpg.connect(postgres_dsn)
    try:
        versions = [r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations ORDER BY version")]
        assert versions == [v for v, _ in MIGRATIONS]
        tables = {r["tablename"] for r in await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
        assert {"tasks", "histories", "events", "replicas", "contexts", "inbox", "schema_migrations"} <= tables
    finally:
        await conn.close()
    for store in stores:
        await store.close()
    again = await PostgresTaskStore.open(postgres_dsn, "r9")  # reopening applies nothing twice
    await again.close()


async def test_a_schema_newer_than_this_daemon_is_refused(postgres_dsn: str) -> None:
    (await PostgresTaskStore.open(postgres_dsn, "r1")).pool.terminate()
    conn = await asyncpg.connect(postgres_dsn)
    await conn.execute("INSERT INTO schema_migrations (version) VALUES (999)")
    await conn.close()
    with pytest.raises(TaskStoreError, match="schema is version 999, newer"):
        await PostgresTaskStore.open(postgres_dsn, "r2")


async def test_restart_fails_only_the_restarting_replicas_own_tasks(postgres_dsn: str) -> None:
    a = await PostgresTaskStore.open(postgres_dsn, "replica-a")
    mine, theirs, queued, done, my_queued = (record(TaskState.WORKING), record(TaskState.WORKING),
                                             record(TaskState.SUBMITTED), record(TaskState.COMPLETED),
                                             record(TaskState.SUBMITTED))
    for r in (mine, theirs, queued, done, my_queued):
        await a.put(r)
    await a.pool.execute("UPDATE tasks SET owner = 'replica-a' WHERE id = ANY($1::text[])",
                         [mine.id, done.id, my_queued.id])
    await a.pool.execute("UPDATE tasks SET owner = 'replica-b' WHERE id = $1", theirs.id)
    assert await a.mark_interrupted("gone") == [mine.id]
    assert (await a.get(mine.id)).state is TaskState.FAILED  # type: ignore[union-attr]
    # its queued task goes back to the pool, still queued, for any replica to claim
    assert (await a.get(my_queued.id)).state is TaskState.SUBMITTED  # type: ignore[union-attr]
    assert await a.pool.fetchval("SELECT owner FROM tasks WHERE id = $1", my_queued.id) is None
    assert (await a.get(theirs.id)).state is TaskState.WORKING  # type: ignore[union-attr]
    assert (await a.get(queued.id)).state is TaskState.SUBMITTED  # type: ignore[union-attr]
    assert (await a.get(done.id)).state is TaskState.COMPLETED  # type: ignore[union-attr]
    await a.close()


async def test_a_replica_declared_dead_cannot_overwrite_what_a_survivor_wrote(postgres_dsn: str) -> None:
    zombie = await PostgresTaskStore.open(postgres_dsn, "zombie")
    survivor = await PostgresTaskStore.open(postgres_dsn, "survivor")
    task = record(TaskState.WORKING)
    await zombie.put(task)
    await zombie.pool.execute("UPDATE tasks SET owner = 'survivor' WHERE id = $1", task.id)  # the sweep took it
    failed = record(TaskState.FAILED, task.context_id)
    failed.id = task.id
    await survivor.put(failed)
    task.state = TaskState.COMPLETED
    await zombie.put(task)  # too late: refused (and logged), the survivor's FAILED stays
    assert (await survivor.get(task.id)).state is TaskState.FAILED  # type: ignore[union-attr]
    await zombie.close()
    await survivor.close()


async def test_threaded_histories_live_in_the_database(postgres_dsn: str) -> None:
    a = await PostgresTaskStore.open(postgres_dsn, "a")
    b = await PostgresTaskStore.open(postgres_dsn, "b")
    context = new_context_id()
    await a.pool.execute("INSERT INTO contexts (context_id, owner) VALUES ($1, 'a')", context)  # a holds its lease
    assert await a.load_history(context) == []
    messages = [{"id": "m1", "role": "user", "content": "hi ✓ \x00 \ud83d"}, {"id": "m2", "role": "assistant"}]
    await a.save_history(context, messages[:1])
    await a.save_history(context, messages)
    assert await b.load_history(context) == messages  # another replica reads what this one wrote
    await a.close()
    await b.close()


async def test_the_embedded_stores_keep_histories_in_the_workdir(tmp_path: Path) -> None:
    for store in (MemoryTaskStore(), await SqliteTaskStore.open(tmp_path / "tasks.sqlite3")):
        await store.save_history("ctx_x", [{"id": "m"}])
        assert await store.load_history("ctx_x") is None  # the daemon reads the workdir file instead
        await store.close()


async def test_ping_answers_on_every_store(task_store: TaskStore) -> None:
    await task_store.ping()


async def test_ping_raises_once_the_database_is_gone(postgres_server, postgres_dsn: str) -> None:  # type: ignore[no-untyped-def]
    store = await PostgresTaskStore.open(postgres_dsn, "a")
    await store.ping()
    await store.pool.close()
    with pytest.raises(asyncpg.InterfaceError):
        await store.ping()


async def test_an_unreachable_database_is_named_without_its_password() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens once the socket closes
    dsn = f"postgresql://murmur:s3cret@127.0.0.1:{port}/tasks"
    with pytest.raises(TaskStoreError) as caught:
        await PostgresTaskStore.open(dsn, "a", NO_RETENTION, timeout=3)
    assert "unreachable" in str(caught.value) and f"127.0.0.1:{port}/tasks" in str(caught.value)
    assert "s3cret" not in str(caught.value)
    assert redact(dsn) == f"postgresql://***@127.0.0.1:{port}/tasks"


async def test_store_locations(tmp_path: Path, postgres_dsn: str) -> None:
    with pytest.raises(TaskStoreError, match="not a store"):
        check_location("mysql://x")
    sqlite = await open_store(None, tmp_path, NO_RETENTION, "r")
    assert isinstance(sqlite, SqliteTaskStore) and sqlite.path == tmp_path / "tasks.sqlite3"
    await sqlite.close()
    pg = await open_store(postgres_dsn, tmp_path, NO_RETENTION, "r")
    assert isinstance(pg, PostgresTaskStore)
    await pg.close()


async def test_a_replica_declared_dead_cannot_start_a_task_it_no_longer_owns(postgres_dsn: str) -> None:
    """A queued task the sweep handed back (no owner) or another replica claimed is not the
    zombie's to start: its WORKING is refused (`put` says so), the row stays queued for a claim."""
    zombie = await PostgresTaskStore.open(postgres_dsn, "zombie")
    handed_back, claimed = record(TaskState.SUBMITTED), record(TaskState.SUBMITTED)
    for task in (handed_back, claimed):
        assert await zombie.put(task)
    await zombie.pool.execute("UPDATE tasks SET owner = 'survivor' WHERE id = $1", claimed.id)
    for task in (handed_back, claimed):
        task.state = TaskState.WORKING
        assert await zombie.put(task) is False
        assert (await zombie.get(task.id)).state is TaskState.SUBMITTED  # type: ignore[union-attr]
    assert await zombie.pool.fetchval("SELECT owner FROM tasks WHERE id = $1", handed_back.id) is None
    await zombie.pool.execute("UPDATE tasks SET owner = 'zombie' WHERE id = $1", handed_back.id)  # claimed again
    assert await zombie.put(handed_back)  # its owner's write is stored
    assert (await zombie.get(handed_back.id)).state is TaskState.WORKING  # type: ignore[union-attr]
    await zombie.close()


@pytest.mark.parametrize(("dsn", "shown"), [
    ("postgresql://u:s3cret@db:5432/tasks", "postgresql://***@db:5432/tasks"),
    ("postgresql://db/tasks?user=u&password=s3cret&sslmode=require", "postgresql://db/tasks?user=u&password=***&sslmode=require"),
    ("postgresql://u:s3/cret@db/tasks", "postgresql://***@db/tasks"),  # unescaped: the URL parses oddly
    ("postgresql://u:s3@cret@db/tasks", "postgresql://***@db/tasks"),
    ("postgres://db/tasks?sslpassword=s3cret", "postgres://db/tasks?sslpassword=***"),
])
def test_a_connection_string_is_shown_without_its_secrets(dsn: str, shown: str) -> None:
    assert redact(dsn) == shown


@pytest.mark.parametrize("location", ["postgresq://u:s3cret@db/tasks", "mysql://root:s3cret@db"])
def test_a_mistyped_store_is_refused_without_echoing_its_password(location: str) -> None:
    with pytest.raises(TaskStoreError, match="is not a store") as caught:
        check_location(location)
    assert "s3cret" not in str(caught.value)


async def test_an_unreachable_store_never_shows_a_password_given_as_a_parameter() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(TaskStoreError, match="unreachable") as caught:
        await PostgresTaskStore.open(f"postgresql://127.0.0.1:{port}/tasks?user=u&password=s3cret", "a", timeout=3)
    assert "s3cret" not in str(caught.value)
    with pytest.raises(TaskStoreError, match="does not parse") as caught:  # a `/` in the password: asyncpg
        await PostgresTaskStore.open(f"postgresql://u:pa55/word@127.0.0.1:{port}/tasks", "a", timeout=3)
    assert "pa55" not in str(caught.value) and "word" not in str(caught.value)


async def test_only_the_replica_holding_a_contexts_lease_writes_its_history(postgres_dsn: str) -> None:
    """A replica declared dead may still finish a run; the conversation its survivor continued
    since must not be overwritten by it."""
    zombie = await PostgresTaskStore.open(postgres_dsn, "zombie")
    survivor = await PostgresTaskStore.open(postgres_dsn, "survivor")
    context, fresh = new_context_id(), new_context_id()
    await zombie.pool.execute("INSERT INTO contexts (context_id, owner) VALUES ($1, 'survivor')", context)
    newer = [{"id": "m1", "role": "user"}, {"id": "m2", "role": "user"}]
    await survivor.save_history(context, newer)
    await zombie.save_history(context, [{"id": "stale"}])
    await zombie.save_history(fresh, [{"id": "stale"}])  # a context nobody leases: nobody's to write
    assert await survivor.load_history(context) == newer
    assert await survivor.load_history(fresh) == []
    await zombie.close()
    await survivor.close()
