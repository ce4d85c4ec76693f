"""One task: what it asks (`TaskSpec`), how it ended (`TaskOutcome`), and the blocking work that
brackets it in its session's workdir and trace.

A task begins with `task_start` written through to the trace (a trace that cannot be written
ends the session before any turn) and `task.md` replaced whole; it ends with `out/result.txt`
replaced whole and `task_end` written through (once a task has ended, its every trace line is in
the file). Each bracket is one piece of blocking work, for one hand-off to a worker thread; the
first task of a new context session begins in the hand-off that opens the session (issue 29).
Neither piece raises: what failed comes back for the session to act on.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from murmurd import workdir_fs
from murmurd.session.counters import Counters
from murmurd.session.failures import SessionEnded, TaskFailed
from murmurd.session.file_process import EndedFiles, FileProcess
from murmurd.session.messages import Message
from murmurd.trace.writer import TraceWriteError, TraceWriter
from murmurd.workdir import RESULT, TASK, Workdir

log = logging.getLogger("murmurd.session")


@dataclass
class TaskSpec:
    task_id: str
    text: str
    context_id: str | None = None
    source: str = "task_md"  # a2a | task_md
    origin: str = "operator"
    trust: str = "operator"
    history: list[Message] = field(default_factory=list)
    traceparent: str | None = None  # the caller's W3C traceparent, if any

    @property
    def announced(self) -> bool:
        """The idle run (upstream: no message within the window) writes no task_start/task_end."""
        return self.source != "idle"

    @property
    def message_parts_bytes(self) -> int:
        return len(self.text.encode())

    def start_fields(self) -> dict[str, Any]:
        """`task_start`'s fields."""
        return dict(task_id=self.task_id, context_id=self.context_id, source=self.source,
                    message_parts_bytes=self.message_parts_bytes, origin=self.origin, trust=self.trust)


@dataclass
class TaskOutcome:
    task_id: str
    context_id: str | None
    exit_status: str  # ok | failed | max_turns_reached | spend_ceiling_reached | reopen_budget_exhausted
    result_text: str
    error: str | None = None
    counters: Counters = field(default_factory=Counters)
    reopen_count: int = 0
    duration_ms: int = 0
    messages: list[Message] = field(default_factory=list)
    # This task's seed-context messages: context for this task only, never stored as history.
    seeded_ids: frozenset[str] = frozenset()

    @property
    def ok(self) -> bool:
        return self.exit_status == "ok"

    @property
    def delivered(self) -> bool:
        """The task ends with a result: it succeeded, or a hook still asked to reopen it once the
        reopen budget was spent (its last result stands)."""
        return self.exit_status in ("ok", "reopen_budget_exhausted")


@dataclass(frozen=True)
class TaskBegun:
    """How a task's beginning went: whether its `task_start` is in the trace (then a `task_end`
    must close it), and what failed, if anything (the task fails with it before any turn)."""

    task_id: str
    started_line: bool
    failure: TaskFailed | None = None


def begin_task(trace: TraceWriter, root: Path, spec: TaskSpec) -> TaskBegun:
    """`task_start` (for an announced task) written through, then `task.md` (blocking)."""
    started = False
    if spec.announced:
        try:
            trace.write_through("task_start", **spec.start_fields())
        except TraceWriteError as exc:
            return TaskBegun(spec.task_id, False, SessionEnded(str(exc)))
        started = True
    return TaskBegun(spec.task_id, started, write_task_md(root, spec.text))


def write_task_md(root: Path, text: str) -> TaskFailed | None:
    """`task.md`, replaced whole (a planted symlink is never followed); what failed, named."""
    try:
        workdir_fs.write_text(root, TASK, text)
    except OSError as exc:
        return TaskFailed(f"cannot write {TASK}: {exc}")
    return None


def end_task(trace: TraceWriter, workdir: Workdir, outcome: TaskOutcome, started_line: bool) -> bool:
    """`out/result.txt`, then (for an announced task) `task_end` written through (blocking).
    A result that cannot be written (a symlink on `out/`) fails the task, naming the path. False
    when the trace could not be written: the session ends."""
    try:
        workdir_fs.write_text(workdir.root, workdir.book(RESULT), result_text(outcome))
    except OSError as exc:
        result_refused(outcome, str(exc))
    return end_line(trace, outcome, started_line)


