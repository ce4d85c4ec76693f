"""`CapsuleDaemon`: everything one served capsule needs, in one object.

It owns the capsule's own session (its workdir and trace), its task store, its event log and its
scheduler: accepted tasks start as soon as the concurrency bound and their context allow
(`admission`), each in its own asyncio task, in a session the `SessionPool` hands out (the
daemon's own with a bound of 1, one per context above it). A task pauses on `request-input`
until a reply routed to it arrives. Nothing lives at module level, so one process can serve
several capsules.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from murmurd import workdir_fs
from murmurd.a2a.admission import Ambiguous, Reply, Waiter, refusal, route_message, runnable
from murmurd.a2a.auth.outbound import PeerHeaders
from murmurd.a2a.context_sessions import DEFAULT_KEEP, SessionIndex, WorkdirRetention, recorder
from murmurd.a2a.intake import (
    AmbiguousReply,
    ContextRefused,
    NotAReply,
    ReplyRefused,
    Submission,
    TaskIdTaken,
    TaskNotCancelable,
    TaskNotFound,
    TooManyOpenContexts,
)
from murmurd.a2a.lifecycle import LifecyclePolicy
from murmurd.a2a.metrics import DaemonMetrics
from murmurd.a2a.peer import PeerClient
from murmurd.a2a.pool import SessionPool, Slot
from murmurd.a2a.store import TaskStore
from murmurd.a2a.stores.base import CONTEXT_FOREIGN, ID_TAKEN, StoreUnreachable
from murmurd.a2a.stream import EventLog, Subscription
from murmurd.a2a.task_events import StreamEvents
from murmurd.a2a.tenancy import CONTEXT_REFUSED, hidden_from, same_task
from murmurd.a2a.task_log import TaskLog
from murmurd.a2a.tasks import (
    TaskArtifact,
    TaskMessage,
    TaskRecord,
    TaskState,
    new_context_id,
    new_task_id,
    now_ms,
)
from murmurd.a2a.wire.common import new_message_id, result_artifact_id
from murmurd.host import AbortTask, ComponentHost
from murmurd.host.bridge import LoopBridge
from murmurd.host.context import PeerTask
from murmurd.hooks.dispatcher import LifecycleDispatcher
from murmurd.session.history import read_history
from murmurd.session.messages import Message
from murmurd.session.services import LoopServices
from murmurd.session.session import Session, TaskOutcome, TaskSpec
from murmurd.staging.sessions import open_session_staging
from murmurd.staging.stage import StagedCapsule
from murmurd.staging.workdir import history_file, task_result_file
from murmurd.text import json_text

if TYPE_CHECKING:
    from murmurd.a2a.replicas.coordinator import ReplicaCoordinator

logger = logging.getLogger("murmurd.a2a")

INPUT_TIMEOUT = "input-timeout"
DIALECT_MEMORY = 10_000
CANCEL_WAIT_SECS = 5.0  # how long `tasks/cancel` waits for the running task to end
START_RETRY_SECS = 1.0  # replicas: a start that met an unreachable database is tried again after this
MAX_UNRECORDED = 10_000  # replicas: task ends kept for storing after the database refused them
MAX_OPEN_CONTEXTS = 64  # contexts one peer credential may hold open (an unfinished task in each)


class HistoryUnreadable(RuntimeError):
    """A threaded context's stored history is refused (a symlink, bad JSON): its task fails."""


@dataclass
class Run:
    """One started task: its asyncio task, why it would be canceled, its open request-input."""

    record: TaskRecord
    task: asyncio.Task[None] | None = None
    reason: str = "canceled by request"
    reply: asyncio.Future[str] | None = None  # set while the task waits for input
    disowned: bool = False  # replicas: not this replica's to start or end (declared dead, cut off)
    retry: bool = False  # replicas: not started, the database was unreachable; it starts again here
    cancel_sent_at: float | None = None  # loop time of the cancel: a second one soon after would cut its ending short

    @property
    def waiting(self) -> bool:
        return self.reply is not None and not self.reply.done()


