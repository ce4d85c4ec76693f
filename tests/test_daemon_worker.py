"""The session worker outlives any single task: an exception inside one fails that task alone.

These drive a real `CapsuleDaemon` (a staged capsule, wasmtime, real SQLite) without the HTTP
edge, because the edge refuses the inputs that used to reach the worker; the worker must hold
even when something unforeseen gets past it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from a2akit import chaos_capsule
from murmurd.a2a.daemon import CapsuleDaemon, LifecyclePolicy, Submission
from murmurd.a2a.store import SqliteTaskStore
from murmurd.a2a.tasks import TaskMessage, TaskRecord, TaskState
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


async def test_a_task_that_raises_fails_alone_and_the_next_one_runs(tmp_path: Path, host: ComponentHost) -> None:
    daemon = await _daemon(tmp_path, host)
    try:
        # The reply lands in the task's history; a lone surrogate cannot be stored, so the task
        # raises in the worker, and even its failed state cannot be stored.
        asking = await daemon.submit(Submission(_message("mode:ask")))
        await _settled(daemon, asking)
        assert asking.state is TaskState.INPUT_REQUIRED
        await daemon.submit(Submission(_message("bad \ud800 reply")))
        await _settled(daemon, asking)
        assert asking.state is TaskState.FAILED
        assert asking.status_message.startswith("internal error: UnicodeEncodeError")
        following = await daemon.submit(Submission(_message("still here")))
        await _settled(daemon, following)
        assert following.state is TaskState.COMPLETED
        assert following.result_text == "answer: still here"
        assert (await daemon.store.get(following.id)).state is TaskState.COMPLETED
        assert daemon.crashed is None
    finally:
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
