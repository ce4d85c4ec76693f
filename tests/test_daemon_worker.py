"""The session worker outlives any single task: an exception inside one fails that task alone.

These drive a real `CapsuleDaemon` (a staged capsule, wasmtime, real SQLite) without the HTTP
edge, because the edge refuses the inputs that used to reach the worker; the worker must hold
even when something unforeseen gets past it.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest

from a2akit import chaos_capsule
from murmurd.a2a.core.daemon import CapsuleDaemon
from murmurd.a2a.core.intake import Submission
from murmurd.a2a.core.lifecycle import LifecyclePolicy
from murmurd.a2a.stores.sqlite import SqliteTaskStore
from murmurd.a2a.core.tasks import TaskMessage, TaskRecord, TaskState
from murmurd.host import ComponentHost
from murmurd.staging.stage import stage_capsule

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _built(artifacts) -> None:
    for name in ("chaos-driver", "ask"):
        artifacts.fixture(name)
    artifacts.example("echo")


async def _daemon(tmp_path: Path, host: ComponentHost) -> CapsuleDaemon:
    staged = await asyncio.to_thread(stage_capsule, chaos_capsule(tmp_path), host=host)
    store = await SqliteTaskStore.open(tmp_path / "state" / "tasks.sqlite3")
    policy = LifecyclePolicy(task_acceptance="queue", after_task="sleep", queue_depth=4, max_concurrent_tasks=1)
    daemon = CapsuleDaemon(staged, host, store, policy=policy)
    await daemon.start()
    return daemon


def _message(text: str) -> TaskMessage:
    return TaskMessage("msg_1", "user", [{"text": text}])


async def _settled(daemon: CapsuleDaemon, record: TaskRecord) -> TaskRecord:
    return await asyncio.wait_for(daemon.wait_settled(record), timeout=60)


async def _fill_disk(store: SqliteTaskStore, full: bool) -> None:
    """SQLite's own "database or disk is full": cap the file at the pages it has now (or lift it)."""
    def cap(db: sqlite3.Connection) -> None:
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        db.execute(f"PRAGMA max_page_count = {pages if full else 1_073_741_823}")
    await store._call(cap)


async def test_a_task_that_raises_fails_alone_and_the_next_one_runs(tmp_path: Path, host: ComponentHost) -> None:
    daemon = await _daemon(tmp_path, host)
    store = daemon.store
    assert isinstance(store, SqliteTaskStore)
    try:
        # The reply lands in the task's history; the disk is full, so saving it raises in the
        # worker, and even the failed record (history included) cannot be stored.
        asking = await daemon.submit(Submission(_message("mode:ask")))
        await _settled(daemon, asking)
        assert asking.state is TaskState.INPUT_REQUIRED
        await _fill_disk(store, full=True)
        await daemon.submit(Submission(_message("r" * 300_000)))
        await _settled(daemon, asking)
        assert asking.state is TaskState.FAILED
        assert asking.status_message.startswith("internal error: OperationalError: database or disk is full")
        # tasks/get must not report the stale input-required: a brief failed record was stored
        stored = await daemon.get(asking.id)
        assert stored is not asking
        assert (stored.state, stored.status_message, stored.context_id) == (
            TaskState.FAILED, asking.status_message, asking.context_id)
        assert stored.history == []
        await _fill_disk(store, full=False)
        following = await daemon.submit(Submission(_message("still here")))
        await _settled(daemon, following)
        assert following.state is TaskState.COMPLETED
        assert following.result_text == "answer: still here"
        assert (await daemon.store.get(following.id)).state is TaskState.COMPLETED
        assert daemon.crashed is None
    finally:
        await daemon.stop(grace_seconds=1)


async def test_a_canceled_task_whose_record_cannot_be_stored_is_stored_canceled_in_brief(
        tmp_path: Path, host: ComponentHost) -> None:
    """A long reply and a cancel arrive together while the disk is full: the canceled record
    (the reply in its history) is refused, and a brief canceled one is stored instead."""
    daemon = await _daemon(tmp_path, host)
    store = daemon.store
    assert isinstance(store, SqliteTaskStore)
    try:
        asking = await daemon.submit(Submission(_message("mode:ask")))
        await _settled(daemon, asking)
        await _fill_disk(store, full=True)
        await daemon.submit(Submission(_message("r" * 300_000)))
        answered = await daemon.cancel(asking.id)  # before the worker saves the reply
        assert answered.state is TaskState.CANCELED
        stored = await daemon.get(asking.id)
        assert (stored.state, stored.status_message, stored.history) == (TaskState.CANCELED, "canceled by request", [])
        await _fill_disk(store, full=False)
        following = await daemon.submit(Submission(_message("still here")))
        await _settled(daemon, following)
        assert following.state is TaskState.COMPLETED
    finally:
        await daemon.stop(grace_seconds=1)


