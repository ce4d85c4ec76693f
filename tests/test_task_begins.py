"""A new context's first task begins in the step that opens its session (issue 29): its
`task_start` is written through to the new trace and its `task.md` laid down by the thread that
made the workdir, before the session's opening returns. Each `task_start` still gets its
`task_end`: the begun task that runs, one that fails to begin, one that never runs (the session
closes, or another task runs first), and one whose opening was cancelled.

Real parts: the chaos capsule's driver component in wasmtime, context sessions in their own
workdirs, and a daemon with a real SQLite store.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from a2akit import chaos_capsule
from murmurd.a2a.core.daemon import CapsuleDaemon
from murmurd.a2a.core.lifecycle import LifecyclePolicy
from murmurd.a2a.stores.sqlite import SqliteTaskStore
from murmurd.host import ComponentHost
from murmurd.session.session import Session
from murmurd.session.task import TaskOutcome, TaskSpec
from murmurd.staging.sessions import open_session_staging
from murmurd.staging.stage import StagedCapsule, stage_capsule
from murmurd.workdir import TASK

pytestmark = pytest.mark.anyio


def _events(session: Session) -> list[dict[str, Any]]:
    return [json.loads(line) for line in session.staged.workdir.trace.read_text().splitlines()]


def _kinds(session: Session) -> list[str]:
    return [e["event_type"] for e in _events(session)]


def _spec(n: int, text: str = "hello") -> TaskSpec:
    return TaskSpec(f"tsk_{n:032x}", text, context_id="ctx_a", source="a2a")


@pytest.fixture
def staged(tmp_path: Path, host: ComponentHost) -> StagedCapsule:
    return stage_capsule(chaos_capsule(tmp_path), host=host)


async def _session(staged: StagedCapsule, host: ComponentHost, first: TaskSpec | None) -> Session:
    def build() -> Session:
        session = Session(open_session_staging(staged), host)
        if first is not None:
            session.begin_first_task(first)
        return session

    session = await asyncio.to_thread(build)
    await session.open()
    return session


async def _ran(session: Session, spec: TaskSpec) -> TaskOutcome:
    """`run_task(spec)`, then the session closed whatever happened."""
    try:
        return await session.run_task(spec)
    finally:
        await session.close()


async def test_a_first_task_begins_with_the_opening_and_runs_with_one_task_start(
        staged: StagedCapsule, host: ComponentHost) -> None:
    spec = _spec(1)
    session = await _session(staged, host, spec)
    try:
        # begun before anything ran: the line is in the file, task.md is there
        assert _kinds(session) == ["task_start"]
        start = _events(session)[0]
        assert (start["task_id"], start["context_id"], start["source"], start["message_parts_bytes"]) == (
            spec.task_id, "ctx_a", "a2a", 5)
        assert (session.staged.workdir.root / TASK).read_text() == "hello"
        outcome = await session.run_task(spec)
    finally:
        await session.close()
    assert (outcome.exit_status, outcome.result_text) == ("ok", "answer: hello")
    kinds = _kinds(session)
    assert kinds.count("task_start") == 1 and kinds[0] == "task_start" and kinds[-1] == "task_end"
    assert "session_start" in kinds and "inference" in kinds
    assert _events(session)[-1]["exit_status"] == "ok"


async def test_a_begun_task_that_never_runs_is_ended_by_the_close(staged: StagedCapsule, host: ComponentHost) -> None:
    spec = _spec(1)
    session = await _session(staged, host, spec)
    await session.close()
    events = _events(session)
    assert [e["event_type"] for e in events] == ["task_start", "task_end"]
    assert (events[1]["task_id"], events[1]["exit_status"], events[1]["turns"]) == (spec.task_id, "failed", 0)
    assert "before it ran" in events[1]["error"]


async def test_another_task_run_first_ends_the_begun_one_before_its_own_start(
        staged: StagedCapsule, host: ComponentHost) -> None:
    begun, other = _spec(1), _spec(2, "other")
    session = await _session(staged, host, begun)
    outcome = await _ran(session, other)
    assert outcome.exit_status == "ok"
    events = _events(session)
    ends = [(e["event_type"], e["task_id"]) for e in events if e["event_type"] in ("task_start", "task_end")]
    assert ends == [("task_start", begun.task_id), ("task_end", begun.task_id),
                    ("task_start", other.task_id), ("task_end", other.task_id)]
    assert (session.staged.workdir.root / TASK).read_text() == "other"


async def test_a_first_task_whose_task_md_cannot_be_written_fails_with_its_start_closed(
        staged: StagedCapsule, host: ComponentHost) -> None:
    """`task.md` is a directory (the workdir laid down, then changed before the task began):
    the task fails naming it, before any turn, and its `task_start` gets its `task_end`."""
    spec = _spec(1)

    def build() -> Session:
        session = Session(open_session_staging(staged), host)
        (session.staged.workdir.root / TASK).mkdir()
        (session.staged.workdir.root / TASK / "held").write_text("x")
        session.begin_first_task(spec)
        return session

    session = await asyncio.to_thread(build)
    await session.open()
    outcome = await _ran(session, spec)
    assert outcome.exit_status == "failed" and f"cannot write {TASK}" in (outcome.error or "")
    events = _events(session)
    assert [e["event_type"] for e in events] == ["task_start", "task_end"]
    assert events[1]["exit_status"] == "failed" and f"cannot write {TASK}" in events[1]["error"]


async def test_a_context_session_opened_for_a_cancelled_task_is_closed_once_made(
        tmp_path: Path, staged: StagedCapsule, host: ComponentHost, monkeypatch: pytest.MonkeyPatch) -> None:
    """The opening is cancelled while its thread is still making the session (held there): the
    cancel waits for it at most `OPENING_WAIT_SECS`, then goes on; the session the thread makes
    is closed once it is there (its begun task ended in its trace), never left open."""
    store = await SqliteTaskStore.open(tmp_path / "state" / "tasks.sqlite3")
    daemon = CapsuleDaemon(staged, host, store, policy=LifecyclePolicy(
        task_acceptance="queue", after_task="sleep", max_concurrent_tasks=4))
    await daemon.start()
    gate, entered = threading.Event(), threading.Event()
    made: list[Session] = []
    real = Session.begin_first_task

    def held(session: Session, spec: TaskSpec) -> None:
        made.append(session)
        entered.set()
        assert gate.wait(60)
        real(session, spec)

    monkeypatch.setattr(Session, "begin_first_task", held)  # holds the opening's thread there, then goes on
    try:
        opening = asyncio.ensure_future(daemon._open_context_slot("ctx_a", _spec(1)))
        assert await asyncio.to_thread(entered.wait, 60)
        opening.cancel()
        with pytest.raises(asyncio.CancelledError):  # after OPENING_WAIT_SECS: a held thread never holds the cancel
            await asyncio.wait_for(opening, 60)
        assert not made[0].closed
        gate.set()
        session = made[0]
        for _ in range(6000):  # the close runs on the loop once the thread is done
            if session.closed:
                break
            await asyncio.sleep(0.01)
        assert session.closed
        assert [(e["event_type"], e.get("exit_status")) for e in _events(session)] == [
            ("task_start", None), ("task_end", "failed")]
    finally:
        gate.set()
        await daemon.stop(1.0)
        await store.close()


async def test_a_hook_hearing_the_session_start_keeps_its_lines_outside_the_first_task(
        tmp_path: Path, host: ComponentHost, artifacts, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """A hook listening to `on-session-start` (here it runs an inference) is heard before any
    task's line: with it, the first task does not begin at the opening but in `run_task`, so
    the hook's `inference` line precedes `task_start` and is no task's (attack review)."""
    from hookkit import end_turn, hook_ref, hooked_capsule
    from loopkit import stage, trace_events
    from murmurd.a2a.http.task_trace import task_lines

    arm = artifacts.fixture("arm-hook")
    monkeypatch.setenv("ARM_HOOK", json.dumps({"on-session-start": {"do": "infer"}}))
    hook = hook_ref(tmp_path, "reader", arm, config_var="ARM_HOOK")
    hooked = stage(hooked_capsule(tmp_path, [hook], [end_turn("the answer")]), host, tmp_path)
    spec = TaskSpec("tsk_" + "5" * 32, "go", context_id="ctx_5", source="a2a")
    session = await asyncio.to_thread(lambda: Session(hooked, host))
    await asyncio.to_thread(session.begin_first_task, spec)  # as the daemon's opening does
    assert not (hooked.workdir.root / TASK).exists()  # it did not begin
    await session.open()
    outcome = await _ran(session, spec)
    assert outcome.exit_status == "ok"
    trace = trace_events(hooked)
    assert [e["event_type"] for e in trace][:2] == ["inference", "task_start"]
    mine = task_lines([json.dumps(e) for e in trace], spec.task_id)
    assert [e["event_type"] for e in mine][0] == "task_start"
    assert all(e.get("origin") != "hook:reader" for e in mine)



async def test_a_begun_task_ended_before_it_runs_is_closed_in_the_file_at_once(
        staged: StagedCapsule, host: ComponentHost) -> None:
    """The daemon ends a task before `run_task` (cancelled during its `working` save, its history
    refused): `end_unrun` writes the begun task's `task_end` and waits for it to be in the file,
    before the task's end is stored; the session runs its next task as any other (review)."""
    begun, other = _spec(1), _spec(2, "other")
    session = await _session(staged, host, begun)
    await session.end_unrun(other.task_id)  # not the begun task: nothing happens
    assert _kinds(session) == ["task_start"]
    await session.end_unrun(begun.task_id)
    assert [(e["event_type"], e["task_id"]) for e in _events(session)] == [
        ("task_start", begun.task_id), ("task_end", begun.task_id)]
    outcome = await _ran(session, other)
    assert outcome.exit_status == "ok"
    assert [e["task_id"] for e in _events(session) if e["event_type"] == "task_start"] == [begun.task_id, other.task_id]


