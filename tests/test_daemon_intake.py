"""Concurrent sends are judged one at a time and written side by side (issue 29).

The submission lock covers the decision only: the store writes of sends that arrive together
wait in the store's queue together (the SQLite store commits them as one batch), while every
decision still counts the sends decided before it (`_placing`) as what they will be once queued.
A real `CapsuleDaemon` over a staged capsule, wasmtime and real SQLite; the store's thread is
held busy (as a long write would) so that sends pile up behind it.
"""

from __future__ import annotations

import asyncio
import threading

import asyncpg
from pathlib import Path

import pytest

from a2akit import chaos_capsule
from murmurd.a2a.core.daemon import CapsuleDaemon
from murmurd.a2a.core.intake import Submission, TooManyOpenContexts
from murmurd.a2a.core.lifecycle import LifecyclePolicy
from murmurd.a2a.core.tasks import TaskMessage, TaskRecord, TaskState
from murmurd.a2a.stores.postgres import PostgresTaskStore
from murmurd.a2a.stores.sqlite import SqliteTaskStore
from murmurd.host import ComponentHost
from murmurd.staging.stage import stage_capsule

pytestmark = pytest.mark.anyio

WAIT = 60.0  # a loaded machine's bound on what must happen, never a pace


@pytest.fixture(autouse=True)
def _built(artifacts) -> None:
    artifacts.fixture("chaos-driver")


async def _daemon(tmp_path: Path, host: ComponentHost, max_open_contexts: int | None = None,
                  dsn: str | None = None, **policy: object) -> CapsuleDaemon:
    staged = await asyncio.to_thread(stage_capsule, chaos_capsule(tmp_path), host=host)
    store = await (PostgresTaskStore.open(dsn, "intake-test") if dsn is not None
                   else SqliteTaskStore.open(tmp_path / "state" / "tasks.sqlite3"))
    settings: dict[str, object] = {"task_acceptance": "queue", "after_task": "sleep", "queue_depth": 64,
                                   "max_concurrent_tasks": 64, **policy}
    daemon = CapsuleDaemon(staged, host, store, policy=LifecyclePolicy(**settings),  # type: ignore[arg-type]
                           max_open_contexts=max_open_contexts)
    await daemon.start()
    return daemon


def _sqlite(daemon: CapsuleDaemon) -> SqliteTaskStore:
    assert isinstance(daemon.store, SqliteTaskStore)
    return daemon.store


def _sends(daemon: CapsuleDaemon, count: int, context_id: str | None = None) -> list[asyncio.Future[TaskRecord]]:
    """`count` operator sends at once (in `context_id`, else each in a new context)."""
    return [asyncio.ensure_future(daemon.submit(Submission(_message(f"task {n}", context_id), context_id=context_id)))
            for n in range(count)]


def _message(text: str, context_id: str | None = None) -> TaskMessage:
    return TaskMessage("msg_1", "user", [{"text": text}], context_id=context_id)


class HeldStore:
    """The store's thread busy until `release`: what is sent meanwhile waits in its queue."""

    def __init__(self, store: SqliteTaskStore) -> None:
        self.store = store
        self._release, self._running = threading.Event(), threading.Event()
        self._held: asyncio.Future[None] | None = None

    async def __aenter__(self) -> HeldStore:
        def occupy(_db: object) -> None:
            self._running.set()
            self._release.wait(WAIT)

        self._held = asyncio.ensure_future(self.store._call(occupy))
        assert await asyncio.to_thread(self._running.wait, WAIT)
        return self

    async def queued(self, count: int) -> None:
        """Until `count` calls wait in the store's queue."""
        for _ in range(100_000):
            if self.store._thread._queue.qsize() >= count:
                return
            await asyncio.sleep(0)
        raise AssertionError(f"only {self.store._thread._queue.qsize()} of {count} store calls were queued")

    async def release(self) -> None:
        self._release.set()
        assert self._held is not None
        await self._held

    async def __aexit__(self, *_exc: object) -> None:
        self._release.set()
        if self._held is not None:
            await self._held


async def _settled(daemon: CapsuleDaemon, record: TaskRecord) -> TaskRecord:
    return await asyncio.wait_for(daemon.wait_settled(record), timeout=WAIT)