async def test_a_reply_that_is_not_valid_unicode_is_stored_escaped(tmp_path: Path, host: ComponentHost) -> None:
    """A lone surrogate past the edge (the edge refuses it; the worker must hold anyway) is
    stored as its JSON escape, and the task settles instead of staying input-required."""
    daemon = await _daemon(tmp_path, host)
    try:
        asking = await daemon.submit(Submission(_message("mode:ask")))
        await _settled(daemon, asking)
        await daemon.submit(Submission(_message("bad \ud800 reply")))
        await _settled(daemon, asking)
        assert asking.state.terminal
        stored = await daemon.store.get(asking.id)
        assert stored.state is asking.state
        assert stored.history[1].text == "bad \ud800 reply"
    finally:
        await daemon.stop(grace_seconds=1)


async def test_a_model_reply_with_half_an_emoji_pair_completes_with_the_text_made_valid(
        tmp_path: Path, host: ComponentHost) -> None:
    daemon = await _daemon(tmp_path, host)
    try:
        answered = await daemon.submit(Submission(_message("mode:surrogate")))
        await _settled(daemon, answered)
        assert answered.state is TaskState.COMPLETED
        assert answered.result_text == "half \ufffd here"
        assert (await daemon.store.get(answered.id)).result_text == "half \ufffd here"
        called = await daemon.submit(Submission(_message("mode:surrogate-tool")))
        await _settled(daemon, called)
        assert called.state is TaskState.COMPLETED
        assert called.result_text.startswith("answer: ")  # echo returns its input, JSON
        assert json.loads(called.result_text.removeprefix("answer: "))["text"] == "tool \ufffd half"
    finally:
        await daemon.stop(grace_seconds=1)


async def test_a_cancel_before_the_run_takes_its_first_step_cancels_the_task(
        tmp_path: Path, host: ComponentHost) -> None:
    daemon = await _daemon(tmp_path, host)
    try:
        record = await daemon.submit(Submission(_message("hello")))
        await asyncio.sleep(0)  # the worker picks it up; its run has not started yet
        assert record.id in daemon._running
        answered = await daemon.cancel(record.id)
        assert answered.state is TaskState.CANCELED  # what tasks/cancel answers
        assert (record.state, record.status_message) == (TaskState.CANCELED, "canceled by request")
        assert (await daemon.store.get(record.id)).state is TaskState.CANCELED
        following = await daemon.submit(Submission(_message("next")))
        await _settled(daemon, following)
        assert following.state is TaskState.COMPLETED
    finally:
        await daemon.stop(grace_seconds=1)


async def test_a_cancel_while_the_task_is_saved_working_cancels_it(tmp_path: Path, host: ComponentHost) -> None:
    """Another SQLite writer holds the lock, so saving WORKING waits: the cancel lands there."""
    daemon = await _daemon(tmp_path, host)
    other = sqlite3.connect(tmp_path / "state" / "tasks.sqlite3", isolation_level=None)
    try:
        record = await daemon.submit(Submission(_message("hello")))
        other.execute("BEGIN IMMEDIATE")  # before the worker gets to run: its WORKING save waits
        await asyncio.sleep(0.1)
        assert record.id in daemon._running and record.state is TaskState.WORKING
        asyncio.get_running_loop().call_later(0.3, other.rollback)
        answered = await daemon.cancel(record.id)
        assert answered.state is TaskState.CANCELED
        assert (await daemon.store.get(record.id)).state is TaskState.CANCELED
        assert daemon.session.services.loop.ask_for_input is None
        following = await daemon.submit(Submission(_message("next")))
        await _settled(daemon, following)
        assert following.state is TaskState.COMPLETED
    finally:
        other.close()
        await daemon.stop(grace_seconds=1)


