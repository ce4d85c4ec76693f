"""The daemon's intake: a submission accepted and queued, refused, or delivered as a reply; and
the reads the edge makes (a task, a list, a count, a blocking send's outcome).

`Intake` is one side of `CapsuleDaemon` (murmurd.a2a.core.daemon), with no state of its own.
Where a new task runs is its coordination's to say (`Coordination.place`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from murmurd.a2a.core.admission import Ambiguous, Reply, Waiter, refusal, route_message, starts_at_once
from murmurd.a2a.core.intake import (
    AmbiguousReply,
    ContextRefused,
    NotAReply,
    ReplyRefused,
    Submission,
    TaskIdTaken,
    TaskNotFound,
    TooManyOpenContexts,
)
from murmurd.a2a.core.records import leave_input_required
from murmurd.a2a.core.runs import Run
from murmurd.a2a.core.tasks import TaskMessage, TaskRecord, TaskState, new_context_id, new_task_id
from murmurd.a2a.core.tenancy import CONTEXT_REFUSED, hidden_from

DIALECT_MEMORY = 10_000

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Pending:
    """A decided submission whose record is still to be written, by its caller after the
    submission lock: an accepted task on its way to its coordination (stored, then queued here or
    left for another daemon), or a rejection to record. `write` does that (raising what refused
    it); `written` is set when it is over, either way. `starts`: an accepted task judged to start
    at once (it counts as running until placed, else as waiting)."""

    record: TaskRecord
    write: Callable[[], Awaitable[None]]
    written: asyncio.Event
    starts: bool = False


class Intake:
    async def submit(self, submission: Submission) -> TaskRecord:
        """Accept, queue, reject, or deliver as a reply; return the task record.

        One decision at a time: routing a reply, judging the lifecycle (the bound, `single`,
        `queue_depth`) and reserving an accepted task's place happen under one lock, so
        concurrent sends cannot all pass the check before any of them counts, nor two of them
        claim one client-chosen id. The store write that records the task comes after the lock,
        beside other sends' writes (the SQLite store commits what is queued together); until it
        is placed the task counts as what it will be once queued (`_placing`, `_judge`)."""
        async with self._submitting:
            decided = await self._submit_locked(submission)
        if isinstance(decided, TaskRecord):
            return decided
        await decided.write()  # returns in the step that queued the task: it has not run yet
        return decided.record

    async def _submit_locked(self, submission: Submission) -> TaskRecord | Pending:
        if submission.requested_id is not None and await self._known(submission.requested_id):
            # the id a client chose is taken (a concurrent send won the race): refused, never
            # delivered to that task nor answered with it (it may be another credential's)
            raise TaskIdTaken(submission.requested_id)
        if submission.task_id is not None:
            # readability before anything else is said about a named task (its state included)
            named = self._records.get(submission.task_id) or await self.store.get(submission.task_id)
            if named is None or hidden_from(named, submission):
                raise TaskNotFound(submission.task_id)
        waiters = [Waiter(r.record.id, r.record.context_id) for r in self._running.values()
                   if r.waiting and not hidden_from(r.record, submission)]  # another's task is no one's to answer here
        route = route_message(submission.task_id, submission.context_id, waiters, self.policy.bound)
        if isinstance(route, Ambiguous):
            raise AmbiguousReply(f"ambiguous reply: {route.reason}")
        if isinstance(route, Reply):
            run = self._running[route.task_id]
            if submission.may_reply is not None and not submission.may_reply(run.record.principal):
                raise ReplyRefused(f"task {run.record.id} was created by a more trusted credential; "
                                   "only it, an equally trusted credential or an operator may answer it")
            return self._deliver(run, submission.message)
        forwarded = await self.coordination.route_reply(submission)  # a task waiting elsewhere
        if forwarded is not None:
            return forwarded
        if submission.task_id is not None:
            known = self._records.get(submission.task_id) or await self.store.get(submission.task_id)
            if known is None:
                raise TaskNotFound(submission.task_id)
            raise NotAReply(f"task {submission.task_id} is {known.state.value}, not waiting for input",
                            finished=known.state.terminal)
        if submission.confined_to is not None and submission.context_id is not None:
            await self._check_joinable(submission.context_id, submission.confined_to)
        if submission.confined_to is not None and self.max_open_contexts is not None:
            await self._check_open_contexts(submission)
        self._seen_task = True
        record = TaskRecord(
            id=submission.requested_id or new_task_id(),
            context_id=submission.context_id or new_context_id(),
            history=[submission.message],
            origin=submission.origin,
            trust=submission.trust,
            principal=submission.principal,
        )

        def received() -> None:  # traced once the task exists: a send refused its id records nothing
            try:
                self.session.trace.write("a2a_task_received", task_id=record.id, context_id=record.context_id,
                                         message_id=submission.message.message_id, principal=submission.principal,
                                         traceparent_from_caller=submission.traceparent)
            except Exception:  # noqa: BLE001 - the task is stored: a trace closed by a stop does not undo it
                logger.warning("task %s: its a2a_task_received line was not traced", record.id, exc_info=True)

        exclusive = submission.confined_to is not None
        reason, starts = self._judge(record.context_id)
        if reason is not None:
            record.state, record.status_message = TaskState.REJECTED, reason

            async def reject() -> None:
                await self._save(record, final=True, new=True, exclusive=exclusive)
                received()

            return Pending(record, reject, asyncio.Event())  # counts nowhere

        async def store() -> None:
            await self._save(record, final=False, new=True, exclusive=exclusive)
            received()

        return self._reserve(record, submission.traceparent, store, starts)

    def _reserve(self, record: TaskRecord, traceparent: str | None,
                 store: Callable[[], Awaitable[None]], starts: bool) -> Pending:
        """An accepted task, one of `_placing` from now until its coordination has it (queued
        here, or waiting in the store for another daemon) or refused it."""
        written = asyncio.Event()

        async def place() -> None:
            try:
                await self.coordination.place(record, traceparent, store)
            finally:
                del self._placing[record.id]  # in the step that queued it: never counted twice
                written.set()
            if self._drained and self.is_queued(record):  # written after a stop emptied the queue
                self._queue.remove(record)
                await self._give_up_queued(record)

        placement = Pending(record, place, written, starts)
        self._placing[record.id] = placement
        return placement

    async def _check_joinable(self, context_id: str, creator: str) -> None:
        """ContextRefused unless every credential that created a task in `context_id` is
        `creator` (its members: recorded with the context, so pruning its tasks opens it to no
        one; a context no one has used is anyone's). `create` checks it again atomically."""
        if await self.store.context_members(context_id) - {creator}:
            raise ContextRefused(CONTEXT_REFUSED.format(context_id))

    async def _check_open_contexts(self, submission: Submission) -> None:
        """TooManyOpenContexts when a peer's new task would open one context more than
        `max_open_contexts` (a context it already has an unfinished task in is open already)."""
        assert self.max_open_contexts is not None
        for placing in [p for p in self._placing.values() if p.record.principal == submission.principal]:
            await placing.written.wait()  # the credential's sends decided before this one count once stored
        held, among = await self.store.open_contexts(submission.principal, submission.context_id)
        if not among and held >= self.max_open_contexts:
            raise TooManyOpenContexts(self.max_open_contexts)

    async def _known(self, task_id: str) -> bool:
        return task_id in self._records or task_id in self._placing or await self.store.get(task_id) is not None

    def _deliver(self, run: Run, message: TaskMessage) -> TaskRecord:
        """The message is the reply `run` waits for: it works again at once (a blocking send
        waits for the outcome, not for the prompt it already has)."""
        record = run.record
        record.history.append(message)
        if run.reply is not None and not run.reply.done():
            run.reply.set_result(message.text)
            leave_input_required(record)
        return record

    def _judge(self, context_id: str) -> tuple[str | None, bool]:
        """Why a new task in `context_id` is rejected (None: accepted), and whether it starts at
        once. A task being placed counts as what it will be once queued: running when it was
        judged to start at once (`_schedule` starts it in the step that queues it), else waiting."""
        # A run whose task already reads terminal (`tasks/get` answers it) is only releasing its
        # slot: a caller who saw `completed` and sends again must not be told one is running.
        # What it accepts waits for that slot in the queue, a moment at most.
        live = [r.record.context_id for r in self._running.values() if not r.record.state.terminal]
        finishing = len(self._running) - len(live)
        placing = self._placing.values()
        live += [p.record.context_id for p in placing if p.starts]
        waiting = [*self._queue, *self.coordination.deferred(), *(p.record for p in placing if not p.starts)]
        context_busy = context_id in live or any(q.context_id == context_id for q in waiting)
        reason = refusal(accepting=self.accepting, task_acceptance=self.policy.task_acceptance,
                         bound=self.policy.bound, running=len(live), waiting=len(waiting),
                         finishing=finishing, exit_after_task=self.policy.after_task == "exit",
                         context_busy=context_busy, queue_depth=self.policy.queue_depth)
        return reason, reason is None and starts_at_once(self.policy.bound, len(live), context_busy)

    def remember_dialect(self, task_id: str, dialect: Any) -> None:
        """Which wire dialect created a task, so get/cancel answer in kind (bounded: recent tasks)."""
        self._dialects[task_id] = dialect
        self._dialects.move_to_end(task_id)
        while len(self._dialects) > DIALECT_MEMORY:
            self._dialects.popitem(last=False)

    def dialect_of(self, task_id: str) -> Any:
        return self._dialects.get(task_id)

    async def wait_settled(self, record: TaskRecord) -> TaskRecord:
        """Wait until the task is terminal or waits for input (what a blocking send returns).
        A task that runs elsewhere, or that this daemon gave up meanwhile, its coordination
        watches."""

        def settled() -> bool:
            return record.state.terminal or record.state is TaskState.INPUT_REQUIRED

        def elsewhere() -> bool:
            return self.coordination.runs_elsewhere(record)

        if not elsewhere():
            await self._waiters.wait_for(record.id, lambda: settled() or elsewhere())
        if settled():
            return record
        return await self.coordination.watch(record, settled=(TaskState.INPUT_REQUIRED,), timeout=None)

    async def get(self, task_id: str) -> TaskRecord:
        """The task as stored, or live here. A live task that reads terminal may not be stored
        (or synced) yet: it is read from the store, whose answer waits for that write."""
        record = self._records.get(task_id)
        if record is None or record.state.terminal:
            record = await self.store.get(task_id) or record
        if record is None:
            raise TaskNotFound(task_id)
        return record

    async def list(self, context_id: str | None = None, limit: int = 100, offset: int = 0,
                   state: TaskState | None = None, principal: str | None = None) -> list[TaskRecord]:
        return await self.store.list(context_id, limit, offset, state, principal)

    async def count(self, context_id: str | None = None, state: TaskState | None = None,
                    principal: str | None = None) -> int:
        return await self.store.count(context_id, state, principal)

