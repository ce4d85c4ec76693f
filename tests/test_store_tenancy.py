"""The store side of issue 21 on every backend (memory, SQLite, a real PostgreSQL): `create` is
one atomic insert that never overwrites, a context's members outlive its pruned tasks until it is
forgotten, and the creating credential filters without parsing the record (U+0000)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import asyncpg
import pytest

from murmurd.a2a.stores.base import CONTEXT_FOREIGN, ID_TAKEN, Retention, TaskStore
from murmurd.a2a.stores.memory import MemoryTaskStore
from murmurd.a2a.stores.migrations import MIGRATIONS
from murmurd.a2a.stores.postgres import PostgresTaskStore
from murmurd.a2a.stores.sqlite import SqliteTaskStore
from murmurd.a2a.core.tasks import TaskMessage, TaskRecord, TaskState

pytestmark = pytest.mark.anyio


def record(task_id: str, context_id: str, principal: str | None, text: str = "hello",
           state: TaskState = TaskState.SUBMITTED) -> TaskRecord:
    return TaskRecord(id=task_id, context_id=context_id, principal=principal, state=state,
                      history=[TaskMessage(f"m-{task_id}-{principal}", "user", [{"text": text}])])


async def test_create_refuses_an_existing_id_and_leaves_it_untouched(task_store: TaskStore) -> None:
    assert await task_store.create(record("job-0", "ctx-a", "peer-a", "secret a")) is None
    assert await task_store.create(record("job-0", "ctx-b", "peer-b", "secret b")) == ID_TAKEN
    kept = await task_store.get("job-0")
    assert kept is not None and (kept.principal, kept.context_id, kept.history[0].text) == ("peer-a", "ctx-a", "secret a")
    assert await task_store.context_members("ctx-b") == set()  # the refused one recorded nothing


async def test_concurrent_creates_of_one_id_make_one_task(task_store: TaskStore) -> None:
    outcomes = await asyncio.gather(*(task_store.create(record("dup", f"ctx-{i}", f"peer-{i}")) for i in range(8)))
    assert outcomes.count(None) == 1 and outcomes.count(ID_TAKEN) == 7
    winner = outcomes.index(None)
    assert (await task_store.get("dup")).principal == f"peer-{winner}"


async def test_an_exclusive_create_refuses_a_context_another_credential_used(task_store: TaskStore) -> None:
    assert await task_store.create(record("t1", "shared", "ops")) is None
    assert await task_store.create(record("t2", "shared", "peer-a"), exclusive_context=True) == CONTEXT_FOREIGN
    assert await task_store.get("t2") is None
    assert await task_store.create(record("t3", "own", "peer-a"), exclusive_context=True) is None
    assert await task_store.create(record("t4", "own", "peer-a"), exclusive_context=True) is None
    assert await task_store.create(record("t5", "own", "ops")) is None  # an operator may join any context
    assert await task_store.context_members("own") == {"peer-a", "ops"}
    assert await task_store.create(record("t6", "own", "peer-a"), exclusive_context=True) == CONTEXT_FOREIGN


async def test_members_outlive_pruning_until_the_context_is_forgotten(task_store: TaskStore) -> None:
    await task_store.create(record("old", "case-1", "ops", state=TaskState.COMPLETED))
    for i in range(3):
        await task_store.create(record(f"new-{i}", f"peer-ctx-{i}", "peer-a", state=TaskState.COMPLETED))
        await asyncio.sleep(0.002)  # distinct update times: "old" is the oldest
    assert await task_store.prune(Retention(max_age_secs=None, max_count=2)) >= 1
    assert await task_store.get("old") is None
    assert await task_store.context_members("case-1") == {"ops"}  # still the operator's
    assert "case-1" in await task_store.orphaned_contexts()
    assert await task_store.create(record("peer-try", "case-1", "peer-a"), exclusive_context=True) == CONTEXT_FOREIGN
    assert await task_store.forget_context("case-1") is True
    assert await task_store.context_members("case-1") == set() and "case-1" not in await task_store.orphaned_contexts()
    # a context that still holds a task is never forgotten
    await task_store.create(record("live", "busy", "ops"))
    assert await task_store.forget_context("busy") is False and await task_store.context_members("busy") == {"ops"}


async def test_contexts_with_tasks_names_those_that_hold_one_in_one_call(task_store: TaskStore) -> None:
    assert await task_store.contexts_with_tasks([]) == set()
    await task_store.create(record("p1", "pruned", "ops", state=TaskState.COMPLETED))  # the oldest finished
    await asyncio.sleep(0.002)
    await task_store.create(record("k1", "kept", "ops", state=TaskState.COMPLETED))
    await task_store.create(record("k2", "kept", "ops"))
    for i in range(600):  # more ids than one SQLite `IN (...)` takes
        await task_store.create(record(f"many-{i}", f"ctx-{i}", "peer-a"))
    await task_store.create(record("newer", "newer", "ops", state=TaskState.COMPLETED))
    assert await task_store.prune(Retention(max_age_secs=None, max_count=2)) >= 1  # "pruned" lost its task
    asked = ["kept", "pruned", "never-used", "newer", *(f"ctx-{i}" for i in range(0, 600, 7)), "ctx-599"]
    held = await task_store.contexts_with_tasks(asked)
    assert held == {"kept", "newer", *(f"ctx-{i}" for i in range(0, 600, 7)), "ctx-599"}
    assert "pruned" in await task_store.orphaned_contexts(1000)


async def test_open_contexts_count_unfinished_tasks_per_credential(task_store: TaskStore) -> None:
    await task_store.create(record("a1", "c1", "peer-a"))
    await task_store.create(record("a2", "c1", "peer-a"))
    await task_store.create(record("a3", "c2", "peer-a", state=TaskState.INPUT_REQUIRED))
    await task_store.create(record("a4", "c3", "peer-a", state=TaskState.COMPLETED))
    await task_store.create(record("b1", "c4", "peer-b"))
    assert await task_store.open_contexts("peer-a", "c1") == (2, True)
    assert await task_store.open_contexts("peer-a", "c3") == (2, False)
    assert await task_store.open_contexts("peer-b", None) == (1, False)


async def test_a_nul_in_a_record_filters_like_any_text(task_store: TaskStore) -> None:
    await task_store.create(record("nul", "c-nul", "peer-a", "zero \u0000 byte"))
    await task_store.create(record("plain", "c-plain", "peer-b"))
    assert [r.id for r in await task_store.list(principal="peer-b")] == ["plain"]
    assert await task_store.count(principal="peer-b") == 1
    listed = await task_store.list(principal="peer-a")
    assert [r.history[0].text for r in listed] == ["zero \u0000 byte"]


async def test_an_older_sqlite_file_gains_the_principal_column_and_the_members(tmp_path: Path) -> None:
    path = tmp_path / "tasks.sqlite3"
    db = sqlite3.connect(path)
    db.executescript("""CREATE TABLE tasks (id TEXT PRIMARY KEY, context_id TEXT NOT NULL, state TEXT NOT NULL,
        created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, record TEXT NOT NULL);""")
    old = record("t-old", "ctx-old", "peer-a", state=TaskState.COMPLETED)
    db.execute("INSERT INTO tasks VALUES (?, ?, ?, ?, ?, ?)", (old.id, old.context_id, old.state.value,
                                                             old.created_at, old.updated_at, json.dumps(old.to_json())))
    db.commit()
    db.close()
    store = await SqliteTaskStore.open(path)
    try:
        assert [r.id for r in await store.list(principal="peer-a")] == ["t-old"]
        assert await store.context_members("ctx-old") == {"peer-a"}
        assert await store.create(record("t-new", "ctx-old", "peer-b"), exclusive_context=True) == CONTEXT_FOREIGN
    finally:
        await store.close()


async def test_a_postgres_schema_before_issue_21_is_backfilled(postgres_dsn: str) -> None:
    conn = await asyncpg.connect(postgres_dsn)
    try:
        await conn.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, "
                           "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")
        for version, sql in MIGRATIONS:
            if version <= 5:
                await conn.execute(sql)
                await conn.execute("INSERT INTO schema_migrations (version) VALUES ($1)", version)
        for task in (record("with-nul", "ctx-nul", "peer-a", "zero \u0000 byte", TaskState.COMPLETED),
                     record("plain", "ctx-plain", "ops", state=TaskState.COMPLETED)):
            await conn.execute("INSERT INTO tasks (id, context_id, state, created_at, updated_at, record)"
                               " VALUES ($1, $2, $3, $4, $5, $6)", task.id, task.context_id, task.state.value,
                               task.created_at, task.updated_at, json.dumps(task.to_json()))
    finally:
        await conn.close()
    store = await PostgresTaskStore.open(postgres_dsn, "r1")
    try:
        assert [r.id for r in await store.list(principal="peer-a")] == ["with-nul"]
        assert await store.context_members("ctx-nul") == {"peer-a"}
        assert await store.context_members("ctx-plain") == {"ops"}
    finally:
        await store.close()


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
async def test_a_flood_of_rejected_creates_is_pruned_as_it_is_written(kind: str, tmp_path: Path,
                                                                        request: pytest.FixtureRequest) -> None:
    retention = Retention(max_age_secs=None, max_count=3)
    store: TaskStore
    if kind == "postgres":
        store = await PostgresTaskStore.open(request.getfixturevalue("postgres_dsn"), "r1", retention)
    elif kind == "sqlite":
        store = await SqliteTaskStore.open(tmp_path / "tasks.sqlite3", retention)
    else:
        store = MemoryTaskStore(retention)
    try:
        for i in range(20):
            assert await store.create(record(f"rej-{i}", f"c-{i}", "peer-a", state=TaskState.REJECTED)) is None
        assert await store.count(state=TaskState.REJECTED) <= 3 + retention.slack
    finally:
        await store.close()