class CapsuleDaemon:
    def __init__(
        self,
        staged: StagedCapsule,
        host: ComponentHost,
        store: TaskStore,
        *,
        policy: LifecyclePolicy,
        log: EventLog | None = None,
        replicas: ReplicaCoordinator | None = None,
        peer_tokens: PeerHeaders | None = None,
        max_open_contexts: int | None = MAX_OPEN_CONTEXTS,
        session_index: Path | None = None,
        keep_context_sessions: int | None = DEFAULT_KEEP,
    ) -> None:
        """`peer_tokens`: the bearer token outbound `message/send` presents to each peer;
        `max_open_contexts`: contexts one peer credential may hold open (None: no bound);
        `session_index`: where context sessions are recorded (murmurd.a2a.context_sessions;
        None: their workdirs are never removed), at most `keep_context_sessions` closed ones kept."""
        self.max_open_contexts = max_open_contexts
        self.staged = staged
        self.host = host
        self.metrics = DaemonMetrics()  # this daemon's own registry (GET /metrics)
        self.task_log = TaskLog()  # a log line per task accepted and per task finished
        self.store: TaskStore = self.metrics.timed_store(store)
        self.policy = policy
        self.log = log or EventLog()
        self.replicas = replicas  # None: one daemon alone on its store
        shared = policy.bound == 1
        # With a session per context, the daemon's own session only records acceptance (its
        # trace); the capsule's hooks run in the context sessions, never here.
        self.session = Session(staged, host) if shared else Session(staged, host, dispatcher=LifecycleDispatcher())
        self.peers = PeerClient(self.session.trace, tokens=peer_tokens)
        self._own = Slot(self.session, self.peers)
        index = (SessionIndex(session_index, staged.workdir.root.parent)
                 if session_index is not None and not shared else None)
        opened, closed = recorder(index)

        async def session_closed(session_id: str) -> None:
            await closed(session_id)
            self.retention.wake()

        self.pool = SessionPool(self._own if shared else None, capacity=policy.bound,
                                idle_secs=policy.session_idle_secs, open_slot=self._open_context_slot,
                                on_open=opened, on_close=session_closed)
        self.retention = WorkdirRetention(
            self.store, index, keep=keep_context_sessions, live_sessions=self.pool.live_sessions,
            busy_contexts=lambda: self.busy_contexts() | {r.context_id for r in self._records.values()},
            forget_history_file=self._forget_history_file)
        self.stopped = asyncio.Event()  # the lifecycle (or a signal) says: stop serving
        self.accepting = True
        self._queue: deque[TaskRecord] = deque()  # accepted, not started, in arrival order
        self._running: dict[str, Run] = {}  # started, not yet ended
        self._wakeup = asyncio.Event()
        self._ended_runs = 0
        self._records: dict[str, TaskRecord] = {}  # live (non-terminal) tasks
        self._traceparents: dict[str, str | None] = {}  # queued task -> its caller's traceparent
        self._background: list[asyncio.Task[None]] = []
        self._seen_task = False
        self._task_md: set[str] = set()  # ids of the launch task (`--task`)
        self._launch_ended = False
        self._changed = asyncio.Condition()
        self._submitting = asyncio.Lock()  # one submission at a time (see `submit`)
        self._unfinished: list[tuple[TaskRecord, Run]] = []  # runs that ended leaving their task live
        self._ending: set[str] = set()  # taken from `_unfinished`, their end being recorded
        # Replicas: tasks whose start met an unreachable database, waiting to start again. Their
        # context counts as busy meanwhile, so the tasks behind them keep their order.
        self._retrying: dict[str, TaskRecord] = {}
        # Ends the store refused (replicas: the database was unreachable), by task id; the
        # coordinator stores them once it answers again. Bounded: the oldest go first.
        self._unrecorded: OrderedDict[str, TaskRecord] = OrderedDict()
        self._dialects: OrderedDict[str, Any] = OrderedDict()  # task id -> its dialect, most recent kept
        self.crashed: BaseException | None = None  # set if a background task died: serve exits non-zero
        self.stop_reason: str | None = None  # why the lifecycle stopped the daemon (serve logs it)
        self.stop_summary: dict[str, int] = {}  # what `stop` drained and canceled (serve logs it)
        self.metrics.watch_tasks(running=lambda: len(self._running), queued=lambda: len(self._queue))

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self, task_text: str | None = None) -> list[str]:
        """Open the daemon's session, fail what a previous daemon left running, start the scheduler.

        As upstream's runtime does at launch: a `task_text` (the `task.md` of `--task`) runs
        first, without waiting for A2A; `none` without one has nothing to do and stops; every
        mode but `queue` + `after_task: sleep` runs an empty task when the idle window passes
        without a message, then stops.
        """
        interrupted = await self.store.mark_interrupted()
        await self.session.open()
        self._connect(self._own)
        self._start_background(self._work(), "murmurd-session-worker")
        self._start_background(self.retention.run(), "murmurd-workdir-retention")
        if self.replicas is not None:
            await self.replicas.start(self)
        if self.pool.shared is None:
            self._start_background(self.pool.reap_periodically(), "murmurd-session-reaper")
        policy = self.policy
        if task_text is not None:
            await self._queue_task_md(task_text)
        elif policy.task_acceptance == "none":
            self.stop_reason = "task_acceptance: none and no launch task: nothing to do"
            self.accepting = False
            self.stopped.set()
        elif policy.idle_rule:
            self._start_background(self._idle_watch(), "murmurd-idle")
        return interrupted

    async def _queue_task_md(self, text: str) -> None:
        """The launch task: stored like any task (tasks/get sees it), traced `source: task_md`."""
        self._seen_task = True
        record = TaskRecord(id=new_task_id(), context_id=new_context_id(),
                            history=[TaskMessage(new_message_id(), "user", [{"text": text}])])
        self._task_md.add(record.id)
        self._records[record.id] = record
        await self._save(record, final=False, new=True)
        if self.replicas is not None and not await self.replicas.claim_own(record.id, record.context_id):
            # a claiming pass was first: this replica's own (then it is queued here already) or another's
            if record not in self._queue and record.id not in self._running:
                logger.warning("launch task %s was claimed by another replica first; it runs there", record.id)
                self._records.pop(record.id, None)
            return
        self._queue.append(record)
        self._schedule()

    def _connect(self, slot: Slot) -> None:
        """The host imports of `slot`'s session reach this loop (request-input, message/send)."""

        async def send(peer_url: str, message_id: str, context_id: str | None, text: str) -> PeerTask:
            return await slot.peers.send(peer_url, message_id, context_id, text, trust=slot.trust,
                                         traceparent=slot.session.spans.current_traceparent())

        bridge = LoopBridge(asyncio.get_running_loop())
        slot.session.services.connect(LoopServices(bridge, send_to_peer=send))

    async def _open_context_slot(self) -> Slot:
        """A new session for one context: workdir and Session built off the loop (file I/O)."""
        session = await asyncio.to_thread(lambda: Session(open_session_staging(self.staged), self.host))
        slot = Slot(session, PeerClient(session.trace, client=self.peers.client, tokens=self.peers.tokens))
        try:
            await session.open()
        except BaseException:
            await slot.close()
            raise
        self._connect(slot)
        return slot

    def _start_background(self, work: Any, name: str) -> None:
        task = asyncio.create_task(work, name=name)
        task.add_done_callback(self._on_background_done)
        self._background.append(task)

    def _on_background_done(self, task: asyncio.Task[None]) -> None:
        """A background task that dies of an exception cannot go unnoticed: it is logged, and
        the daemon stops and `murmurd serve` exits non-zero (a supervisor restarts it)."""
        if task.cancelled() or task.exception() is None:
            return
        logger.critical("%s died; the daemon stops", task.get_name(), exc_info=task.exception())
        self.stop_after_failure(task.exception())  # type: ignore[arg-type]

    def stop_after_failure(self, exc: BaseException) -> None:
        """Something the daemon cannot do without died: stop serving (serve exits non-zero)."""
        self.crashed = exc
        self.stop_reason = f"an internal failure: {exc!r}"
        self.accepting = False
        self.stopped.set()

    async def stop(self, grace_seconds: float = 10.0, *, close_store: bool = True) -> None:
        """Stop accepting, let the running tasks end (cancel those still running after the grace
        period), cancel what waits in the queue, and close every session's trace. With
        `close_store=False` the store stays open for requests still being answered (the caller
        closes it after the HTTP server has stopped)."""
        self.accepting = False
        self.stopped.set()
        runs = [run.task for run in self._running.values() if run.task is not None]
        if runs:
            await asyncio.wait(runs, timeout=grace_seconds)
        still = list(self._running.values())
        self.stop_summary = {"drained": len(runs) - len(still), "canceled_running": len(still),
                             "canceled_queued": len(self._queue) + len(self._retrying)}
        await asyncio.gather(*(self._cancel_run(run, "canceled: daemon shutting down") for run in still))
        while self._unfinished:  # canceled before their first step: the scheduler is not there to end them
            record, run = self._unfinished.pop(0)
            self._ending.add(record.id)
            await self._end_unfinished_marked(record, run)
        self._queue.extendleft(reversed(list(self._retrying.values())))  # they never started either
        self._retrying.clear()
        while self._queue:
            record = self._queue.popleft()
            self._traceparents.pop(record.id, None)
            if self.replicas is not None:  # still queued in the database: another replica runs it
                self._records.pop(record.id, None)
                continue
            await self._finish(record, TaskState.CANCELED, "canceled: daemon shutting down")
        if self.replicas is not None:
            await self.replicas.stop()
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        await self.pool.close_all()
        if self.pool.shared is None:
            await self._own.close()
        if close_store:
            await self.store.close()

    async def _idle_watch(self) -> None:
        """Upstream's idle rule: no message within the window runs the loop once with an empty
        task (no `task_start`/`task_end`: it is not a task anyone sent), then the daemon stops."""
        await asyncio.sleep(self.policy.idle_timeout_secs)
        if self._seen_task:
            return
        self.accepting = False
        logger.warning("[capsule-runtime] no A2A message received within timeout; running with empty task")
        self.stop_reason = (f"no A2A message within the idle window ({self.policy.idle_timeout_secs:g} s): "
                            f"ran the empty task ({self.policy.describe()})")
        try:
            await self.session.run_task(TaskSpec(new_task_id(), "", context_id=new_context_id(), source="idle"))
        finally:
            self.stopped.set()

    # -- the task API the router calls ----------------------------------------------------

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
        if self.replicas is not None:
            forwarded = await self._forward_reply(submission)
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
        if self.replicas is not None:
            return await self._queue_shared(record, submission.traceparent, exclusive, received)
        await self._save(record, final=False, new=True, exclusive=exclusive)
        received()
        # recorded, then live and queued in one step: `cancel` never finds it in between
        self._records[record.id] = record
        self._traceparents[record.id] = submission.traceparent
        self._queue.append(record)
        self._schedule()
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

    async def _queue_shared(self, record: TaskRecord, traceparent: str | None, exclusive: bool,
                            received: Callable[[], None]) -> TaskRecord:
        """Replicas: the task waits in the database; this replica claims it if it may (its
        context is free or held here), else the context's holder or a replica with room does."""
        assert self.replicas is not None
        self._records[record.id] = record  # so a claim here queues this very object (`take_claimed`)
        self._traceparents[record.id] = traceparent
        try:
            await self._save(record, final=False, new=True, exclusive=exclusive)
        except BaseException:
            if self._records.get(record.id) is record:
                self._records.pop(record.id, None)
                self._traceparents.pop(record.id, None)
            raise
        received()
        claimed = await self.replicas.claim()
        if all(r.id != record.id for r in claimed):
            if self._records.get(record.id) is record and record not in self._queue:
                self._records.pop(record.id, None)
                self._traceparents.pop(record.id, None)
            await self.replicas.announce_work()
        return record

    async def _forward_reply(self, submission: Submission) -> TaskRecord | None:
        """Replicas: a reply for a task waiting on another replica goes to that replica's inbox;
        the answer is the task as it will be (working again, the reply in its history)."""
        assert self.replicas is not None
        target: TaskRecord | None = None
        if submission.task_id is not None:
            known = await self.store.get(submission.task_id)
            if known is not None and known.state is TaskState.INPUT_REQUIRED and known.id not in self._running:
                if submission.context_id is not None and submission.context_id != known.context_id:
                    raise AmbiguousReply(f"ambiguous reply: task {known.id} waits for input in context "
                                         f"{known.context_id}, but the message names context {submission.context_id}")
                target = known
        elif submission.context_id is not None:
            waiting = [r for r in await self.store.list(submission.context_id, limit=3, state=TaskState.INPUT_REQUIRED)
                       if r.id not in self._running]
            if len(waiting) > 1:
                raise AmbiguousReply(f"ambiguous reply: {len(waiting)} tasks of context {submission.context_id} "
                                     "wait for input; name the task (taskId) the reply is for")
            target = waiting[0] if waiting else None
        if target is None or hidden_from(target, submission):
            return None  # another's waiting task: not this caller's to answer (a named one was refused before)
        if submission.may_reply is not None and not submission.may_reply(target.principal):
            raise ReplyRefused(f"task {target.id} was created by a more trusted credential; "
                               "only it, an equally trusted credential or an operator may answer it")
        owner = await self.replicas.owner_of(target.id)
        if owner is None:
            return None
        await self.replicas.send(owner, "reply", target.id, submission.message.to_json())
        target.history.append(submission.message)
        _leave_input_required(target)
        return target

    # -- what the replica coordinator asks (murmurd.a2a.replicas.coordinator.ReplicaHost) ----

    def room(self) -> int:
        if not self.accepting:
            return 0
        return max(0, self.policy.bound - len(self._running) - len(self._queue))

    async def take_claimed(self, records: list[TaskRecord]) -> None:
        queued = {r.id for r in self._queue}
        for claimed in records:
            if claimed.id in queued or claimed.id in self._running:
                continue  # already here (claimed again after this replica was swept): never twice
            local = self._records.get(claimed.id)
            # this very object only when it is the stored task: a send that lost the race for a
            # client-chosen id holds a record of that id until its insert is refused
            record = local if local is not None and same_task(local, claimed) else claimed
            self._records[record.id] = record
            self._queue.append(record)
        self._schedule()

    async def deliver_reply(self, task_id: str, message: TaskMessage) -> None:
        run = self._running.get(task_id)
        if run is None or not run.waiting:
            logger.warning("task %s: a reply arrived from another replica, but it no longer waits for input", task_id)
            return
        self._deliver(run, message)

    async def cancel_local(self, task_id: str) -> None:
        record = self._records.get(task_id)
        if record is not None and not record.state.terminal:
            await self._cancel_here(record)

    def busy_contexts(self) -> set[str]:
        return {r.record.context_id for r in self._running.values()} | {r.context_id for r in self._queue}

    def held_tasks(self) -> set[str]:
        return ({r.id for r in self._queue} | set(self._running) | {record.id for record, _ in self._unfinished}
                | self._ending | set(self._retrying) | set(self._unrecorded))

    def unrecorded_ends(self) -> list[TaskRecord]:
        return list(self._unrecorded.values())

    def recorded(self, task_ids: Iterable[str]) -> None:
        for task_id in task_ids:
            self._unrecorded.pop(task_id, None)

    async def abandon(self, reason: str) -> None:
        """Give up every task here: the queued ones are dropped, the runs cancelled without
        recording an end (the survivor's sweep or the coordinator's settling does that)."""
        dropped = [*self._queue, *self._retrying.values()]
        self._queue.clear()
        self._retrying.clear()
        runs = list(self._running.values())
        for run in runs:
            run.disowned = True
        await asyncio.gather(*(self._cancel_run(run, reason) for run in runs))
        for record in [*dropped, *(run.record for run in runs)]:
            self._traceparents.pop(record.id, None)
            await self._drop_local(record)

    async def _known(self, task_id: str) -> bool:
        return task_id in self._records or await self.store.get(task_id) is not None

    def _deliver(self, run: Run, message: TaskMessage) -> TaskRecord:
        """The message is the reply `run` waits for: it works again at once (a blocking send
        waits for the outcome, not for the prompt it already has)."""
        record = run.record
        record.history.append(message)
        if run.reply is not None and not run.reply.done():
            run.reply.set_result(message.text)
            _leave_input_required(record)
        return record

    def _refusal(self, context_id: str) -> str | None:
        # A run whose task already reads terminal (`tasks/get` answers it) is only releasing its
        # slot: a caller who saw `completed` and sends again must not be told one is running.
        # What it accepts waits for that slot in the queue, a moment at most.
        live = [r for r in self._running.values() if not r.record.state.terminal]
        waiting = [*self._queue, *self._retrying.values()]
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
        Replicas: a task that runs elsewhere, or that this replica gave up meanwhile, is watched
        through the database and the shared events."""

        def settled() -> bool:
            return record.state.terminal or record.state is TaskState.INPUT_REQUIRED

        def elsewhere() -> bool:
            return self.replicas is not None and self._records.get(record.id) is not record

        if not elsewhere():
            async with self._changed:
                await self._changed.wait_for(lambda: settled() or elsewhere())
        if settled():
            return record
        return await self._wait_elsewhere(record, settled=(TaskState.INPUT_REQUIRED,), timeout=None)

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

    async def _wait_elsewhere(self, record: TaskRecord, settled: tuple[TaskState, ...],
                              timeout: float | None) -> TaskRecord:
        """Replicas: wait for a task running on another replica to reach a terminal state (or
        one of `settled`), watching its status events; the stored record then (or as it was,
        after `timeout`)."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            sub = self.log.subscribe(task_id=record.id, close_on_final=True)  # before the read: nothing missed
            try:
                current = await self.store.get(record.id) or record
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
                return await self.store.get(record.id) or current

    async def cancel(self, task_id: str) -> TaskRecord:
        record = await self.get(task_id)
        if record.state.terminal:
            raise TaskNotCancelable(f"task {task_id} is already {record.state.value}")
        if self.replicas is not None and self._records.get(task_id) is not record:
            return await self._cancel_elsewhere(record)
        await self._cancel_here(record)
        return record

    async def _cancel_elsewhere(self, record: TaskRecord) -> TaskRecord:
        """Replicas: an unclaimed queued task is canceled here; one claimed by another replica
        is canceled by that replica (its inbox), and this answer waits to show it."""
        assert self.replicas is not None
        if record.state is TaskState.SUBMITTED:
            canceled = await self.replicas.cancel_waiting(record.id, "canceled by request")
            if canceled is not None:
                await self._announce(canceled, final=True)
                return canceled
        owner = await self.replicas.owner_of(record.id)
        if owner is not None:
            await self.replicas.send(owner, "cancel", record.id, {})
            return await self._wait_elsewhere(record, settled=(), timeout=CANCEL_WAIT_SECS)
        return record

    async def _cancel_here(self, record: TaskRecord) -> None:
        if record in self._queue:
            self._queue.remove(record)
            self._traceparents.pop(record.id, None)
            await self._finish(record, TaskState.CANCELED, "canceled by request")
        elif record.id in self._running:
            await self._cancel_run(self._running[record.id], "canceled by request")
            await self._wait_terminal(record, CANCEL_WAIT_SECS)  # the answer shows it canceled

    async def _wait_terminal(self, record: TaskRecord, timeout: float) -> None:
        async with self._changed:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._changed.wait_for(lambda: record.state.terminal)

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

    # -- the scheduler and the task runs ---------------------------------------------------

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
            record.context_id for record in self._retrying.values()}
        for record in runnable(self._queue, busy, len(self._running), self.policy.bound):
            self._queue.remove(record)
            run = Run(record)
            self._running[record.id] = run
            run.task = asyncio.create_task(self._run_guarded(run), name=f"murmurd-task-{record.id}")
            run.task.add_done_callback(lambda _t, task_id=record.id: self._run_ended(task_id))

    def _run_ended(self, task_id: str) -> None:
        run = self._running.pop(task_id, None)
        if run is not None and run.retry and not run.disowned:
            self._retrying[task_id] = run.record
            asyncio.get_running_loop().call_later(START_RETRY_SECS, self._retry_start, task_id)
        elif run is not None and not run.record.state.terminal and not run.disowned:
            self._unfinished.append((run.record, run))
        if run is None or not (run.disowned or run.retry):  # a task that did not run here is no ended run
            self._ended_runs += 1
            # upstream: the launch task ends the daemon unless it queues more
            self._launch_ended |= task_id in self._task_md and self.policy.task_acceptance != "queue"
        self._wakeup.set()
        if self.replicas is not None:
            self.replicas.wake()  # room here now: claim what waits

    def _retry_start(self, task_id: str) -> None:
        record = self._retrying.pop(task_id, None)
        if record is not None and self.accepting:  # else dropped (a fence, a stop): the database keeps it
            self._queue.appendleft(record)
            self._wakeup.set()

    async def _drop_local(self, record: TaskRecord) -> None:
        """Forget a task this replica does not run after all; a blocking caller waiting on it
        goes on to watch it wherever it runs (`wait_settled`)."""
        self._records.pop(record.id, None)
        async with self._changed:
            self._changed.notify_all()

    async def _run_guarded(self, run: Run) -> None:
        """Run one task in its context's session; whatever it raises fails that task alone. A
        cancel arriving at any point (opening the session, saving the task WORKING) ends it
        CANCELED; that last save is shielded from a second cancel."""
        record = run.record
        try:
            slot = await self.pool.acquire(record.context_id)
        except asyncio.CancelledError:
            await asyncio.shield(self._finish_quietly(record, TaskState.CANCELED, run.reason))
            return
        except Exception as exc:
            logger.exception("task %s: no session could be opened", record.id)
            await asyncio.shield(self._fail_unexpectedly(record, f"cannot open a session: {exc}"))
            return
        try:
            if self.pool.shared is None:
                self.session.trace.write("a2a_task_session", task_id=record.id, context_id=record.context_id,
                                         task_session_id=slot.session.staged.session_id)
            await self._run(run, slot)
        except asyncio.CancelledError:
            if not record.state.terminal and not run.disowned:  # disowned: the coordinator settles it
                await asyncio.shield(self._finish_quietly(record, TaskState.CANCELED, run.reason))
        except Exception as exc:
            logger.exception("task %s raised inside its session worker", record.id)
            await asyncio.shield(self._fail_unexpectedly(record, f"internal error: {type(exc).__name__}: {exc}"))
        finally:
            self.pool.release(record.context_id, slot)
            if self.pool.shared is None and slot.session.ended is not None:
                await self.pool.discard(record.context_id, slot)

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

    async def _finish_quietly(self, record: TaskRecord, state: TaskState, message: str) -> None:
        """`_finish` for a run's own exit paths: a store failure cannot escape into it."""
        self._traceparents.pop(record.id, None)
        try:
            await self._finish(record, state, message)
        except Exception:
            logger.exception("task %s: the %s state could not be stored", record.id, state.value)
            await self._store_brief(record)

    async def _fail_unexpectedly(self, record: TaskRecord, message: str) -> None:
        """Fail a task after an unexpected error. If the store refuses the full record, a brief
        one (id, context, state, message) is stored so `tasks/get` never reports a stale state;
        the failure is published either way (streams close, blocked callers return)."""
        await self._finish_quietly(record, TaskState.FAILED, message)

    async def _store_brief(self, record: TaskRecord) -> None:
        """Store the terminal state without history, artifacts or result (what the store refused
        is one of those); publish it and wake waiters whatever happens."""
        brief = record.brief()
        try:
            await self.store.put(brief)
        except Exception:
            logger.exception("task %s: not even its brief %s record could be stored", record.id, record.state.value)
            if self.replicas is not None:  # stored by the coordinator once the database answers
                self._unrecorded[record.id] = record
                while len(self._unrecorded) > MAX_UNRECORDED:
                    lost, _ = self._unrecorded.popitem(last=False)
                    logger.error("task %s: its end is no longer kept for storing (over %d unrecorded)",
                                 lost, MAX_UNRECORDED)
        self.metrics.task_changed(brief)
        self.task_log.changed(brief)
        self._records.pop(record.id, None)
        self.log.publish("status", record.id, record.status_frame(True), final=True)
        async with self._changed:
            self._changed.notify_all()

    async def _run(self, run: Run, slot: Slot) -> None:
        record = run.record
        services = slot.session.services
        assert services.loop is not None
        slot.trust = record.trust
        caller_traceparent = self._traceparents.pop(record.id, None)
        record.state = TaskState.WORKING
        try:
            saved = await self._save(record, final=False)
        except StoreUnreachable as exc:
            if self.replicas is None:
                raise
            # The task never started (the database still has it queued, this replica's): it goes
            # back to the head of the queue and starts again once the database answers.
            logger.warning("task %s: not started, %s; tried again in %g s", record.id, exc, START_RETRY_SECS)
            record.state = TaskState.SUBMITTED
            run.retry = True
            return
        if not saved:
            # Replicas: this one was declared dead while the task waited here, and the task went
            # back to the others (or one claimed it). It runs there, never here too.
            logger.warning("task %s: not started here, another replica runs it", record.id)
            run.disowned = True
            await self._drop_local(record)
            return
        # The daemon's lines are in its trace before the task ends (written during the save
        # above, as a rule: then this barrier costs no hand-off).
        await self.session.trace.flush()
        try:
            history = await self._history(record.context_id)
        except HistoryUnreadable as exc:
            await self._finish(record, TaskState.FAILED, str(exc))
            return
        spec = TaskSpec(
            record.id, record.history[0].text, context_id=record.context_id,
            source="task_md" if record.id in self._task_md else "a2a",
            origin=record.origin, trust=record.trust, history=history,
            traceparent=caller_traceparent,
        )
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
            await self.store.save_history(record.context_id, _stored_history(outcome))
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
        _leave_input_required(record)
        await self._save(record, final=False)
        return reply

    # -- records, streams, history -------------------------------------------------------

    async def _finish(self, record: TaskRecord, state: TaskState, message: str | None) -> None:
        record.state = state
        record.status_message = message
        await self._save(record, final=True)
        self._records.pop(record.id, None)

    async def _save(self, record: TaskRecord, *, final: bool, new: bool = False, exclusive: bool = False) -> bool:
        """Store, count and publish the record's state; False (nothing published) when the store
        refused it as another replica's. `new`: the task's first write, one atomic insert that
        raises TaskIdTaken when its id exists (and with `exclusive`, ContextRefused when its
        context has another credential's tasks), leaving whatever is stored untouched."""
        record.updated_at = now_ms()
        if new:
            refusal = await self.store.create(record, exclusive_context=exclusive)
            if refusal == ID_TAKEN:
                raise TaskIdTaken(record.id)
            if refusal == CONTEXT_FOREIGN:
                raise ContextRefused(CONTEXT_REFUSED.format(record.context_id))
        elif await self.store.put(record) is False:
            return False
        await self._announce(record, final=final)
        return True

    async def _announce(self, record: TaskRecord, *, final: bool) -> None:
        """Count and publish a state the store holds now; wake whoever waits on it."""
        self.metrics.task_changed(record)
        self.task_log.changed(record)
        self.log.publish("status", record.id, record.status_frame(final), final=final)
        if final:
            self.retention.wake()  # retention may have pruned a context's last task
        async with self._changed:
            self._changed.notify_all()

    def _forget_history_file(self, context_id: str) -> None:
        """Remove `contexts/<context>/` (its history, off the loop) from the daemon's workdir."""
        home = self.staged.history_workdir
        workdir_fs.remove_tree(home.root, home.book(history_file(context_id).rsplit("/", 1)[0]))

    async def _history(self, context_id: str) -> list[Message]:
        """The context's history: from the store where it keeps them (replicas: whichever
        replica ran the context before), else from the workdir file (off the loop)."""
        if self.policy.conversation != "threaded":
            return []
        stored = await self.store.load_history(context_id)
        if stored is None:
            return await asyncio.to_thread(self._load_history, context_id)
        try:
            return [Message(**m) for m in stored]
        except TypeError as exc:
            raise HistoryUnreadable(f"the stored history of context {context_id!r} cannot be read: {exc}") from None

    def _load_history(self, context_id: str) -> list[Message]:
        """The context's stored history (threaded only); `HistoryUnreadable` when it is refused."""
        if self.policy.conversation != "threaded":
            return []
        try:
            return read_history(self.staged, context_id)
        except (OSError, ValueError, TypeError) as exc:
            rel = history_file(context_id)
            raise HistoryUnreadable(f"the history of context {context_id!r} ({rel}) cannot be read: {exc}") from None

    def _record_conversation(self, record: TaskRecord, outcome: TaskOutcome) -> str | None:
        """Threaded capsules keep the context's history (after a successful task only).
        Returns why a file could not be written (the task then fails), else None."""
        if self.policy.conversation != "threaded":
            return None
        root, book = self.staged.history_workdir.root, self.staged.history_workdir.book
        try:
            text = outcome.result_text if outcome.delivered else f"error: {outcome.error}"
            workdir_fs.write_text(root, book(task_result_file(record.id)), text)
            if outcome.delivered:
                workdir_fs.write_text(root, book(history_file(record.context_id)), json_text(_stored_history(outcome)))
        except OSError as exc:
            return f"cannot record the conversation: {exc}"
        return None


async def _settling(sub: Subscription, settled: tuple[TaskState, ...]) -> None:
    """Until `sub` yields a status event in a terminal state or one of `settled` (or ends)."""
    async for event in sub:
        state = event.data.get("status", {}).get("state") if event.type == "status" else None
        if state is not None and (TaskState(state).terminal or TaskState(state) in settled):
            return


def _stored_history(outcome: TaskOutcome) -> list[dict[str, Any]]:
    """The conversation a threaded context keeps: every message but this task's seeded ones."""
    return [dict(m.__dict__) for m in outcome.messages if m.id not in outcome.seeded_ids]


def _leave_input_required(record: TaskRecord) -> None:
    """A reply arrived: the task works again (saved and published by the worker)."""
    record.state = TaskState.WORKING
    record.artifacts = []
    record.status_message = None
