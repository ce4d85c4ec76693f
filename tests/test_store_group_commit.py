"""The SQLite store's thread (issue 29): what is queued while a batch runs is the next batch; the
terminal states in it share one sync of the write-ahead log, answered only after it; the rest of
the batch is answered without waiting on that sync; a failed sync is told to its callers only."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

from murmurd.a2a.stores.base import TaskStoreError
from murmurd.a2a.stores.sqlite import SqliteTaskStore
from murmurd.a2a.stores.sqlite_thread import LostSync
from murmurd.lane import Lane
from murmurd.a2a.core.tasks import TaskRecord, TaskState, new_context_id, new_task_id

pytestmark = pytest.mark.anyio

WAIT = 60.0  # a loaded machine's bound on what must happen, never a pace


def record(state: TaskState) -> TaskRecord:
    return TaskRecord(id=new_task_id(), context_id=new_context_id(), state=state, result_text="the answer")


async def hold_thread(store: SqliteTaskStore) -> tuple[threading.Event, asyncio.Future[None]]:
    """Occupy the store thread until the returned event is set (what a long write would do)."""
    release, running = threading.Event(), threading.Event()

    def occupy(_db: object) -> None:
        running.set()
        release.wait(WAIT)

    held = asyncio.ensure_future(store._call(occupy))
    assert await asyncio.to_thread(running.wait, WAIT)
    return release, held


async def queued(store: SqliteTaskStore, count: int) -> None:
    """Until `count` operations wait in the store thread's queue (each put enqueues at its first step)."""
    for _ in range(10_000):
        if store._thread._queue.qsize() >= count:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"only {store._thread._queue.qsize()} of {count} operations were queued")


@pytest.mark.parametrize("on_executor", [False, True], ids=["own-thread", "on-an-executor"])
async def test_terminal_states_that_end_together_share_one_sync(tmp_path: Path, on_executor: bool) -> None:
    """On its own thread, and on `murmurd serve`'s one executor thread (a `Lane`)."""
    lane = Lane("test-lane") if on_executor else None
    store = await SqliteTaskStore.open(tmp_path / "tasks.sqlite3", executor=lane)
    try:
        syncs_before = store._thread.syncs
        release, held = await hold_thread(store)
        records = [record(TaskState.COMPLETED) for _ in range(40)]
        puts = [asyncio.ensure_future(store.put(r)) for r in records]
        await queued(store, len(records))
        assert not any(p.done() for p in puts)
        release.set()
        await held
        assert await asyncio.wait_for(asyncio.gather(*puts), WAIT) == [True] * len(records)
        assert store._thread.syncs - syncs_before == 1  # forty answers, one fsync
        for r in records:
            loaded = await store.get(r.id)
            assert loaded is not None and loaded.state is TaskState.COMPLETED
    finally:
        await store.close()

    if lane is not None:
        lane.shutdown()
    reopened = await SqliteTaskStore.open(tmp_path / "tasks.sqlite3")  # what was answered was kept
    try:
        assert await reopened.count(state=TaskState.COMPLETED) == len(records)
    finally:
        await reopened.close()


async def test_an_intermediate_state_costs_no_sync(tmp_path: Path) -> None:
    store = await SqliteTaskStore.open(tmp_path / "tasks.sqlite3")
    try:
        before = store._thread.syncs
        working = record(TaskState.WORKING)
        await store.create(working)
        await store.put(working)
        assert store._thread.syncs == before
        working.state = TaskState.COMPLETED
        await store.put(working)
        assert store._thread.syncs == before + 1
    finally:
        await store.close()


async def test_a_read_before_the_terminal_write_is_answered_before_its_sync_one_after_it_after(
        tmp_path: Path) -> None:
    """A read queued ahead of a terminal write does not wait on the disk; one queued behind it may
    have seen that state, so it is answered only once the state is synced."""
    store = await SqliteTaskStore.open(tmp_path / "tasks.sqlite3")
    done = record(TaskState.COMPLETED)
    syncing, finish_sync = threading.Event(), threading.Event()
    real_sync = store._thread._sync

    def slow_sync() -> None:  # the disk taking its time over the fsync
        syncing.set()
        finish_sync.wait(WAIT)
        real_sync()

    try:
        release, held = await hold_thread(store)
        store._thread._sync = slow_sync
        before = asyncio.ensure_future(store.count())
        put = asyncio.ensure_future(store.put(done))
        after = asyncio.ensure_future(store.count())
        await queued(store, 3)
        release.set()
        await held
        assert await asyncio.wait_for(before, WAIT) == 0
        assert await asyncio.to_thread(syncing.wait, WAIT)
        assert not put.done() and not after.done()
        finish_sync.set()
        assert await asyncio.wait_for(put, WAIT) is True
        assert await asyncio.wait_for(after, WAIT) == 1
    finally:
        finish_sync.set()
        await store.close()


