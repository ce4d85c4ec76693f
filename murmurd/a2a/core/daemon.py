"""`CapsuleDaemon`: everything one served capsule needs, in one object.

It owns the capsule's own session (its workdir and trace), its task store, its event log and its
scheduler: accepted tasks start as soon as the concurrency bound and their context allow
(`admission`), each in its own asyncio task, in a session the `SessionPool` hands out (the
daemon's own with a bound of 1, one per context above it). A task pauses on `request-input`
until a reply routed to it arrives. Where a task runs, and where a reply or cancel for a task
that is not here goes, its `Coordination` says (`LocalCoordination`: everything runs here).
Nothing lives at module level, so one process can serve several capsules.

The class is assembled from its sides: `submitting.Intake` (submissions, reads),
`routing.Routing` (cancels, what the coordination asks), `runs.Runner` (the scheduler and the
task runs), `records.Records` (stored states, histories); this module holds the state they
share and the daemon's own lifecycle.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from murmurd.a2a.core.context_sessions import DEFAULT_KEEP, SessionIndex, WorkdirRetention, recorder
from murmurd.a2a.core.coordination import Coordination, LocalCoordination
from murmurd.a2a.core.lifecycle import LifecyclePolicy
from murmurd.a2a.core.metrics import DaemonMetrics
from murmurd.a2a.core.pool import SessionPool, Slot
from murmurd.a2a.core.records import Records
from murmurd.a2a.core.routing import Routing
from murmurd.a2a.core.runs import CANCEL_WAIT_SECS, INPUT_TIMEOUT, Run, Runner
from murmurd.a2a.core.stream import EventLog
from murmurd.a2a.core.submitting import Intake, Pending
from murmurd.a2a.core.task_log import TaskLog
from murmurd.a2a.core.waiters import TaskWaiters
from murmurd.a2a.core.tasks import TaskMessage, TaskRecord, TaskState, new_context_id, new_message_id, new_task_id
from murmurd.a2a.peers.outbound import PeerHeaders
from murmurd.a2a.peers.peer import PeerClient
from murmurd.a2a.stores.base import TaskStore
from murmurd.host import ComponentHost
from murmurd.host.bridge import LoopBridge
from murmurd.host.context import PeerTask
from murmurd.hooks.dispatcher import LifecycleDispatcher
from murmurd.hooks.loading import hooks_hear
from murmurd.session.failures import SessionEnded, TaskFailed
from murmurd.session.file_process import FileProcess, FileProcessGone
from murmurd.session.services import LoopServices
from murmurd.session.session import Session, TaskSpec
from murmurd.session.task import TaskBegun
from murmurd.staging.session_hold import SessionHold
from murmurd.staging.sessions import open_session_staging, session_staging, session_workdir
from murmurd.staging.stage import StagedCapsule
from murmurd.staging.template import FreshWorkdir, template_key
from murmurd.trace.writer import TraceWriteError, stamped, trace_line
from murmurd.workdir import TASK, new_session_id

__all__ = ["CANCEL_WAIT_SECS", "INPUT_TIMEOUT", "MAX_OPEN_CONTEXTS", "CapsuleDaemon", "Run"]

logger = logging.getLogger("murmurd.a2a")

MAX_OPEN_CONTEXTS = 64  # contexts one peer credential may hold open (an unfinished task in each)
OPENING_WAIT_SECS = 1.0  # a cancelled opening waits this long for its thread (file work) to settle


@dataclass(frozen=True)
class Opened:
    """What the thread opening a context session made: the session, the mark of the first task's
    `a2a_task_session` line in the daemon's trace, or why that line could not be written."""

    session: Session
    mark: int | None = None
    unwritten: TraceWriteError | None = None