async def test_a_dead_worker_stops_the_daemon_and_is_reported(tmp_path: Path, host: ComponentHost) -> None:
    daemon = await _daemon(tmp_path, host)
    try:
        daemon._queue.append(None)  # a bug in the worker itself, not in a task
        daemon._wakeup.set()
        await asyncio.wait_for(daemon.stopped.wait(), timeout=10)
        assert isinstance(daemon.crashed, AttributeError)
        assert not daemon.accepting
        daemon._queue.clear()  # the planted bug, so the shutdown below can store what is real
    finally:
        await daemon.stop(grace_seconds=1)


async def test_a_stop_whose_cancel_writes_are_refused_still_ends_every_queued_task(
        tmp_path: Path, host: ComponentHost) -> None:
    """The store refuses every canceled state (a trigger: the write raises at once): the stop
    still goes through the whole queue, and each queued task's blocked caller is answered. The
    first refusal used to cut the stop short, and the queued tasks after it waited for ever."""
    daemon = await _daemon(tmp_path, host)
    running = await daemon.submit(Submission(_message("mode:hang")))
    queued = [await daemon.submit(Submission(TaskMessage(f"msg_q{k}", "user", [{"text": f"queued {k}"}],
                                                         context_id=f"ctx_queued_{k}"))) for k in range(2)]
    assert [record.state for record in queued] == [TaskState.SUBMITTED] * 2
    blocked = [asyncio.create_task(_settled(daemon, record)) for record in queued]
    refusing = sqlite3.connect(tmp_path / "state" / "tasks.sqlite3")
    refusing.execute("CREATE TRIGGER refuse_canceled BEFORE UPDATE ON tasks WHEN NEW.state = 'canceled' "
                     "BEGIN SELECT RAISE(ABORT, 'canceled states refused'); END")
    refusing.commit()
    refusing.close()
    await asyncio.wait_for(daemon.stop(grace_seconds=0.5), 60)
    answered = await asyncio.wait_for(asyncio.gather(*blocked), 60)
    assert [record.state for record in answered] == [TaskState.CANCELED] * 2
    assert running.state.terminal


async def test_a_run_cancelled_while_its_end_is_stored_still_publishes_that_end(
        tmp_path: Path, host: ComponentHost) -> None:
    """The daemon stops (its grace over) while a task's terminal state waits in the store's
    queue: the write goes on whatever cancels the run, and so does the rest of the end. Its
    blocked caller is woken with it, its stream gets the final status, its record is let go."""
    import threading

    daemon = await _daemon(tmp_path, host)
    store = daemon.store
    assert isinstance(store, SqliteTaskStore)
    gate, queued = threading.Event(), asyncio.Event()
    blocker: list[asyncio.Future[object]] = []
    real_put = store.put

    async def put(record: TaskRecord) -> bool:
        if record.state.terminal and not queued.is_set():  # the store's thread held ahead of this write
            blocker.append(asyncio.ensure_future(store._call(lambda db: gate.wait(120))))
            queued.set()
        return await real_put(record)

    store.put = put  # type: ignore[method-assign]
    try:
        record = await daemon.submit(Submission(_message("hello")))
        events = daemon.log.subscribe(after_id=0, task_id=record.id)
        settled = asyncio.ensure_future(daemon.wait_settled(record))
        await asyncio.wait_for(queued.wait(), 60)
        stopping = asyncio.ensure_future(daemon.stop(grace_seconds=0))
        run = daemon._running[record.id]
        while run.cancel_sent_at is None:  # the stop's cancel has reached the run
            await asyncio.sleep(0.01)
        gate.set()
        await asyncio.wait_for(stopping, 60)
        assert (await asyncio.wait_for(settled, 60)).state is TaskState.COMPLETED
        finals = []
        async with asyncio.timeout(60):
            async for event in events:
                if event.final:
                    finals.append(event.data["status"]["state"])
        assert finals == [TaskState.COMPLETED.value]
        assert record.id not in daemon._records
        assert blocker[0].done()
    finally:
        gate.set()
        if not daemon.stopped.is_set() or not daemon._drained:
            await daemon.stop(grace_seconds=1)
    reopened = await SqliteTaskStore.open(tmp_path / "state" / "tasks.sqlite3")
    try:
        assert (await reopened.get(record.id)).state is TaskState.COMPLETED
    finally:
        await reopened.close()