def end_line(trace: TraceWriter, outcome: TaskOutcome, started_line: bool) -> bool:
    """`task_end` written through (blocking; none for a task whose start was not written)."""
    if not started_line:
        return True
    try:
        trace.write_through("task_end", **end_fields(outcome))
    except TraceWriteError as exc:
        trace_refused(outcome, str(exc))
        return False
    return True


async def end_task_in(files: FileProcess, trace: TraceWriter, workdir: Workdir, outcome: TaskOutcome,
                      started_line: bool) -> bool | None:
    """`end_task`'s work done by the file process: the trace's queued lines and `task_end` handed
    over with the result (no thread of this process wakes). None when it is not taken (the
    caller runs `end_task` on a thread). The trace is settled when the process answers, however
    the caller fares meanwhile; a result the process could not write fails the task, and its
    `task_end`, which must say so, is then queued as any line is (and written by the drain even
    if the caller is cancelled while it waits for it)."""
    handover = trace.hand_over()
    if handover is None:
        return None
    try:
        end = [trace.event("task_end", **end_fields(outcome))] if started_line else []
        ended = files.end_task(workdir.root, workdir.book(RESULT), result_text(outcome), handover.text(end),
                               handover.fd)
    except BaseException:
        handover.give_back()  # never leave the trace claimed
        raise
    if ended is None:
        handover.give_back()
        return None

    def answered(done: asyncio.Future[EndedFiles]) -> None:
        try:
            if done.exception() is not None:
                handover.settle(end, f"the file process did not write it: {done.exception()}")
                return
            answer = done.result()
            if answer.result_error is None:
                handover.settle(end, answer.trace_error)
                return
            result_refused(outcome, answer.result_error)  # its `task_end` says so, ahead of any close
            handover.give_back([trace.event("task_end", **end_fields(outcome))] if started_line else [])
        except Exception as exc:  # noqa: BLE001 - a callback's error would reach no one: the trace fails
            log.exception("the end of task %s could not be settled", outcome.task_id)
            trace.failed_elsewhere("task_end", f"its end could not be settled ({exc})")

    ended.add_done_callback(answered)
    try:
        answer = await asyncio.shield(ended)
    except OSError:
        answer = EndedFiles(trace_error="")
    if answer.result_error is not None:
        try:
            await trace.flush()
        except TraceWriteError as exc:
            trace_refused(outcome, str(exc))
            return False
        return True
    if answer.trace_error is not None:
        trace_refused(outcome, trace.failure or answer.trace_error)
        return False
    return True


def result_text(outcome: TaskOutcome) -> str:
    return outcome.result_text if outcome.delivered else f"error: {outcome.error}"


def result_refused(outcome: TaskOutcome, why: str) -> None:
    """`out/result.txt` could not be written: the task fails, naming it."""
    problem = f"cannot write {RESULT}: {why}"
    outcome.error = problem if outcome.delivered else f"{outcome.error} (and {problem})"
    outcome.exit_status = "failed"


def trace_refused(outcome: TaskOutcome, why: str) -> None:
    if outcome.ok:
        outcome.exit_status, outcome.error = "failed", why


def end_fields(outcome: TaskOutcome) -> dict[str, Any]:
    """`task_end`'s fields."""
    counters = outcome.counters
    return dict(task_id=outcome.task_id, exit_status=outcome.exit_status, duration_ms=outcome.duration_ms,
                turns=counters.turns, input_tokens=counters.input_tokens, output_tokens=counters.output_tokens,
                tool_calls=counters.tool_calls, shell_calls=counters.shell_calls, reopen_count=outcome.reopen_count,
                error=outcome.error)


def abandoned_end(begun: TaskBegun) -> dict[str, Any]:
    """`task_end`'s fields for a task that began in a session's opening and never ran there (it
    was cancelled, or failed, before its first turn)."""
    return dict(task_id=begun.task_id, exit_status="failed", duration_ms=0, turns=0, input_tokens=0,
                output_tokens=0, tool_calls=0, shell_calls=0, reopen_count=0,
                error="the task ended before it ran in this session")