async def test_sends_that_arrive_together_are_written_together(tmp_path: Path, host: ComponentHost) -> None:
    daemon = await _daemon(tmp_path, host)
    store = _sqlite(daemon)
    try:
        async with HeldStore(store) as held:
            sends = _sends(daemon, 30)
            await held.queued(30)  # all thirty creates wait at once: the lock did not hold them back
            assert len(daemon._placing) == 30 and not any(s.done() for s in sends)
            batches = store._thread.batches
            await held.release()
            records = await asyncio.wait_for(asyncio.gather(*sends), WAIT)
        assert store._thread.batches - batches <= 3  # the thirty creates in one batch (reads may follow)
        assert not daemon._placing
        for record in records:
            assert (await _settled(daemon, record)).state is TaskState.COMPLETED
            assert (await store.get(record.id)).state is TaskState.COMPLETED
    finally:
        await daemon.stop(grace_seconds=5)


async def test_a_send_decided_while_others_are_written_counts_them(tmp_path: Path, host: ComponentHost) -> None:
    """Bound 1, a queue of 2: of six sends in six contexts decided while none is stored yet, one
    starts, two wait and three are rejected, as if each had been stored before the next came."""
    daemon = await _daemon(tmp_path, host, max_concurrent_tasks=1, queue_depth=2)
    store = _sqlite(daemon)
    try:
        async with HeldStore(store) as held:
            sends = _sends(daemon, 6)
            await held.queued(6)
            assert [p.starts for p in daemon._placing.values()] == [True, False, False]
            await held.release()
            records = await asyncio.wait_for(asyncio.gather(*sends), WAIT)
        states = [r.state for r in records]
        assert states[3:] == [TaskState.REJECTED] * 3
        assert all(r.status_message == "rejected: the task queue is full (queue_depth 2)" for r in records[3:])
        for record in records[:3]:
            assert (await _settled(daemon, record)).state is TaskState.COMPLETED
        for record in records[3:]:
            assert (await store.get(record.id)).state is TaskState.REJECTED  # the rejection recorded too
    finally:
        await daemon.stop(grace_seconds=5)


async def test_single_acceptance_rejects_a_second_send_while_the_first_is_written(
        tmp_path: Path, host: ComponentHost) -> None:
    daemon = await _daemon(tmp_path, host, task_acceptance="single", max_concurrent_tasks=1)
    store = _sqlite(daemon)
    try:
        async with HeldStore(store) as held:
            first = asyncio.ensure_future(daemon.submit(Submission(_message("first"))))
            second = asyncio.ensure_future(daemon.submit(Submission(_message("second"))))
            await held.queued(2)
            await held.release()
            first_record, second_record = await asyncio.wait_for(asyncio.gather(first, second), WAIT)
        assert second_record.state is TaskState.REJECTED
        assert second_record.status_message == \
            "rejected: the capsule accepts a single task at a time and one is running"
        assert (await _settled(daemon, first_record)).state is TaskState.COMPLETED
    finally:
        await daemon.stop(grace_seconds=5)


async def test_two_sends_in_one_context_never_run_together(tmp_path: Path, host: ComponentHost) -> None:
    daemon = await _daemon(tmp_path, host)
    store = _sqlite(daemon)
    try:
        first_record = await daemon.submit(Submission(_message("first")))
        await _settled(daemon, first_record)
        context = first_record.context_id
        async with HeldStore(store) as held:
            sends = _sends(daemon, 3, context)
            await held.queued(3)
            assert [p.starts for p in daemon._placing.values()] == [True, False, False]
            await held.release()
            records = await asyncio.wait_for(asyncio.gather(*sends), WAIT)
            running_together = 0
            while not all(r.state.terminal for r in records):  # sampled at every step of the loop
                in_context = [r for r in daemon._running.values() if r.record.context_id == context]
                running_together = max(running_together, len(in_context))
                await asyncio.sleep(0)
        assert running_together == 1
        assert [r.state for r in records] == [TaskState.COMPLETED] * 3
    finally:
        await daemon.stop(grace_seconds=5)


async def test_a_stop_waits_for_the_sends_it_accepted_and_cancels_them(tmp_path: Path, host: ComponentHost) -> None:
    daemon = await _daemon(tmp_path, host, max_concurrent_tasks=1)
    store = _sqlite(daemon)
    async with HeldStore(store) as held:
        sends = _sends(daemon, 4)
        await held.queued(4)
        stopping = asyncio.ensure_future(daemon.stop(grace_seconds=WAIT, close_store=False))
        await asyncio.sleep(0)  # the stop has begun: no longer accepting
        assert not daemon.accepting
        await held.release()
        records = await asyncio.wait_for(asyncio.gather(*sends), WAIT)
        await asyncio.wait_for(stopping, WAIT)
    try:
        for record in records:  # none left `submitted` for the next daemon to find interrupted
            stored = await store.get(record.id)
            assert stored is not None and stored.state.terminal, (record.id, stored)
            assert record.state.terminal
    finally:
        await store.close()


