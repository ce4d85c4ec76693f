"""The daemon's intake: a submission accepted and queued, refused, or delivered as a reply; and
the reads the edge makes (a task, a list, a count, a blocking send's outcome).

`Intake` is one side of `CapsuleDaemon` (murmurd.a2a.core.daemon), with no state of its own.
Where a new task runs is its coordination's to say (`Coordination.place`).
"""

from __future__ import annotations

from typing import Any

from murmurd.a2a.core.admission import Ambiguous, Reply, Waiter, refusal, route_message
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


class Intake:
    async def submit(self, submission: Submission) -> TaskRecord:
        """Accept, queue, reject, or deliver as a reply; return the task record.

        One submission at a time: routing a reply, judging the lifecycle (the bound, `single`,
        `queue_depth`), recording the task and queueing it happen under one lock, so concurrent
        sends cannot all pass the check before any of them is queued, nor two of them claim one
        client-chosen id."""
        async with self._submitting:
            return await self._submit_locked(submission)

    async def _submit_locked(self, submission: Submission) -> TaskRecord:
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
            self.session.trace.write("a2a_task_received", task_id=record.id, context_id=record.context_id,
                                     message_id=submission.message.message_id, principal=submission.principal,
                                     traceparent_from_caller=submission.traceparent)

        exclusive = submission.confined_to is not None
        reason = self._refusal(record.context_id)
        if reason is not None:
            record.state, record.status_message = TaskState.REJECTED, reason
            await self._save(record, final=True, new=True, exclusive=exclusive)
            received()
            return record

        async def store() -> None:
            await self._save(record, final=False, new=True, exclusive=exclusive)
            received()

        await self.coordination.place(record, submission.traceparent, store)
        return record

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
        held, among = await self.store.open_contexts(submission.principal, submission.context_id)
        if not among and held >= self.max_open_contexts:
            raise TooManyOpenContexts(self.max_open_contexts)

    async def _known(self, task_id: str) -> bool:
        return task_id in self._records or await self.store.get(task_id) is not None

    def _deliver(self, run: Run, message: TaskMessage) -> TaskRecord:
        """The message is the reply `run` waits for: it works again at once (a blocking send
        waits for the outcome, not for the prompt it already has)."""
        record = run.record
        record.history.append(message)
        if run.reply is not None and not run.reply.done():
            run.reply.set_result(message.text)
            leave_input_required(record)
        return record

    def _refusal(self, context_id: str) -> str | None:
        # A run whose task already reads terminal (`tasks/get` answers it) is only releasing its
        # slot: a caller who saw `completed` and sends again must not be told one is running.
        # What it accepts waits for that slot in the queue, a moment at most.
        live = [r for r in self._running.values() if not r.record.state.terminal]
        waiting = [*self._queue, *self.coordination.deferred()]
        context_busy = any(r.record.context_id == context_id for r in live) or any(
            q.context_id == context_id for q in waiting)
        return refusal(accepting=self.accepting, task_acceptance=self.policy.task_acceptance,
                       bound=self.policy.bound, running=len(live), waiting=len(waiting),
                       finishing=len(self._running) - len(live), exit_after_task=self.policy.after_task == "exit",
                       context_busy=context_busy, queue_depth=self.policy.queue_depth)

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
        record = self._records.get(task_id) or await self.store.get(task_id)
        if record is None:
            raise TaskNotFound(task_id)
        return record

    async def list(self, context_id: str | None = None, limit: int = 100, offset: int = 0,
                   state: TaskState | None = None, principal: str | None = None) -> list[TaskRecord]:
        return await self.store.list(context_id, limit, offset, state, principal)

    async def count(self, context_id: str | None = None, state: TaskState | None = None,
                    principal: str | None = None) -> int:
        return await self.store.count(context_id, state, principal)

