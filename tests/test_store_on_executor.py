"""The SQLite store on `murmurd serve`'s thread for short blocking work (issue 29): a real store on
a real one-thread executor runs its operations on that thread only, a batch at a time, with the
executor's other work (the sessions' files) between its batches; what is queued while a batch
runs is still the next batch (its terminal states share one sync: `test_store_group_commit.py`);
and a closed store answers nothing more."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from murmurd.a2a.core.tasks import TaskState
from murmurd.a2a.stores.sqlite import SqliteTaskStore
from murmurd.a2a.stores.sqlite_thread import BATCH_LIMIT
from murmurd.lane import Lane
from test_store_group_commit import WAIT, hold_thread, queued, record

pytestmark = pytest.mark.anyio


async def hold_lane(executor: ThreadPoolExecutor | Lane, gate: threading.Event) -> asyncio.Future[bool]:
    """Work on the executor's one thread until `gate` is set, once it runs (whatever ran before
    it, the end of the store's last batch included, is over)."""
    started = threading.Event()

    def hold() -> bool:
        started.set()
        return gate.wait(WAIT)

    held = asyncio.get_running_loop().run_in_executor(executor, hold)
    assert await asyncio.to_thread(started.wait, WAIT)
    return held


@pytest.fixture
async def lane() -> AsyncIterator[ThreadPoolExecutor]:
    executor = ThreadPoolExecutor(1, thread_name_prefix="test-lane")
    yield executor
    executor.shutdown(wait=True)


async def test_the_executors_other_work_runs_between_the_stores_batches_on_its_one_thread(
        tmp_path: Path, lane: ThreadPoolExecutor) -> None:
    store = await SqliteTaskStore.open(tmp_path / "tasks.sqlite3", executor=lane)
    loop = asyncio.get_running_loop()
    try:
        gate, ran, threads = threading.Event(), [], set()
        blocked = await hold_lane(lane, gate)  # the executor's one thread, held

        def op(_db: object) -> None:
            ran.append(1)
            threads.add(threading.get_ident())

        ops = [asyncio.ensure_future(store._call(op)) for _ in range(3 * BATCH_LIMIT)]
        await queued(store, len(ops))  # every operation queued, the store's batch behind the gate

        def other_work() -> int:  # a session's file work, submitted after them
            threads.add(threading.get_ident())
            return len(ran)

        seen = loop.run_in_executor(lane, other_work)
        gate.set()
        await asyncio.gather(*ops)
        assert await seen == BATCH_LIMIT  # it ran after the first batch, not after all three
        assert await blocked and len(threads) == 1  # every operation on the executor's one thread
    finally:
        await store.close()


async def test_a_store_closed_on_the_executor_refuses_what_comes_after(
        tmp_path: Path, lane: ThreadPoolExecutor) -> None:
    store = await SqliteTaskStore.open(tmp_path / "tasks.sqlite3", executor=lane)
    done = record(TaskState.COMPLETED)
    assert await store.put(done)
    await store.close()
    with pytest.raises(RuntimeError, match="task store is closed"):
        await store.get(done.id)
    again = await SqliteTaskStore.open(tmp_path / "tasks.sqlite3", executor=lane)
    try:
        assert (await again.get(done.id)).state is TaskState.COMPLETED  # what was written is kept
    finally:
        await again.close()


async def test_on_a_lane_a_store_batch_waits_for_the_work_running_not_for_the_work_queued(tmp_path: Path) -> None:
    lane = Lane("test-lane")
    loop = asyncio.get_running_loop()
    store = await SqliteTaskStore.open(tmp_path / "tasks.sqlite3", executor=lane)
    try:
        gate, order = threading.Event(), []
        running = await hold_lane(lane, gate)  # a piece of file work, running
        queued_work = [loop.run_in_executor(lane, order.append, f"file {n}") for n in range(3)]
        ping = asyncio.ensure_future(store._call(lambda _db: order.append("store")))
        await queued(store, 1)
        gate.set()
        await asyncio.gather(running, ping, *queued_work)
        assert order == ["store", "file 0", "file 1", "file 2"]
    finally:
        await store.close()
        lane.shutdown()


async def test_a_store_whose_executor_is_shut_down_refuses_every_queued_operation(
        tmp_path: Path, lane: ThreadPoolExecutor) -> None:
    store = await SqliteTaskStore.open(tmp_path / "tasks.sqlite3", executor=lane)
    release, held = await hold_thread(store)  # a batch runs; what comes now waits for the next
    pings = [asyncio.ensure_future(store._call(lambda _db: None)) for _ in range(2 * BATCH_LIMIT + 88)]
    await queued(store, len(pings))
    lane.shutdown(wait=False)  # the batch running ends; the next cannot be submitted
    release.set()
    await held
    outcomes = await asyncio.wait_for(asyncio.gather(*pings, return_exceptions=True), WAIT)  # every one answered
    assert all(isinstance(o, RuntimeError) and "task store is closed" in str(o) for o in outcomes)
