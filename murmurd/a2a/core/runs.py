"""The daemon's task runs: the scheduler that starts what the bound and the contexts allow, each
run in its context's session, its `request-input`, its cancel, and how it ends.

`Runner` is one side of `CapsuleDaemon` (murmurd.a2a.core.daemon), with no state of its own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from murmurd.a2a.core.admission import runnable
from murmurd.a2a.core.pool import Slot
from murmurd.a2a.core.records import HistoryUnreadable, leave_input_required, stored_history
from murmurd.a2a.core.task_events import StreamEvents
from murmurd.a2a.core.tasks import TaskArtifact, TaskMessage, TaskRecord, TaskState, result_artifact_id
from murmurd.a2a.stores.base import StoreUnreachable
from murmurd.host import AbortTask
from murmurd.session.session import TaskSpec

logger = logging.getLogger("murmurd.a2a")

INPUT_TIMEOUT = "input-timeout"
CANCEL_WAIT_SECS = 5.0  # how long `tasks/cancel` waits for the running task to end


@dataclass
class Run:
    """One started task: its asyncio task, why it would be canceled, its open request-input."""

    record: TaskRecord
    task: asyncio.Task[None] | None = None
    reason: str = "canceled by request"
    reply: asyncio.Future[str] | None = None  # set while the task waits for input
    # The task did not run here after all: the coordination holds it (put off, to start again;
    # given up; the store gives it to another daemon). No end is recorded here, no run ended.
    handed_over: bool = False
    cancel_sent_at: float | None = None  # loop time of the cancel: a second one soon after would cut its ending short

    @property
    def waiting(self) -> bool:
        return self.reply is not None and not self.reply.done()


class Runner:
    async def _work(self) -> None:
        """Start what can start whenever a task ends; stop when the lifecycle says so."""
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._unfinished:
                record, run = self._unfinished.pop(0)
                self._ending.add(record.id)  # held (settling leaves it alone) until its end is recorded
                # cancelled before `_run_guarded` took its first step, so nothing in it ran
                await asyncio.shield(self._end_unfinished_marked(record, run))
            self._schedule()
            ended = self._ended_runs and (self.policy.after_task == "exit" or self.session.ended is not None)
            if ended or self._launch_ended:
                self.stop_reason = self.stop_reason or (
                    "the launch task ended" if self._launch_ended and not ended
                    else "the session ended" if self.policy.after_task != "exit"
                    else f"a task ended under after_task: exit ({self.policy.describe()})")
                self.accepting = False
                self.stopped.set()
                return

    def _schedule(self) -> None:
        """Start every waiting task the bound and its context allow now (synchronous, so what
        `submit` counts is always what runs)."""
        if not self.accepting:
            return
        busy = {run.record.context_id for run in self._running.values()} | {
            record.context_id for record in self.coordination.deferred()}
        for record in runnable(self._queue, busy, len(self._running), self.policy.bound):
            self._queue.remove(record)
            run = Run(record)
            self._running[record.id] = run
            run.task = asyncio.create_task(self._run_guarded(run), name=f"murmurd-task-{record.id}")
            run.task.add_done_callback(lambda _t, task_id=record.id: self._run_ended(task_id))

    def _run_ended(self, task_id: str) -> None:
        run = self._running.pop(task_id, None)
        if run is not None and not run.record.state.terminal and not run.handed_over:
            self._unfinished.append((run.record, run))
        if run is None or not run.handed_over:  # a task that did not run here is no ended run
            self._ended_runs += 1
            # upstream: the launch task ends the daemon unless it queues more
            self._launch_ended |= task_id in self._task_md and self.policy.task_acceptance != "queue"
        self._wakeup.set()
        self.coordination.wake()  # room here now: look for work

    async def _run_guarded(self, run: Run) -> None:
        """Run one task in its context's session; whatever it raises fails that task alone. A
        cancel arriving at any point (opening the session, saving the task WORKING) ends it
        CANCELED; that last save is shielded from a second cancel."""
        record = run.record
        self._settle_at_end(record.id, self.session.trace.mark())  # its arrival's lines
        try:
            await self._run_in_session(run)
        finally:
            self._trace_marks.pop(record.id, None)  # settled by its end, or it did not end here

    async def _run_in_session(self, run: Run) -> None:
        record = run.record
        spec = TaskSpec(
            record.id, record.history[0].text, context_id=record.context_id,
            source="task_md" if record.id in self._task_md else "a2a",
            origin=record.origin, trust=record.trust, traceparent=self._traceparents.pop(record.id, None),
        )
        # A task begins in the step that opens its context's session when the save that starts
        # it cannot hand it elsewhere (`TaskStore.keeps_its_tasks`): then it runs in that session.
        first = spec if self.store.keeps_its_tasks else None
        try:
            slot = await self.pool.acquire(record.context_id, first=first)
        except asyncio.CancelledError:
            if not run.handed_over:  # handed over: the coordination settles it
                await asyncio.shield(self._finish_quietly(record, TaskState.CANCELED, run.reason))
            return
        except Exception as exc:
            logger.exception("task %s: no session could be opened", record.id)
            await asyncio.shield(self._fail_unexpectedly(record, f"cannot open a session: {exc}"))
            return
        try:
            if self.pool.shared is None and slot.announced != record.id:  # else its opening wrote it
                self._settle_at_end(record.id, self._write_task_session(
                    record.id, record.context_id, slot.session.staged.session_id))
            await self._run(run, slot, spec)
        except asyncio.CancelledError:
            if not record.state.terminal and not run.handed_over:  # handed over: the coordination settles it
                await asyncio.shield(self._ended_unrun(slot, record, self._finish_quietly(
                    record, TaskState.CANCELED, run.reason)))
        except Exception as exc:
            logger.exception("task %s raised inside its session worker", record.id)
            await asyncio.shield(self._ended_unrun(slot, record, self._fail_unexpectedly(
                record, f"internal error: {type(exc).__name__}: {exc}")))
        finally:
            self.pool.release(record.context_id, slot)
            if self.pool.shared is None and slot.session.ended is not None:
                await self.pool.discard(record.context_id, slot)

    def _write_task_session(self, task_id: str, context_id: str, session_id: str) -> int:
        """The daemon's record of which session runs a task (`GET /tasks/{id}/trace` reads it);
        any thread (a session's opening writes it on its own). Its mark, for `_settle_at_end`."""
        self.session.trace.write("a2a_task_session", task_id=task_id, context_id=context_id,
                                 task_session_id=session_id)
        return self.session.trace.mark()

    def _settle_at_end(self, task_id: str, mark: int | None) -> None:
        """On the loop: the daemon's trace lines up to `mark` are in the file before the task's
        end is stored (`Records._trace_settled`)."""
        if mark is not None:
            self._trace_marks[task_id] = mark

    @staticmethod
    async def _ended_unrun(slot: Slot, record: TaskRecord, ending: Coroutine[Any, Any, None]) -> None:
        """A task that may end before it ran in its session: a beginning its opening wrote is
        ended there first (`Session.end_unrun`), then `ending` stores the task's end (one
        awaitable, so one shield covers both)."""
        try:
            await slot.session.end_unrun(record.id)
        finally:
            await ending

    async def _end_unfinished_marked(self, record: TaskRecord, run: Run) -> None:
        """`_end_unfinished`; the task (put in `_ending` by the caller) is held until its end is recorded."""
        try:
            await self._end_unfinished(record, run)
        finally:
            self._ending.discard(record.id)

    async def _end_unfinished(self, record: TaskRecord, run: Run) -> None:
        """A run that ended leaving its task unfinished: CANCELED if it was cancelled, else FAILED."""
        if run.task is not None and run.task.cancelled():
            await self._finish_quietly(record, TaskState.CANCELED, run.reason)
        else:
            await self._fail_unexpectedly(record, "internal error: the task ended without an outcome")

    async def _run(self, run: Run, slot: Slot, spec: TaskSpec) -> None:
        """The task saved WORKING in its session, then run there. A task its opening began
        (`Session.begin_first_task`) is ended there first when it ends before it runs; a store
        whose save can hand it elsewhere never has one begun (`TaskStore.keeps_its_tasks`)."""
        record = run.record
        services = slot.session.services
        assert services.loop is not None
        slot.trust = record.trust
        record.state = TaskState.WORKING
        try:
            saved = await self._save(record, final=False)
        except StoreUnreachable as exc:
            if not await self.coordination.put_off(record, exc):
                raise
            record.state = TaskState.SUBMITTED  # it never started: it starts again later
            run.handed_over = True
            return
        if not saved:
            # The store gives the task to another daemon now (this one lost it while the task
            # waited here): it runs there, never here too.
            logger.warning("task %s: not started here, it runs elsewhere", record.id)
            run.handed_over = True
            await self.forget(record)
            return
        try:
            spec.history = await self._history(record.context_id)
        except HistoryUnreadable as exc:
            await slot.session.end_unrun(record.id)
            await self._finish(record, TaskState.FAILED, str(exc))
            return
        events = StreamEvents(self.log, asyncio.get_running_loop(), record.id)
        services.loop.ask_for_input = lambda prompt: self._ask(run, prompt)
        try:
            outcome = await slot.session.run_task(spec, events)
        finally:
            services.loop.ask_for_input = None  # no task owns the session: request-input has no one to ask
        self.task_log.turns(record.id, outcome.counters.turns)
        threaded = self.policy.conversation == "threaded"  # else there is nothing to record: no hand-off
        problem = await asyncio.to_thread(self._record_conversation, record, outcome) if threaded else None
        if problem is None and outcome.delivered and self.policy.conversation == "threaded":
            await self.store.save_history(record.context_id, stored_history(outcome))
        if problem is not None and outcome.delivered:
            outcome.exit_status, outcome.error = "failed", problem
        if outcome.delivered:
            record.result_text = outcome.result_text
            record.artifacts = [TaskArtifact("result", [{"text": outcome.result_text}],
                                             artifact_id=result_artifact_id(record.id))]
            record.history.append(TaskMessage(f"msg_{record.id}", "agent", [{"text": outcome.result_text}],
                                              record.context_id, record.id))
            await self._finish(record, TaskState.COMPLETED, outcome.result_text)
        else:
            await self._finish(record, TaskState.FAILED, outcome.error or outcome.exit_status)

    async def _ask(self, run: Run, prompt: str) -> str:
        """`request-input` for a running task: wait (only this task) for a reply routed to it."""
        record = run.record
        record.state = TaskState.INPUT_REQUIRED
        record.artifacts = [TaskArtifact("prompt", [{"text": prompt}])]
        record.status_message = prompt
        await self._save(record, final=False)
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        run.reply = future
        try:
            async with asyncio.timeout(self.policy.input_timeout_secs):  # not wait_for: it can swallow a cancel
                reply = await future
        except TimeoutError:
            if not future.done() or future.cancelled():
                raise AbortTask(INPUT_TIMEOUT) from None
            reply = future.result()  # delivered in the very step the deadline passed: the caller was told
        finally:
            run.reply = None
        leave_input_required(record)
        await self._save(record, final=False)
        return reply

    async def _cancel_run(self, run: Run, reason: str) -> None:
        """Cancel one started task and wait (briefly) until it has recorded its end."""
        task = run.task
        if task is None or task.done():
            return
        now = asyncio.get_running_loop().time()
        # Once: a second cancel would cut the run's own ending (result file, `task_end`) short.
        # Again only if the first has not taken within CANCEL_WAIT_SECS (something swallowed it).
        if run.cancel_sent_at is None or now - run.cancel_sent_at > CANCEL_WAIT_SECS:
            run.cancel_sent_at = now
            run.reason = reason
            if run.reply is not None and not run.reply.done():
                run.reply.cancel()
            task.cancel()
        await asyncio.wait({task}, timeout=CANCEL_WAIT_SECS)