def _session_is_made_without_files(staged: StagedCapsule) -> bool:
    """Whether a `Session` of `staged` is made on the loop without reading or opening a file, and
    its first task may begin as its workdir is laid down: no hook hears `on-session-start` (its
    lines precede any task's), no system prompt read from an artifact, no OTel log opened."""
    manifest = staged.manifest
    prompt_file = manifest.inference is not None and bool(manifest.inference.system_prompt_artifact)
    return not (prompt_file or manifest.observability.otel_endpoint or hooks_hear(staged, "on-session-start"))


class CapsuleDaemon(Intake, Routing, Runner, Records):
    def __init__(
        self,
        staged: StagedCapsule,
        host: ComponentHost,
        store: TaskStore,
        *,
        policy: LifecyclePolicy,
        log: EventLog | None = None,
        coordination: Coordination | None = None,
        peer_tokens: PeerHeaders | None = None,
        max_open_contexts: int | None = MAX_OPEN_CONTEXTS,
        session_index: Path | None = None,
        keep_context_sessions: int | None = DEFAULT_KEEP,
        files: FileProcess | None = None,
    ) -> None:
        """`peer_tokens`: the bearer token outbound `message/send` presents to each peer;
        `max_open_contexts`: contexts one peer credential may hold open (None: no bound);
        `session_index`: where context sessions are recorded (murmurd.a2a.core.context_sessions;
        None: their workdirs are never removed), at most `keep_context_sessions` closed ones kept;
        `files`: the process a context session's file work goes to (None: a thread), started and
        closed with the daemon."""
        self.max_open_contexts = max_open_contexts
        self.staged = staged
        self.host = host
        self.metrics = DaemonMetrics()  # this daemon's own registry (GET /metrics)
        self.task_log = TaskLog()  # a log line per task accepted and per task finished
        self.store: TaskStore = self.metrics.timed_store(store)
        self.policy = policy
        self.log = log or EventLog()
        self.coordination: Coordination = coordination or LocalCoordination()  # where its tasks run
        shared = policy.bound == 1
        # With a session per context, the daemon's own session only records acceptance (its
        # trace); the capsule's hooks run in the context sessions, never here.
        self.session = Session(staged, host) if shared else Session(staged, host, dispatcher=LifecycleDispatcher())
        self.peers = PeerClient(self.session.trace, tokens=peer_tokens)
        self._own = Slot(self.session, self.peers)
        index = (SessionIndex(session_index, staged.workdir.root.parent)
                 if session_index is not None and not shared else None)
        self._record_opened, closed = recorder(index)
        self._index = index
        self.files = files
        self._made_without_files: bool | None = None  # `_session_is_made_without_files`, asked once

        async def session_closed(session_id: str) -> None:
            await closed(session_id)
            self.retention.wake()

        self._session_closed = session_closed
        self.pool = SessionPool(self._own if shared else None, capacity=policy.bound,
                                idle_secs=policy.session_idle_secs, open_slot=self._open_context_slot,
                                on_close=session_closed)
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
        self._trace_marks: dict[str, int] = {}  # running task -> the daemon's trace lines to settle at its end
        self._background: list[asyncio.Task[None]] = []
        self._seen_task = False
        self._task_md: set[str] = set()  # ids of the launch task (`--task`)
        self._launch_ended = False
        self._waiters = TaskWaiters()  # blocked callers, woken by their own task's changes
        self._submitting = asyncio.Lock()  # one submission at a time (see `submit`)
        self._placing: dict[str, Pending] = {}  # accepted, being stored and queued (see `submit`)
        self._drained = False  # `stop` has emptied the queue for good
        self._unfinished: list[tuple[TaskRecord, Run]] = []  # runs that ended leaving their task live
        self._ending: set[str] = set()  # taken from `_unfinished`, their end being recorded
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
        if self.files is not None and self.pool.shared is None:
            await self.files.start()
        await self.session.open()
        self._connect(self._own)
        self._start_background(self._work(), "murmurd-session-worker")
        self._start_background(self.retention.run(), "murmurd-workdir-retention")
        await self.coordination.start(self)
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
        if not await self.coordination.claim(record):
            # a claiming pass was first: this daemon's own (then it is queued here already) or another's
            if record not in self._queue and record.id not in self._running:
                logger.warning("launch task %s was claimed elsewhere first; it runs there", record.id)
                self._records.pop(record.id, None)
                self._waiters.wake(record.id)
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

    async def _open_context_slot(self, context_id: str, first: TaskSpec | None) -> Slot:
        """A new session for one context: workdir, Session, its index record and, for `first`,
        its `a2a_task_session` line in the daemon's trace and its beginning (`task_start`,
        `task.md`), made off the loop (file I/O) in one hand-off. Cancelled meanwhile, it waits
        up to `OPENING_WAIT_SECS` for that thread, so that what it wrote is settled before the
        task's end is stored; the session made is closed once it is there."""

        def build() -> Opened:
            session = Session(open_session_staging(self.staged), self.host, files=self.files)
            self._record_opened(session.staged.session_id, context_id)
            if first is None:
                return Opened(session)
            try:  # the daemon's line first: it names the session the task's lines are in
                mark = self._write_task_session(first.task_id, context_id, session.staged.session_id)
            except TraceWriteError as exc:
                return Opened(session, unwritten=exc)
            session.begin_first_task(first)
            return Opened(session, mark)

        async def opening() -> Opened:
            opened = await self._open_in_file_process(context_id, first) if first is not None else None
            return opened if opened is not None else await asyncio.to_thread(build)

        building = asyncio.ensure_future(opening())
        try:
            opened = await asyncio.shield(building)
        except asyncio.CancelledError:
            building.add_done_callback(self._close_unclaimed)
            await asyncio.wait({building}, timeout=OPENING_WAIT_SECS)
            if first is not None and building.done() and not building.cancelled() and building.exception() is None:
                self._settle_at_end(first.task_id, building.result().mark)
                await asyncio.shield(building.result().session.end_unrun(first.task_id))  # before its end is stored
            raise
        session = opened.session
        if first is not None:
            self._settle_at_end(first.task_id, opened.mark)
        slot = Slot(session, PeerClient(session.trace, client=self.peers.client, tokens=self.peers.tokens),
                    announced=first.task_id if first is not None else None)
        try:
            if opened.unwritten is not None:
                raise opened.unwritten
            await session.open()
        except BaseException:
            try:
                await slot.close()
            finally:
                await self._session_closed(session.staged.session_id)
            raise
        self._connect(slot)
        return slot

    async def _open_in_file_process(self, context_id: str, first: TaskSpec) -> Opened | None:
        """`build`'s work with the file process laying the workdir down and beginning `first` (no
        thread of the daemon wakes); None when it is not taken (no process, a request too large,
        a session that reads files as it is made, a template not the process's, a process that
        ended before it answered)."""
        files = self.files
        if files is None or not files.running or files.template_key != template_key(self.staged):
            return None
        if self._made_without_files is None:
            self._made_without_files = _session_is_made_without_files(self.staged)
        if not self._made_without_files:
            return None
        session_id = new_session_id()
        root = session_workdir(self.staged, session_id).root
        start = stamped(session_id, "task_start", first.start_fields())
        index = self._index
        try:
            made = await files.open_session(root, session_id, index.index_dir if index is not None else None,
                                            context_id, trace_line(start), first.text)
        except FileProcessGone as exc:  # what it made, if anything, is left to the sweeps
            logger.warning("context session %s: %s; opened on a thread instead", session_id, exc)
            return None
        if made is None:
            return None
        fresh = FreshWorkdir(root, SessionHold.of_held(made.root_fd), made.trace_fd, () if made.trace_error else (start,))
        session = Session(session_staging(self.staged, session_id, fresh), self.host, files=files)
        if made.index_error is not None:  # as `recorder` does: logged, never the task's
            logger.error("recording context session %s failed: %s", session_id, made.index_error)
        elif index is not None:
            index.recorded(session_id, context_id)
        failure: TaskFailed | None = None
        if made.trace_error is not None:
            session.trace.failed_elsewhere("task_start", made.trace_error)
            failure = SessionEnded(session.trace.failure or made.trace_error)
        elif made.task_error is not None:
            failure = TaskFailed(f"cannot write {TASK}: {made.task_error}")
        session.begun_elsewhere(TaskBegun(first.task_id, made.trace_error is None, failure))
        try:  # the daemon's line: it names the session the task's lines are in
            return Opened(session, self._write_task_session(first.task_id, context_id, session_id))
        except TraceWriteError as exc:
            return Opened(session, unwritten=exc)

    def _close_unclaimed(self, building: asyncio.Future[Opened]) -> None:
        """A context session made for a task cancelled while it was made: closed, as the pool
        closes one (its begun task ends in its trace, its workdir goes in time)."""
        if building.cancelled():
            return
        if building.exception() is not None:
            logger.error("a context session for a cancelled task could not be made: %s", building.exception())
            return
        session = building.result().session

        async def close() -> None:
            try:
                try:
                    await session.close()
                finally:
                    await self._session_closed(session.staged.session_id)
            except Exception:  # a background task's exception would stop the daemon
                logger.exception("session %s did not close cleanly", session.staged.session_id)

        self._start_background(close(), f"murmurd-close-{session.staged.session_id}")

    def _start_background(self, work: Any, name: str) -> None:
        task = asyncio.create_task(work, name=name)
        task.add_done_callback(self._on_background_done)
        self._background.append(task)

    def _on_background_done(self, task: asyncio.Task[None]) -> None:
        """A background task that dies of an exception cannot go unnoticed: it is logged, and
        the daemon stops and `murmurd serve` exits non-zero (a supervisor restarts it)."""
        if task.cancelled() or task.exception() is None:
            self._background.remove(task)  # done: nothing to cancel or wait for at the stop
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
        placing = [asyncio.ensure_future(p.written.wait()) for p in self._placing.values()]
        if placing:  # accepted before the stop: queued (and canceled below) once written, or refused
            await asyncio.wait(placing, timeout=grace_seconds)
            for waiting in placing:
                waiting.cancel()
        runs = [run.task for run in self._running.values() if run.task is not None]
        if runs:
            await asyncio.wait(runs, timeout=grace_seconds)
        still = list(self._running.values())
        self.stop_summary = {"drained": len(runs) - len(still), "canceled_running": len(still),
                             "canceled_queued": len(self._queue) + len(self.coordination.deferred())}
        await asyncio.gather(*(self._cancel_run(run, "canceled: daemon shutting down") for run in still))
        while self._unfinished:  # canceled before their first step: the scheduler is not there to end them
            record, run = self._unfinished.pop(0)
            self._ending.add(record.id)
            await self._end_unfinished_marked(record, run)
        self._queue.extendleft(reversed(self.coordination.take_deferred()))  # they never started either
        while self._queue:
            await self._give_up_queued(self._queue.popleft())
        self._drained = True  # a placement written from now on gives itself up (`_reserve`)
        await self.coordination.stop()
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if self.files is not None:  # first: a session's close waits for its trace, which it may hold
            await self.files.close()
        await self.pool.close_all()
        await self.retention.settle()  # the close times just held, on disk for the next daemon
        if self.pool.shared is None:
            await self._own.close()
        if close_store:
            await self.store.close()

    async def _give_up_queued(self, record: TaskRecord) -> None:
        """A queued task the stopping daemon will not start: handed back to another daemon
        (forgotten here) or canceled."""
        self._traceparents.pop(record.id, None)
        if await self.coordination.hand_back(record):
            self._records.pop(record.id, None)
            self._waiters.wake(record.id)
            return
        await self._finish_quietly(record, TaskState.CANCELED, "canceled: daemon shutting down")

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