class _FullDisk:
    """The daemon trace's file, refusing the line naming a task's session as a full disk does."""

    def __init__(self, file: Any) -> None:
        self._file = file

    def write(self, text: str) -> int:
        if "a2a_task_session" in text:
            raise OSError(28, "No space left on device")
        return self._file.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)


async def test_a_daemon_trace_that_cannot_take_the_session_line_fails_the_task(
        tmp_path: Path, staged: StagedCapsule, host: ComponentHost) -> None:
    """The line is written by the opening's thread and settled before the task's end is
    stored: its failure (E-RUN-007) fails the task, never a task that completes without it."""
    from murmurd.a2a.core.intake import Submission
    from murmurd.a2a.core.tasks import TaskMessage, TaskState

    store = await SqliteTaskStore.open(tmp_path / "state" / "tasks.sqlite3")
    daemon = CapsuleDaemon(staged, host, store, policy=LifecyclePolicy(
        task_acceptance="queue", after_task="sleep", max_concurrent_tasks=4))
    await daemon.start()
    daemon.session.trace._file = _FullDisk(daemon.session.trace._file)
    try:
        record = await daemon.submit(Submission(TaskMessage("msg_1", "user", [{"text": "hi"}])))
        for _ in range(6000):
            stored = await store.get(record.id)
            if stored is not None and stored.state.terminal:
                break
            await asyncio.sleep(0.01)
        assert stored is not None and stored.state is TaskState.FAILED
        assert "E-RUN-007: cannot write a2a_task_session" in (stored.status_message or "")
    finally:
        await daemon.stop(1.0)
        await store.close()
