"""Who runs which task, as the daemon asks it: the `Coordination` protocol (issue 23).

The daemon never decides alone where a task runs, where a reply or cancel goes, or what happens
to an end the store refused: it asks its coordination. `LocalCoordination` is the daemon alone
on its store (memory, SQLite): every task runs here, a claim always succeeds, no task has an
owner elsewhere, and an end is recorded straight into the store. Another implementation (several
daemons on one shared store) lives outside the core and is chosen by `murmurd.a2a.serve`; the
core knows only this protocol, as it knows only `stores.base.TaskStore`.

`CoordinationHost` is what a coordination may ask of the daemon it serves: its store and event
log, how much room it has, and to take, answer, cancel, forget or give up tasks here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from typing import Protocol

from murmurd.a2a.core.intake import Submission
from murmurd.a2a.core.stream import EventLog
from murmurd.a2a.core.tasks import TaskMessage, TaskRecord, TaskState
from murmurd.a2a.stores.base import StoreUnreachable, TaskStore


class CoordinationHost(Protocol):
    """The daemon, as a coordination sees it."""

    store: TaskStore
    log: EventLog
    accepting: bool

    def room(self) -> int:
        """Tasks of new contexts this daemon can take now."""

    def take(self, records: list[TaskRecord], *, first: bool = False) -> None:
        """Queue tasks placed here (arrival order; `first`: at the head of the queue); one already
        queued or running here is skipped."""

    def hold(self, record: TaskRecord, traceparent: str | None) -> None:
        """Know `record` as live here before it is queued (a `take` then queues this object)."""

    def release(self, record: TaskRecord, *, queued_too: bool = False) -> None:
        """Forget `record` held by `hold` (unless queued here meanwhile, or `queued_too`)."""

    def live(self, task_id: str) -> TaskRecord | None:
        """The live record of a task held here, if any."""

    def is_queued(self, record: TaskRecord) -> bool: ...

    def is_running(self, task_id: str) -> bool: ...

    def reply_to(self, task_id: str, message: TaskMessage) -> None:
        """Deliver a reply to a task waiting here for input (ignored, logged, if it no longer waits)."""

    async def cancel_here(self, task_id: str) -> None:
        """Cancel a task queued or running here (if it still is)."""

    def busy_contexts(self) -> set[str]:
        """Contexts with a task queued or running here."""

    def tasks_here(self) -> set[str]:
        """Ids of the tasks queued, running or ending here."""

    async def give_up(self, reason: str) -> list[TaskRecord]:
        """Drop the queue and cancel every run without recording an end; what was dropped."""

    async def forget(self, record: TaskRecord) -> None:
        """`record` does not run here after all: forget it, wake whoever waits on it."""

    async def announce(self, record: TaskRecord, *, final: bool) -> None:
        """Count and publish a state the store holds now."""

    def stop_after_failure(self, exc: BaseException) -> None:
        """Something the daemon cannot do without died: stop serving."""


class Coordination(Protocol):
    """What the daemon asks about where its tasks run (see docs/decisions.md, issue 23)."""

    async def start(self, host: CoordinationHost) -> None:
        """Begin coordinating for `host` (after its scheduler started)."""

    async def stop(self) -> None:
        """Leave: after the daemon ended or canceled its runs and handed back its queue."""

    async def place(self, record: TaskRecord, traceparent: str | None,
                    store: Callable[[], Awaitable[None]]) -> None:
        """A new task: `store()` records it (raising what the store refused); then it is queued
        here (`host.take`) or left for whichever daemon claims it."""

    async def claim(self, record: TaskRecord) -> bool:
        """Claim a task stored for this daemon (the launch task): False when it runs elsewhere."""

    def wake(self) -> None:
        """A run ended here: there is room, look for work."""

    async def put_off(self, record: TaskRecord, exc: StoreUnreachable) -> bool:
        """A task could not start (the store was unreachable): True when it is started again later
        (its run then ends without an outcome), False when it fails here."""

    def deferred(self) -> Collection[TaskRecord]:
        """Tasks put off: they count as queued, their contexts as busy."""

    def take_deferred(self) -> list[TaskRecord]:
        """Hand the put-off tasks back to the daemon (it is stopping): they start no more."""

    async def hand_back(self, record: TaskRecord) -> bool:
        """A queued task the stopping daemon never started: True when it waits for another
        daemon (then it is only forgotten here), False when it is canceled here."""

    async def route_reply(self, submission: Submission) -> TaskRecord | None:
        """A reply that no task here waits for: carried to the task's owner elsewhere (the task as
        it will be), or None (it is no reply)."""

    def runs_elsewhere(self, record: TaskRecord) -> bool:
        """Is `record` (as read) a task this daemon does not hold?"""

    async def route_cancel(self, record: TaskRecord) -> TaskRecord:
        """Cancel a task that runs elsewhere; the record as the answer shows it."""

    async def watch(self, record: TaskRecord, settled: tuple[TaskState, ...], timeout: float | None) -> TaskRecord:
        """Wait for a task that runs elsewhere to end (or reach one of `settled`)."""

    def end_unrecorded(self, record: TaskRecord) -> None:
        """The store refused even a brief end of `record`: keep it for later, or let it go."""


class LocalCoordination:
    """One daemon alone on its store: everything runs here."""

    def __init__(self) -> None:
        self._host: CoordinationHost | None = None

    async def start(self, host: CoordinationHost) -> None:
        self._host = host

    async def stop(self) -> None:
        return None

    async def place(self, record: TaskRecord, traceparent: str | None,
                    store: Callable[[], Awaitable[None]]) -> None:
        assert self._host is not None
        await store()
        # recorded, then live and queued in one step: `cancel` never finds it in between
        self._host.hold(record, traceparent)
        self._host.take([record])

    async def claim(self, record: TaskRecord) -> bool:
        return True

    def wake(self) -> None:
        return None

    async def put_off(self, record: TaskRecord, exc: StoreUnreachable) -> bool:
        return False

    def deferred(self) -> Collection[TaskRecord]:
        return ()

    def take_deferred(self) -> list[TaskRecord]:
        return []

    async def hand_back(self, record: TaskRecord) -> bool:
        return False

    async def route_reply(self, submission: Submission) -> TaskRecord | None:
        return None

    def runs_elsewhere(self, record: TaskRecord) -> bool:
        return False

    async def route_cancel(self, record: TaskRecord) -> TaskRecord:
        return record

    async def watch(self, record: TaskRecord, settled: tuple[TaskState, ...], timeout: float | None) -> TaskRecord:
        assert self._host is not None
        return await self._host.store.get(record.id) or record

    def end_unrecorded(self, record: TaskRecord) -> None:
        return None  # logged by the daemon; the store holds whatever it last took
