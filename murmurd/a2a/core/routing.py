"""Cancels, and the daemon as its coordination sees it (`coordination.CoordinationHost`): room
for work, tasks taken, held, answered, canceled, forgotten or given up here.

`Routing` is one side of `CapsuleDaemon` (murmurd.a2a.core.daemon), with no state of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from murmurd.a2a.core.intake import TaskNotCancelable
from murmurd.a2a.core.runs import CANCEL_WAIT_SECS
from murmurd.a2a.core.tasks import TaskMessage, TaskRecord, TaskState
from murmurd.a2a.core.tenancy import same_task

logger = logging.getLogger("murmurd.a2a")


class Routing:
    async def cancel(self, task_id: str) -> TaskRecord:
        # the live record when there is one: a run that is recording its end is never cut short
        # because the store does not hold that end yet (`get` reads the store for it)
        record = self._records.get(task_id) or await self.get(task_id)
        if record.state.terminal:
            raise TaskNotCancelable(f"task {task_id} is already {record.state.value}")
        if self.coordination.runs_elsewhere(record):
            return await self.coordination.route_cancel(record)
        await self._cancel_here(record)
        return record

    async def _cancel_here(self, record: TaskRecord) -> None:
        if record in self._queue:
            self._queue.remove(record)
            self._traceparents.pop(record.id, None)
            try:
                await self._finish(record, TaskState.CANCELED, "canceled by request")
            except BaseException:  # a refused write is the canceller's error; its blocked callers see it canceled
                self._waiters.wake(record.id)
                raise
        elif record.id in self._running:
            await self._cancel_run(self._running[record.id], "canceled by request")
            await self._wait_terminal(record, CANCEL_WAIT_SECS)  # the answer shows it canceled

    async def _wait_terminal(self, record: TaskRecord, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._waiters.wait_for(record.id, lambda: record.state.terminal)

    # -- what a coordination asks (murmurd.a2a.core.coordination.CoordinationHost) ----------

    def room(self) -> int:
        if not self.accepting:
            return 0
        return max(0, self.policy.bound - len(self._running) - len(self._queue))

    def take(self, records: list[TaskRecord], *, first: bool = False) -> None:
        """Queue tasks placed here, in order (`first`: at the head, in front of what waits)."""
        queued = {r.id for r in self._queue}
        taken = []
        for placed in records:
            if placed.id in queued or placed.id in self._running:
                continue  # already here (placed again after this daemon lost it): never twice
            local = self._records.get(placed.id)
            # this very object only when it is the stored task: a send that lost the race for a
            # client-chosen id holds a record of that id until its insert is refused
            record = local if local is not None and same_task(local, placed) else placed
            self._records[record.id] = record
            taken.append(record)
        if first:
            self._queue.extendleft(reversed(taken))
            self._wakeup.set()
        else:
            self._queue.extend(taken)
            self._schedule()

    def hold(self, record: TaskRecord, traceparent: str | None) -> None:
        self._records[record.id] = record
        self._traceparents[record.id] = traceparent

    def release(self, record: TaskRecord, *, queued_too: bool = False) -> None:
        if (self._records.get(record.id) is record and record.id not in self._running
                and (queued_too or record not in self._queue)):  # a claim loop may have started it
            self._records.pop(record.id, None)
            self._traceparents.pop(record.id, None)
            self._waiters.wake(record.id)

    def live(self, task_id: str) -> TaskRecord | None:
        return self._records.get(task_id)

    def is_queued(self, record: TaskRecord) -> bool:
        return record in self._queue

    def is_running(self, task_id: str) -> bool:
        return task_id in self._running

    def reply_to(self, task_id: str, message: TaskMessage) -> None:
        run = self._running.get(task_id)
        if run is None or not run.waiting:
            logger.warning("task %s: a reply arrived from elsewhere, but it no longer waits for input", task_id)
            return
        self._deliver(run, message)

    async def cancel_here(self, task_id: str) -> None:
        record = self._records.get(task_id)
        if record is not None and not record.state.terminal:
            await self._cancel_here(record)

    def busy_contexts(self) -> set[str]:
        return {r.record.context_id for r in self._running.values()} | {r.context_id for r in self._queue}

    def tasks_here(self) -> set[str]:
        return ({r.id for r in self._queue} | set(self._running) | {record.id for record, _ in self._unfinished}
                | self._ending)

    async def give_up(self, reason: str) -> list[TaskRecord]:
        """Give up every task here: the queued ones are dropped, the runs cancelled without
        recording an end (whoever takes them over records it). The caller forgets them."""
        dropped = list(self._queue)
        self._queue.clear()
        runs = list(self._running.values())
        for run in runs:
            run.handed_over = True
        await asyncio.gather(*(self._cancel_run(run, reason) for run in runs))
        given = [*dropped, *(run.record for run in runs)]
        for record in given:
            self._traceparents.pop(record.id, None)
        return given

    async def forget(self, record: TaskRecord) -> None:
        """Forget a task this daemon does not run after all; a blocking caller waiting on it goes
        on to watch it wherever it runs (`wait_settled`)."""
        self._records.pop(record.id, None)
        self._waiters.wake(record.id)

    async def announce(self, record: TaskRecord, *, final: bool) -> None:
        await self._announce(record, final=final)