async def test_a_peers_sends_decided_together_never_open_more_contexts_than_its_bound(
        tmp_path: Path, host: ComponentHost) -> None:
    """A peer's open contexts are counted from the store: its sends decided before a new one are
    waited for (stored) before that one is judged, so six at once open three, not six. (The
    SQLite store's one thread would keep that order by itself; PostgreSQL's pool does not.)"""
    daemon = await _daemon(tmp_path, host, max_open_contexts=3, max_concurrent_tasks=1)
    store = _sqlite(daemon)

    def peer_send(n: int) -> Submission:  # a task that asks for input: its context stays open
        return Submission(_message(f"mode:ask peer {n}"), origin="peer", trust="peer", principal="peer-a",
                          confined_to="peer-a")

    try:
        async with HeldStore(store) as held:
            sends = [asyncio.ensure_future(daemon.submit(peer_send(n))) for n in range(6)]
            await held.queued(1)
            await held.release()
            outcomes = await asyncio.wait_for(asyncio.gather(*sends, return_exceptions=True), WAIT)
        accepted = [o for o in outcomes if isinstance(o, TaskRecord)]
        refused = [o for o in outcomes if isinstance(o, TooManyOpenContexts)]
        assert (len(accepted), len(refused)) == (3, 3), outcomes
        assert len({r.context_id for r in accepted}) == 3
    finally:
        await daemon.stop(grace_seconds=5)


async def test_on_postgresql_a_peers_next_send_waits_for_its_last_to_be_stored(
        tmp_path: Path, host: ComponentHost, postgres_dsn: str) -> None:
    """PostgreSQL answers a read on one pooled connection while another's insert waits: with the
    table locked against inserts, a peer's second send is judged only once its first is stored,
    never counted from a store that does not have the first yet."""
    daemon = await _daemon(tmp_path, host, max_open_contexts=1, dsn=postgres_dsn)
    locker = await asyncpg.connect(postgres_dsn)

    def peer_send(n: int) -> Submission:  # a task that asks for input: its context stays open
        return Submission(_message(f"mode:ask peer {n}"), origin="peer", trust="peer", principal="peer-a",
                          confined_to="peer-a")

    try:
        locking = locker.transaction()
        await locking.start()
        await locker.execute("LOCK TABLE tasks IN EXCLUSIVE MODE")  # reads go on, inserts wait
        first = asyncio.ensure_future(daemon.submit(peer_send(1)))
        for _ in range(100_000):
            if daemon._placing:
                break
            await asyncio.sleep(0.001)
        (placing,) = daemon._placing.values()
        second = asyncio.ensure_future(daemon.submit(peer_send(2)))
        for _ in range(100_000):  # the second's judgement waits on the first's write, or it got past
            if placing.written._waiters or len(daemon._placing) > 1 or second.done():  # type: ignore[attr-defined]
                break
            await asyncio.sleep(0.001)
        assert len(daemon._placing) == 1 and not second.done()
        await locking.rollback()
        assert isinstance(await asyncio.wait_for(first, WAIT), TaskRecord)
        with pytest.raises(TooManyOpenContexts):
            await asyncio.wait_for(second, WAIT)
    finally:
        await locker.close()
        await daemon.stop(grace_seconds=5)


async def test_a_send_written_after_a_stop_emptied_the_queue_is_canceled_not_left(
        tmp_path: Path, host: ComponentHost) -> None:
    """With no grace the stop goes on without waiting for the writes; each send written after
    the queue was emptied cancels itself, so no blocked caller waits on a task nothing will run."""
    daemon = await _daemon(tmp_path, host, max_concurrent_tasks=1)
    store = _sqlite(daemon)
    async with HeldStore(store) as held:
        sends = _sends(daemon, 3)
        await held.queued(3)
        stopping = asyncio.ensure_future(daemon.stop(grace_seconds=0, close_store=False))
        for _ in range(100_000):
            if daemon._drained or stopping.done():
                break
            await asyncio.sleep(0.001)
        assert daemon._drained and len(daemon._placing) == 3
        await held.release()
        records = await asyncio.wait_for(asyncio.gather(*sends), WAIT)
        settled = await asyncio.wait_for(asyncio.gather(*(daemon.wait_settled(r) for r in records)), WAIT)
        await asyncio.wait_for(stopping, WAIT)
    try:
        assert [r.state for r in settled] == [TaskState.CANCELED] * 3
        for record in records:
            stored = await store.get(record.id)
            assert stored is not None and stored.state is TaskState.CANCELED
            assert stored.status_message == "canceled: daemon shutting down"
    finally:
        await store.close()
