"""Retention of finished tasks in both stores (real SQLite): by age, by count (rejected tasks
counted apart), automatically while writing, never a task still running."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from murmurd.a2a.stores.memory import MemoryTaskStore

from murmurd.a2a.stores.base import Retention, TaskStore, prune_periodically

from murmurd.a2a.stores.sqlite import SqliteTaskStore
from murmurd.a2a.core.tasks import TaskRecord, TaskState, new_context_id, new_task_id, now_ms

pytestmark = pytest.mark.anyio

DAY_MS = 24 * 3600 * 1000
LIVE = (TaskState.SUBMITTED, TaskState.WORKING, TaskState.INPUT_REQUIRED)


def record(state: TaskState, updated_at: int) -> TaskRecord:
    return TaskRecord(id=new_task_id(), context_id=new_context_id(), state=state,
                      created_at=updated_at - 1, updated_at=updated_at)


@pytest.fixture
def store(task_store: TaskStore) -> TaskStore:
    """Every backend: memory, SQLite, PostgreSQL (conftest `task_store`)."""
    return task_store


async def ids(store: TaskStore) -> set[str]:
    return {r.id for r in await store.list(limit=100_000)}


async def test_age_prunes_old_finished_tasks_and_never_a_live_one(store: TaskStore) -> None:
    now = now_ms()
    old_done = [record(state, now - 10 * DAY_MS) for state in
                (TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED, TaskState.REJECTED)]
    old_live = [record(state, now - 10 * DAY_MS) for state in LIVE]
    fresh = record(TaskState.COMPLETED, now)
    for r in [*old_done, *old_live, fresh]:
        await store.put(r)
    assert await store.prune(Retention(max_age_secs=7 * 24 * 3600, max_count=None)) == len(old_done)
    assert await ids(store) == {r.id for r in [*old_live, fresh]}


async def test_count_keeps_the_newest_of_each_class(store: TaskStore) -> None:
    now = now_ms()
    completed = [record(TaskState.COMPLETED, now - i) for i in range(8)]  # newest first
    rejected = [record(TaskState.REJECTED, now + 100 - i) for i in range(8)]  # all newer than any answer
    live = [record(TaskState.WORKING, now - 1000 - i) for i in range(5)]
    for r in [*completed, *rejected, *live]:
        await store.put(r)
    deleted = await store.prune(Retention(max_age_secs=None, max_count=3))
    assert deleted == 10
    assert await ids(store) == {r.id for r in [*completed[:3], *rejected[:3], *live]}


async def test_no_limits_prune_nothing(store: TaskStore) -> None:
    for i in range(5):
        await store.put(record(TaskState.REJECTED, 1_000 + i))
    assert await store.prune(Retention(max_age_secs=None, max_count=None)) == 0
    assert len(await ids(store)) == 5


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
async def test_the_count_is_enforced_while_writing(kind: str, tmp_path: Path) -> None:
    retention = Retention(max_age_secs=None, max_count=20)
    store: TaskStore = (await SqliteTaskStore.open(tmp_path / "t.sqlite3", retention) if kind == "sqlite"
                        else MemoryTaskStore(retention))
    live = record(TaskState.WORKING, 1)
    await store.put(live)
    for i in range(200):
        await store.put(record(TaskState.REJECTED, 10 + i))
    kept = await ids(store)
    assert live.id in kept
    assert 20 <= len(kept) - 1 <= 20 + retention.slack
    await store.close()


async def test_sqlite_retention_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "tasks.sqlite3"
    store = await SqliteTaskStore.open(path)
    for i in range(30):
        await store.put(record(TaskState.FAILED, 1_000 + i))
    await store.close()
    reopened = await SqliteTaskStore.open(path, Retention(max_age_secs=None, max_count=5))
    assert await reopened.prune(reopened.retention) == 25
    await reopened.close()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM tasks").fetchone()[0] == 5


async def test_prune_periodically_applies_the_age_limit_on_a_timer(tmp_path: Path) -> None:
    store = await SqliteTaskStore.open(tmp_path / "tasks.sqlite3")
    await store.put(record(TaskState.COMPLETED, now_ms()))
    pruner = asyncio.create_task(prune_periodically(store, Retention(max_age_secs=0.2, max_count=None), 0.05))
    try:
        for _ in range(100):  # bounded: 5 s
            if not await ids(store):
                break
            await asyncio.sleep(0.05)
        assert await ids(store) == set()
    finally:
        pruner.cancel()
        await asyncio.gather(pruner, return_exceptions=True)
        await store.close()


async def test_a_failing_prune_is_logged_and_retried(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = await SqliteTaskStore.open(tmp_path / "tasks.sqlite3")
    await store.close()  # every prune now fails
    pruner = asyncio.create_task(prune_periodically(store, Retention(), 0.02))
    await asyncio.sleep(0.2)
    assert not pruner.done()
    pruner.cancel()
    await asyncio.gather(pruner, return_exceptions=True)
    assert sum("pruning finished tasks failed" in r.message for r in caplog.records) >= 2
