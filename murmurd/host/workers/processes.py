"""The daemon's side of its WASM worker processes: start them, hand each tool or driver call to
one, and start a worker again when one ends.

Why processes (`docs/decisions.md`, "Issue 29: WASM worker processes"): every call into
wasmtime from Python releases and retakes the interpreter lock, and every store maps and
unmaps its guest's memory; in one process both contend with the event loop and the daemon's
other threads for one lock and one address space. A worker has its own of each, so a call
costs the daemon a socket's write and a few reads.

A call goes to the least busy worker. Once that worker is ready and has the call's component,
the event loop makes the call and reads its socket (`call_tool_on_loop`: no thread waits for
it); else a pool thread does (`call_tool`), which waits for a starting worker or sends the
component's compiled bytes. A call's own rules are `calls.py`'s; a worker's link, `link.py`'s.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import socket
import subprocess
import sys
import threading

from murmurd.host.context import ChunkSink, SessionContext
from murmurd.host.errors import InstantiationError
from murmurd.host.host import ComponentHost
from murmurd.host.interrupt import CallGuard
from murmurd.host.loaded import LoadedComponent
from murmurd.host.values import ToolInput, ToolResult
from murmurd.host.wasi import CallGrant
from murmurd.host.workers.calls import OVERDUE_GRACE_SECONDS, BlockingRunner, Call, ComponentMissing
from murmurd.host.workers.link import READY_SECONDS, WorkerGone, WorkerLink

__all__ = ["WorkerGone", "WorkerProcesses", "start_workers"]

log = logging.getLogger("murmurd.host.workers")


def start_workers(host: ComponentHost, count: int) -> None:
    """From now on `host` runs its tool and driver calls in `count` worker processes (none
    for 0), spawned now and ready by their first call."""
    if count > 0:
        host.run_tool_calls_in(WorkerProcesses(count, tick_seconds=host.ticker.tick))


class WorkerProcesses:
    """`count` worker processes, started at once; tool and driver calls go to the one with the
    fewest running. A worker that ended is started again for the next call."""

    def __init__(self, count: int, *, tick_seconds: float = 0.01) -> None:
        if count < 1:
            raise ValueError("at least one worker process")
        self.tick_seconds = tick_seconds
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._closed = False
        self.started = 0  # worker processes started, restarts included (what a test reads)
        self._workers = [self._start() for _ in range(count)]

    @property
    def pids(self) -> list[int]:
        return [worker.process.pid for worker in self._workers]

    def _start(self) -> WorkerLink:
        """Spawn a worker; its readiness is awaited by its first call (`WorkerLink.await_ready`),
        so a daemon's start-up and the worker's imports overlap."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "murmurd.host.workers.worker", str(theirs.fileno()), repr(self.tick_seconds)],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                start_new_session=True,  # a terminal's Ctrl-C is the daemon's to act on, not the worker's
                env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
            )
        except OSError as exc:
            ours.close()
            raise WorkerGone(f"cannot start a WASM worker process: {exc}") from None
        finally:
            theirs.close()
        self.started += 1
        return WorkerLink(process, ours)

    def _pick(self, seconds: float) -> WorkerLink:
        """The least busy worker, started again if it ended, ready within `seconds`."""
        with self._lock:
            if self._closed:
                raise WorkerGone("the WASM worker processes are closed")
            for index, worker in enumerate(self._workers):
                if not worker.alive():
                    log.warning("WASM worker process %d ended (%s); starting another",
                                worker.process.pid, worker.process.returncode)
                    with worker.control_lock:
                        worker.control.close()
                    self._workers[index] = self._start()
            chosen = min(self._workers, key=lambda w: w.in_flight)
            chosen.in_flight += 1
        try:
            chosen.await_ready(min(READY_SECONDS, seconds))
        except WorkerGone:
            self._done(chosen)
            raise
        return chosen

    def _pick_placed(self, key: tuple[str, str]) -> WorkerLink | None:
        """The least busy worker if it is ready and has the component `key` names, counted
        in; None where only a thread may go on (a worker to start or to wait for, bytes to
        send): nothing here waits."""
        with self._lock:
            if self._closed or not all(worker.alive() for worker in self._workers):
                return None
            chosen = min(self._workers, key=lambda w: w.in_flight)
            if not chosen.ready or key not in chosen.components:
                return None
            chosen.in_flight += 1
            return chosen

    def _done(self, worker: WorkerLink) -> None:
        with self._lock:
            worker.in_flight -= 1

    def close(self) -> None:
        with self._lock:
            self._closed = True
            workers, self._workers = self._workers, []
        for worker in workers:
            worker.close()

    def call_tool(self, loaded: LoadedComponent, tool_input: ToolInput, *, grant: CallGrant,
                  session: SessionContext, on_chunk: ChunkSink | None, on_thinking: ChunkSink | None,
                  guard: CallGuard) -> ToolResult:
        """Run `murmur:tool/run#run` of a tool or driver in a worker; blocks this thread."""
        try:  # a worker's start counts against the call's deadline (and the grace the reader gives it)
            worker = self._pick(guard.deadline_seconds + OVERDUE_GRACE_SECONDS)
        except WorkerGone as exc:
            raise InstantiationError(loaded.name, str(exc)) from None
        try:
            for attempt in range(2):
                try:
                    call = Call(worker, next(self._ids), loaded, guard, session, on_chunk, on_thinking)
                    return call.run(tool_input, grant, with_bytes=attempt > 0)
                except ComponentMissing:  # nothing of the call ran: once more, with the component's bytes
                    if attempt:
                        raise InstantiationError(loaded.name, "the WASM worker process lost its compiled form twice") from None
            raise AssertionError("unreachable")
        finally:
            self._done(worker)

    async def call_tool_on_loop(self, loaded: LoadedComponent, tool_input: ToolInput, *, grant: CallGrant,
                                session: SessionContext, on_chunk: ChunkSink | None, on_thinking: ChunkSink | None,
                                guard: CallGuard, run_blocking: BlockingRunner) -> ToolResult | None:
        """`call_tool` with the call's socket read on the event loop, so no thread waits for
        it (`docs/decisions.md`, "Issue 29: a worker call read on the loop"); None where it
        needs a thread (`_pick_placed`), and the caller then makes it as `call_tool`. The
        sinks run on the loop; an input request is answered on `run_blocking`'s thread. A
        worker that had lost the component gets it again on a thread, in the same call's time."""
        key = (loaded.sha256, loaded.name)
        worker = self._pick_placed(key)
        if worker is None:
            return None
        call = Call(worker, next(self._ids), loaded, guard, session, on_chunk, on_thinking)
        call.release = functools.partial(self._done, worker)  # once the call has ended there
        try:
            return await call.run_on_loop(tool_input, grant, run_blocking)
        except ComponentMissing:  # nothing of it ran; the worker's count was released
            pass
        again = Call(worker, next(self._ids), loaded, guard, session, on_chunk, on_thinking, due=call.due)
        return await run_blocking(self._with_bytes, worker, again, tool_input, grant)

    def _with_bytes(self, worker: WorkerLink, call: Call, tool_input: ToolInput, grant: CallGrant) -> ToolResult:
        """A call made again with the component's bytes, on this thread, counted on `worker`."""
        with self._lock:
            worker.in_flight += 1
        try:
            return call.run(tool_input, grant, with_bytes=True)
        except ComponentMissing:
            raise InstantiationError(call.loaded.name, "the WASM worker process lost its compiled form twice") from None
        finally:
            self._done(worker)
