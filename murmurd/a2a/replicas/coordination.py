"""`Coordination` (murmurd.a2a.core.coordination) for replicas on one PostgreSQL database.

`ReplicaCoordination` is what the daemon talks to; `ReplicaCoordinator` (coordinator.py) does the
talking to the database and the other replicas, and asks this object what it needs of the
daemon (`ReplicaHost`). What only replicas have lives here, never in the core:

- a new task waits in the database; this replica runs it only if a claiming pass gives it here
  (its context free or leased here), else the context's holder or a replica with room does;
- a reply or cancel for a task another replica owns goes to that replica's inbox, and a blocking
  caller watches the task through the database and the shared events;
- a start that met an unreachable database is tried again after `START_RETRY_SECS` (its context
  counts as busy meanwhile, so the tasks behind it keep their order);
- ends the store refused are kept (at most `MAX_UNRECORDED`) for the settling to store once the
  database answers again (`fencing`);
- a fenced or swept replica gives up its queue and runs without recording their ends.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Iterable

from murmurd.a2a.core.coordination import CoordinationHost
from murmurd.a2a.core.intake import AmbiguousReply, ReplyRefused, Submission
from murmurd.a2a.core.records import leave_input_required
from murmurd.a2a.core.runs import CANCEL_WAIT_SECS
from murmurd.a2a.core.stream import Subscription
from murmurd.a2a.core.tasks import TaskMessage, TaskRecord, TaskState
from murmurd.a2a.core.tenancy import hidden_from
from murmurd.a2a.replicas.coordinator import ReplicaCoordinator
from murmurd.a2a.stores.base import StoreUnreachable

logger = logging.getLogger("murmurd.a2a")

START_RETRY_SECS = 1.0  # a start that met an unreachable database is tried again after this
MAX_UNRECORDED = 10_000  # task ends kept for storing after the database refused them


class ReplicaCoordination:
    """The daemon's coordination when it is one replica among several (`ReplicaHost` too)."""

    def __init__(self, coordinator: ReplicaCoordinator) -> None:
        self.coordinator = coordinator
        self._host: CoordinationHost | None = None
        # Tasks whose start met an unreachable database, waiting to start again.
        self._retrying: dict[str, TaskRecord] = {}
        # Ends the store refused, by task id; stored once the database answers. Oldest go first.
        self._unrecorded: OrderedDict[str, TaskRecord] = OrderedDict()

    @property
    def host(self) -> CoordinationHost:
        assert self._host is not None
        return self._host

    # -- Coordination: what the daemon asks ------------------------------------------------------

    async def start(self, host: CoordinationHost) -> None:
        self._host = host
        await self.coordinator.start(self)

    async def stop(self) -> None:
        await self.coordinator.stop()

    async def place(self, record: TaskRecord, traceparent: str | None,
                    store: Callable[[], Awaitable[None]]) -> None:
        """The task waits in the database; this replica claims it if it may (its context is free
        or held here), else the context's holder or a replica with room does."""
        host = self.host
        host.hold(record, traceparent)  # so a claim here queues this very object (`take`)
        try:
            await store()
        except BaseException:
            host.release(record, queued_too=True)
            raise
        claimed = await self.coordinator.claim()
        if all(r.id != record.id for r in claimed):
            host.release(record)
            await self.coordinator.announce_work()

    async def claim(self, record: TaskRecord) -> bool:
        return await self.coordinator.claim_own(record.id, record.context_id)

    def wake(self) -> None:
        self.coordinator.wake()  # room here now: claim what waits

    async def put_off(self, record: TaskRecord, exc: StoreUnreachable) -> bool:
        """The task never started (the database still has it queued, this replica's): it goes
        back to the head of the queue and starts again once the database answers."""
        logger.warning("task %s: not started, %s; tried again in %g s", record.id, exc, START_RETRY_SECS)
        self._retrying[record.id] = record
        asyncio.get_running_loop().call_later(START_RETRY_SECS, self._retry_start, record.id)
        return True

    def _retry_start(self, task_id: str) -> None:
        record = self._retrying.pop(task_id, None)
        if record is not None and self.host.accepting:  # else dropped (a fence, a stop): the database keeps it
            self.host.take([record], first=True)

    def deferred(self) -> Collection[TaskRecord]:
        return list(self._retrying.values())

    def take_deferred(self) -> list[TaskRecord]:
        taken = list(self._retrying.values())
        self._retrying.clear()
        return taken

    async def hand_back(self, record: TaskRecord) -> bool:
        return True  # still queued in the database: another replica runs it

    async def route_reply(self, submission: Submission) -> TaskRecord | None:
        """A reply for a task waiting on another replica goes to that replica's inbox; the
        answer is the task as it will be (working again, the reply in its history)."""
        host = self.host
        target: TaskRecord | None = None
        if submission.task_id is not None:
            known = await host.store.get(submission.task_id)
            if known is not None and known.state is TaskState.INPUT_REQUIRED and not host.is_running(known.id):
                if submission.context_id is not None and submission.context_id != known.context_id:
                    raise AmbiguousReply(f"ambiguous reply: task {known.id} waits for input in context "
                                         f"{known.context_id}, but the message names context {submission.context_id}")
                target = known
        elif submission.context_id is not None:
            waiting = [r for r in await host.store.list(submission.context_id, limit=3, state=TaskState.INPUT_REQUIRED)
                       if not host.is_running(r.id)]
            if len(waiting) > 1:
                raise AmbiguousReply(f"ambiguous reply: {len(waiting)} tasks of context {submission.context_id} "
                                     "wait for input; name the task (taskId) the reply is for")
            target = waiting[0] if waiting else None
        if target is None or hidden_from(target, submission):
            return None  # another's waiting task: not this caller's to answer (a named one was refused before)
        if submission.may_reply is not None and not submission.may_reply(target.principal):
            raise ReplyRefused(f"task {target.id} was created by a more trusted credential; "
                               "only it, an equally trusted credential or an operator may answer it")
        owner = await self.coordinator.owner_of(target.id)
        if owner is None:
            return None
        await self.coordinator.send(owner, "reply", target.id, submission.message.to_json())
        target.history.append(submission.message)
        leave_input_required(target)
        return target

    def runs_elsewhere(self, record: TaskRecord) -> bool:
        return self.host.live(record.id) is not record

    async def route_cancel(self, record: TaskRecord) -> TaskRecord:
        """An unclaimed queued task is canceled here; one claimed by another replica is canceled
        by that replica (its inbox), and this answer waits to show it."""
        if record.state is TaskState.SUBMITTED:
            canceled = await self.coordinator.cancel_waiting(record.id, "canceled by request")
            if canceled is not None:
                await self.host.announce(canceled, final=True)
                return canceled
        owner = await self.coordinator.owner_of(record.id)
        if owner is not None:
            await self.coordinator.send(owner, "cancel", record.id, {})
            return await self.watch(record, settled=(), timeout=CANCEL_WAIT_SECS)
        return record

    async def watch(self, record: TaskRecord, settled: tuple[TaskState, ...], timeout: float | None) -> TaskRecord:
        """Wait for a task running on another replica to reach a terminal state (or one of
        `settled`), watching its status events; the stored record then (or as it was, after
        `timeout`)."""
        host = self.host
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            sub = host.log.subscribe(task_id=record.id, close_on_final=True)  # before the read: nothing missed
            try:
                current = await host.store.get(record.id) or record
                if current.state.terminal or current.state in settled:
                    return current
                left = None if deadline is None else max(0.0, deadline - loop.time())
                async with asyncio.timeout(left):
                    await _settling(sub, settled)
            except TimeoutError:
                return current
            finally:
                sub.close()
            if not sub.lagged:
                return await host.store.get(record.id) or current

    def end_unrecorded(self, record: TaskRecord) -> None:
        self._unrecorded[record.id] = record  # stored by the coordinator once the database answers
        while len(self._unrecorded) > MAX_UNRECORDED:
            lost, _ = self._unrecorded.popitem(last=False)
            logger.error("task %s: its end is no longer kept for storing (over %d unrecorded)", lost, MAX_UNRECORDED)

    # -- ReplicaHost: what the coordinator asks --------------------------------------------------

    def room(self) -> int:
        return self.host.room()

    async def take_claimed(self, records: list[TaskRecord]) -> None:
        self.host.take(records)

    async def deliver_reply(self, task_id: str, message: TaskMessage) -> None:
        self.host.reply_to(task_id, message)

    async def cancel_local(self, task_id: str) -> None:
        await self.host.cancel_here(task_id)

    def busy_contexts(self) -> set[str]:
        return self.host.busy_contexts()

    def held_tasks(self) -> set[str]:
        return self.host.tasks_here() | set(self._retrying) | set(self._unrecorded)

    def unrecorded_ends(self) -> list[TaskRecord]:
        return list(self._unrecorded.values())

    def recorded(self, task_ids: Iterable[str]) -> None:
        for task_id in task_ids:
            self._unrecorded.pop(task_id, None)

    async def abandon(self, reason: str) -> None:
        """Give up every task here: the queued ones are dropped, the runs cancelled without
        recording an end (the survivor's sweep or the coordinator's settling does that)."""
        retrying = self.take_deferred()
        for record in [*retrying, *await self.host.give_up(reason)]:
            await self.host.forget(record)

    def stop_after_failure(self, exc: BaseException) -> None:
        self.host.stop_after_failure(exc)


async def _settling(sub: Subscription, settled: tuple[TaskState, ...]) -> None:
    """Until `sub` yields a status event in a terminal state or one of `settled` (or ends)."""
    async for event in sub:
        state = event.data.get("status", {}).get("state") if event.type == "status" else None
        if state is not None and (TaskState(state).terminal or TaskState(state) in settled):
            return