async def test_a_failed_sync_is_told_to_the_terminal_writes_of_its_batch_only(tmp_path: Path) -> None:
    store = await SqliteTaskStore.open(tmp_path / "tasks.sqlite3")
    real_sync = store._thread._sync

    def failing_sync() -> None:
        raise TaskStoreError(f"task store {store.path}: could not sync its write-ahead log (Input/output error)")

    try:
        release, held = await hold_thread(store)
        store._thread._sync = failing_sync
        terminal, working = record(TaskState.FAILED), record(TaskState.WORKING)
        put_working = asyncio.ensure_future(store.put(working))
        put_terminal = asyncio.ensure_future(store.put(terminal))
        await queued(store, 2)
        release.set()
        await held
        assert await asyncio.wait_for(put_working, WAIT) is True
        with pytest.raises(TaskStoreError, match="could not sync .*write-ahead log"):
            await asyncio.wait_for(put_terminal, WAIT)
        store._thread._sync = real_sync
        await store.put(terminal)  # the next batch syncs again
    finally:
        await store.close()


async def test_the_sync_is_a_commit_sqlite_syncs(tmp_path: Path) -> None:
    """The sync is SQLite's own (`synchronous=FULL` on one commit), never a path of ours reopened;
    the connection is back at NORMAL after it, so the next intermediate state costs no sync."""
    store = await SqliteTaskStore.open(tmp_path / "tasks.sqlite3")
    try:
        await store.put(record(TaskState.COMPLETED))
        level, marks = await store._call(lambda db: (db.execute("PRAGMA synchronous").fetchone()[0],
                                                     db.execute("SELECT n FROM store_syncs").fetchone()[0]))
        assert level == 1  # NORMAL
        assert marks == store._thread.syncs >= 1
    finally:
        await store.close()


async def test_close_runs_what_was_queued_first(tmp_path: Path) -> None:
    store = await SqliteTaskStore.open(tmp_path / "tasks.sqlite3")
    records = [record(TaskState.COMPLETED) for _ in range(10)]
    puts = [asyncio.ensure_future(store.put(r)) for r in records]
    await queued(store, 1)
    await store.close()
    assert await asyncio.gather(*puts) == [True] * len(records)
    assert not store._thread._thread.is_alive()
    with pytest.raises(RuntimeError, match="closed"):
        await store.get(records[0].id)


async def test_a_sync_the_disk_refused_refuses_every_later_terminal_write(tmp_path: Path) -> None:
    """After a failed fsync the kernel may have dropped the pages it could not write: a later
    sync that succeeds vouches for nothing before it, so the store refuses terminal writes from
    then on (intermediate states and reads go on) until it is opened again."""
    store = await SqliteTaskStore.open(tmp_path / "tasks.sqlite3")

    def refused() -> None:
        raise LostSync(f"task store {store.path}: the disk refused to sync it (disk I/O error)")

    try:
        store._thread._sync = refused
        with pytest.raises(LostSync, match="disk refused"):
            await store.put(record(TaskState.COMPLETED))
        store._thread._sync = lambda: None  # the disk answers again
        with pytest.raises(LostSync, match="refused until the store is opened again"):
            await store.put(record(TaskState.COMPLETED))
        working = record(TaskState.WORKING)
        assert await store.put(working) is True
        assert (await store.get(working.id)).state is TaskState.WORKING
    finally:
        await store.close()
    reopened = await SqliteTaskStore.open(tmp_path / "tasks.sqlite3")
    try:
        assert await reopened.put(record(TaskState.COMPLETED)) is True
    finally:
        await reopened.close()


async def test_a_close_in_the_batch_of_terminal_writes_syncs_them_first(tmp_path: Path) -> None:
    """A reader elsewhere keeps SQLite from folding the log into the file at close: the terminal
    writes queued with the close are still synced (the counter's commit) before they are answered."""
    path = tmp_path / "tasks.sqlite3"
    store = await SqliteTaskStore.open(path)
    reader = sqlite3.connect(path)
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT COUNT(*) FROM tasks").fetchone()  # a read transaction held open
        release, held = await hold_thread(store)
        puts = [asyncio.ensure_future(store.put(record(TaskState.COMPLETED))) for _ in range(3)]
        await queued(store, 3)
        closing = asyncio.ensure_future(store.close())
        await queued(store, 4)
        release.set()
        await held
        assert await asyncio.wait_for(asyncio.gather(*puts), WAIT) == [True] * 3
        await asyncio.wait_for(closing, WAIT)
        reader.execute("COMMIT")
        assert reader.execute("SELECT n FROM store_syncs").fetchone()[0] >= 1
        assert reader.execute("SELECT COUNT(*) FROM tasks").fetchone()[0] == 3
    finally:
        reader.close()


async def test_nothing_reopens_a_closed_store(tmp_path: Path) -> None:
    store = await SqliteTaskStore.open(tmp_path / "tasks.sqlite3")
    release, held = await hold_thread(store)
    closing = asyncio.ensure_future(store.close())
    await queued(store, 1)
    late = asyncio.ensure_future(store._thread.run(lambda db: db.execute("SELECT 1").fetchone()))
    await queued(store, 2)
    release.set()
    await held
    await asyncio.wait_for(closing, WAIT)
    with pytest.raises(RuntimeError, match="closed"):
        await asyncio.wait_for(late, WAIT)
    assert store._db is None
