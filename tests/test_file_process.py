"""A served daemon's session file work in the file process (issue 29): a new context's workdir,
index record, `task_start` and `task.md`, and every task's `out/result.txt` and `task_end`, are
written by a process of their own, with what the thread did before as the fallback.

Real parts: the chaos capsule's driver in wasmtime, a real `FileProcess` child, context sessions
in their own workdirs, a real SQLite store; the child is stopped and killed with real signals.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from a2akit import chaos_capsule
from murmurd.a2a.core.daemon import CapsuleDaemon
from murmurd.a2a.core.intake import Submission
from murmurd.a2a.core.lifecycle import LifecyclePolicy
from murmurd.a2a.core.tasks import TaskMessage, TaskRecord, TaskState
from murmurd.a2a.stores.sqlite import SqliteTaskStore
from murmurd.host import ComponentHost
from murmurd.session import file_process
from murmurd.session.file_process import FileProcess
from murmurd.staging.stage import stage_capsule
from murmurd.staging.template import template_for
from murmurd.workdir import RESULT, TASK

pytestmark = pytest.mark.anyio

WAIT = 120.0  # seconds any one awaited event may take on a loaded machine


@pytest.fixture(autouse=True)
def _built(artifacts) -> None:  # type: ignore[no-untyped-def]
    for name in ("chaos-driver", "ask"):
        artifacts.fixture(name)
    artifacts.example("echo")


async def _daemon(tmp_path: Path, host: ComponentHost, *, index: bool) -> CapsuleDaemon:
    """A daemon with context sessions and a file process (with `index`, a context index whose
    sweep removes a closed session's workdir once its context has no task)."""
    staged = await asyncio.to_thread(stage_capsule, chaos_capsule(tmp_path), host=host)
    store = await SqliteTaskStore.open(tmp_path / "state" / "tasks.sqlite3")
    files = FileProcess(functools.partial(template_for, staged))
    daemon = CapsuleDaemon(staged, host, store, policy=LifecyclePolicy(
        task_acceptance="queue", after_task="sleep", max_concurrent_tasks=4),
        session_index=tmp_path / "state" / "context-sessions" if index else None, files=files)
    await daemon.start()
    assert files.running and files.starts == 1
    return daemon


@pytest.fixture
async def served(tmp_path: Path, host: ComponentHost) -> AsyncIterator[CapsuleDaemon]:
    daemon = await _daemon(tmp_path, host, index=True)
    try:
        yield daemon
    finally:
        await daemon.stop(1.0)
        await daemon.store.close()


def _no_thread_path(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("the session's file work went to a thread")

    monkeypatch.setattr("murmurd.a2a.core.daemon.open_session_staging", refused)
    monkeypatch.setattr("murmurd.session.session.end_task", refused)


def _message(text: str, *, task_id: str | None = None, context_id: str | None = None) -> TaskMessage:
    return TaskMessage(f"msg_{abs(hash(text)):x}", "user", [{"text": text}], context_id=context_id, task_id=task_id)


async def _settled(daemon: CapsuleDaemon, record: TaskRecord) -> TaskRecord:
    return await asyncio.wait_for(daemon.wait_settled(record), WAIT)


async def _asking(daemon: CapsuleDaemon) -> TaskRecord:
    """A task waiting for input (the chaos driver's `request-input`)."""
    asking = await daemon.submit(Submission(_message("mode:ask")))
    assert (await _settled(daemon, asking)).state is TaskState.INPUT_REQUIRED
    return asking


async def _reply(daemon: CapsuleDaemon, asking: TaskRecord) -> None:
    await daemon.submit(Submission(_message("the reply", task_id=asking.id, context_id=asking.context_id),
                                   task_id=asking.id, context_id=asking.context_id))


@contextlib.asynccontextmanager
async def _stopped(process: Any) -> AsyncIterator[None]:
    """`process` stopped (SIGSTOP) for the block, and let go on after it if it still lives."""
    os.kill(process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGCONT)


def _workdir(daemon: CapsuleDaemon, context_id: str, tmp_path: Path) -> Path:
    index = tmp_path / "state" / "context-sessions"
    (entry,) = [e for e in index.iterdir() if e.read_text() == context_id]
    return daemon.staged.workdir.root.parent / entry.name


def _events(root: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (root / "trace.jsonl").read_text().splitlines()]


async def test_a_new_context_task_is_begun_and_ended_by_the_file_process(
        served: CapsuleDaemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _no_thread_path(monkeypatch)
    record = await served.submit(Submission(_message("hello")))
    assert (await _settled(served, record)).state is TaskState.COMPLETED
    assert record.result_text == "answer: hello"
    root = _workdir(served, record.context_id, tmp_path)
    assert (root / TASK).read_text() == "hello"
    assert (root / RESULT).read_text() == "answer: hello"
    events = _events(root)
    kinds = [e["event_type"] for e in events]
    assert kinds[0] == "task_start" and kinds[-1] == "task_end" and kinds.count("task_start") == 1
    assert "inference" in kinds  # the lines queued during the turn went in before task_end
    start, end = events[0], events[-1]
    assert (start["task_id"], start["context_id"], start["source"], start["message_parts_bytes"]) == (
        record.id, record.context_id, "a2a", 5)
    assert start["session_id"] == root.name and isinstance(start["timestamp"], int)
    assert (end["task_id"], end["exit_status"], end["turns"]) == (record.id, "ok", 1)
    # the daemon's own trace names the session the task ran in
    daemon_lines = [json.loads(line) for line in served.session.trace.path.read_text().splitlines()]
    assert any(e["event_type"] == "a2a_task_session" and e["task_id"] == record.id and e["task_session_id"] == root.name
               for e in daemon_lines)
    # the next task of the same context ends through the process too, in the same session
    again = await served.submit(Submission(_message("again", context_id=record.context_id),
                                           context_id=record.context_id))
    assert (await _settled(served, again)).state is TaskState.COMPLETED
    assert (root / RESULT).read_text() == "answer: again"
    assert [e["event_type"] for e in _events(root)].count("task_end") == 2


async def test_a_result_the_process_cannot_write_fails_the_task_and_its_end_says_so(
        served: CapsuleDaemon, tmp_path: Path) -> None:
    """`out` is a symlink planted while the task waits for input: the result is refused (never
    written through it), the task fails naming it, and its `task_end` says so."""
    asking = await _asking(served)
    root = _workdir(served, asking.context_id, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if (root / "out").exists():
        (root / "out").rmdir()
    (root / "out").symlink_to(elsewhere)
    await _reply(served, asking)
    assert (await _settled(served, asking)).state is TaskState.FAILED
    assert f"cannot write {RESULT}" in (asking.status_message or "")
    assert list(elsewhere.iterdir()) == []
    end = _events(root)[-1]
    assert end["event_type"] == "task_end" and end["exit_status"] == "failed" and f"cannot write {RESULT}" in end["error"]


async def test_a_task_too_large_for_one_request_goes_to_a_thread(served: CapsuleDaemon, tmp_path: Path) -> None:
    text = "x" * (file_process.MAX_REQUEST + 1)
    record = await served.submit(Submission(_message(text)))
    assert (await _settled(served, record)).state is TaskState.COMPLETED
    root = _workdir(served, record.context_id, tmp_path)
    assert (root / TASK).read_text() == text
    assert [e["event_type"] for e in _events(root)].count("task_start") == 1


async def test_a_killed_file_process_is_started_again_and_threads_do_its_work_meanwhile(
        served: CapsuleDaemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = served.files
    assert files is not None and files._process is not None
    monkeypatch.setattr(file_process, "RESTART_GAP_SECONDS", 0.0)
    files._gap = 0.0
    files._process.kill()
    async with asyncio.timeout(WAIT):
        while files.running:  # its socket's end reaches the loop
            await asyncio.sleep(0.01)
    record = await served.submit(Submission(_message("meanwhile")))  # a thread's work; the restart begins
    assert (await _settled(served, record)).state is TaskState.COMPLETED
    async with asyncio.timeout(WAIT):
        while not files.running:
            await asyncio.sleep(0.01)
    assert files.starts == 2
    _no_thread_path(monkeypatch)
    after = await served.submit(Submission(_message("after")))
    assert (await _settled(served, after)).state is TaskState.COMPLETED
    assert (_workdir(served, after.context_id, tmp_path) / RESULT).read_text() == "answer: after"


async def test_an_opening_cancelled_while_the_process_works_is_closed_once_made(
        tmp_path: Path, host: ComponentHost) -> None:
    """The process is stopped (SIGSTOP) with the opening's request in it; the opening is
    cancelled, waits its bound, and goes on; once the process answers, the session it made is
    closed with its begun task ended in its trace, never left open."""
    served = await _daemon(tmp_path, host, index=False)  # no sweep: the closed workdir stays to be read
    try:
        session = await _cancelled_opening(served)
        async with asyncio.timeout(WAIT):
            while not session.closed:
                await asyncio.sleep(0.01)
        events = _events(session.staged.workdir.root)
        assert [(e["event_type"], e.get("exit_status")) for e in events] == [("task_start", None), ("task_end", "failed")]
    finally:
        await served.stop(1.0)
        await served.store.close()


async def _cancelled_opening(served: CapsuleDaemon) -> Any:
    """An opening cancelled while the stopped process holds its request; the session made once
    the process goes on."""
    from murmurd.session.task import TaskSpec

    files = served.files
    assert files is not None and files._process is not None
    made: list[asyncio.Future[Any]] = []
    real_close = served._close_unclaimed

    def close_unclaimed(building: asyncio.Future[Any]) -> None:
        made.append(building)
        real_close(building)

    served._close_unclaimed = close_unclaimed  # type: ignore[method-assign]
    async with _stopped(files._process):
        opening = asyncio.ensure_future(served._open_context_slot(
            "ctx_a", TaskSpec("tsk_" + "7" * 32, "held", context_id="ctx_a", source="a2a")))
        await asyncio.sleep(0)
        opening.cancel()
        with pytest.raises(asyncio.CancelledError):  # after OPENING_WAIT_SECS: a stopped process never holds the cancel
            await asyncio.wait_for(opening, WAIT)
    async with asyncio.timeout(WAIT):
        while not (made and made[0].done()):
            await asyncio.sleep(0.01)
    return made[0].result().session


async def test_a_file_process_that_never_gets_ready_leaves_the_work_to_threads(
        tmp_path: Path, host: ComponentHost, monkeypatch: pytest.MonkeyPatch) -> None:
    """The process ends before it says it is ready (here: no Python at all): no request is ever
    sent to it, and tasks complete with their file work on a thread (review)."""
    monkeypatch.setattr(file_process.sys, "executable", "/bin/false")
    staged = await asyncio.to_thread(stage_capsule, chaos_capsule(tmp_path), host=host)
    store = await SqliteTaskStore.open(tmp_path / "state" / "tasks.sqlite3")
    files = FileProcess(functools.partial(template_for, staged))
    daemon = CapsuleDaemon(staged, host, store, policy=LifecyclePolicy(
        task_acceptance="queue", after_task="sleep", max_concurrent_tasks=4), files=files)
    await daemon.start()
    try:
        assert not files.running and files.starts == 0
        record = await daemon.submit(Submission(_message("hello")))
        assert (await _settled(daemon, record)).state is TaskState.COMPLETED
        assert record.result_text == "answer: hello"
    finally:
        await daemon.stop(1.0)
        await store.close()


async def test_a_stop_is_not_held_by_a_file_process_that_stopped_answering(
        served: CapsuleDaemon, monkeypatch: pytest.MonkeyPatch) -> None:
    """The process is stopped (SIGSTOP) with a task's end in it: the daemon's stop gives it its
    bound, fails what it holds (the task ends, its trace failed) and finishes (review)."""
    files = served.files
    assert files is not None and files._process is not None
    monkeypatch.setattr(file_process, "STOP_SECONDS", 0.5)
    asking = await _asking(served)
    process = files._process
    async with _stopped(process):
        await _reply(served, asking)
        async with asyncio.timeout(WAIT):
            while not files._waiting:  # the task's end is in the stopped process
                await asyncio.sleep(0.01)
        await asyncio.wait_for(served.stop(0.5), WAIT)
    assert process.poll() is not None  # reaped: killed once its bound was over
    assert asking.state.terminal


async def test_an_unanswered_opening_kills_the_process_and_opens_on_a_thread(
        served: CapsuleDaemon, monkeypatch: pytest.MonkeyPatch) -> None:
    """The process stops answering (SIGSTOP): past `REQUEST_SECONDS` it is killed, and the opening
    it held is made again on a thread, so the task completes (re-review)."""
    files = served.files
    assert files is not None and files._process is not None
    monkeypatch.setattr(file_process, "REQUEST_SECONDS", 0.5)
    process = files._process
    async with _stopped(process):
        record = await served.submit(Submission(_message("held")))
        assert (await _settled(served, record)).state is TaskState.COMPLETED
        assert record.result_text == "answer: held"
    await asyncio.wait_for(asyncio.to_thread(process.wait), WAIT)  # killed, not left stopped
    assert process.returncode == -signal.SIGKILL


async def test_a_capsule_whose_session_reads_files_as_it_is_made_opens_on_a_thread(
        tmp_path: Path, host: ComponentHost, artifacts, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """The loop makes the session when the process opens it: a capsule whose session reads a
    file then (here, a hook that hears the session start) keeps its opening on a thread."""
    from hookkit import end_turn, hook_ref, hooked_capsule
    from loopkit import stage
    from murmurd.a2a.core.daemon import _session_is_made_without_files

    plain = await asyncio.to_thread(stage_capsule, chaos_capsule(tmp_path / "plain"), host=host)
    assert _session_is_made_without_files(plain)
    arm = artifacts.fixture("arm-hook")
    monkeypatch.setenv("ARM_HOOK", json.dumps({"on-session-start": {"do": "infer"}}))
    hook = hook_ref(tmp_path, "reader", arm, config_var="ARM_HOOK")
    hooked = stage(hooked_capsule(tmp_path, [hook], [end_turn("the answer")]), host, tmp_path)
    assert not _session_is_made_without_files(hooked)


async def test_an_end_the_process_never_answers_fails_the_trace_and_the_task(
        served: CapsuleDaemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The process stops answering while it holds a task's end: past `REQUEST_SECONDS` it is
    killed, what it held is not known to be written, so the trace fails (E-RUN-007) and the task
    with it; the next task's end goes to a thread, then to the process started again."""
    files = served.files
    assert files is not None and files._process is not None
    monkeypatch.setattr(file_process, "REQUEST_SECONDS", 0.5)
    monkeypatch.setattr(file_process, "RESTART_GAP_SECONDS", 0.0)
    files._gap = 0.0
    asking = await _asking(served)
    async with _stopped(files._process):
        await _reply(served, asking)
        assert (await _settled(served, asking)).state is TaskState.FAILED
    assert "E-RUN-007: cannot write" in (asking.status_message or "")
    assert "the file process did not write it" in (asking.status_message or "")
    following = await served.submit(Submission(_message("still here")))
    assert (await _settled(served, following)).state is TaskState.COMPLETED
