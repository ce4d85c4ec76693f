"""The daemon's side of its WASM worker processes: start them, hand each tool or driver call to
one, answer what the guest asks of its session, and start a worker again when one ends.

Why processes (`docs/decisions.md`, "Issue 29: WASM worker processes"): every call into
wasmtime from Python releases and retakes the interpreter lock, and every store maps and
unmaps its guest's memory; in one process both contend with the event loop and the daemon's
other threads for one lock and one address space. A worker has its own of each, so a call
costs the daemon a socket's write and a few reads.

The caller makes a socket pair for the call, writes a small request into it, passes one end to
the worker over its control socket (with how long the call may wait there for a place), and
reads its own end until the call is done: chunks go to the caller's sinks, an input request is
answered from the caller's session (blocking, as a host import does), an egress denial is
reported to it. The caller is the event loop (`call_tool_on_loop`: no thread waits for the
call, and an input request is answered on a pool thread) once the worker is ready and has the
component; else a pool thread (`call_tool`), which starts a worker or sends the component's
compiled bytes, and waits.
A cancel of the call's guard, or of a guard it is nested in, reaches the worker as a `cancel`
on the control socket, and the worker's own epoch ticker stops the guest; deadlines run there.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from murmurd.host.context import ChunkSink, SessionContext
from murmurd.host.errors import (
    CallCancelled,
    CallTrap,
    CompileError,
    ContractError,
    DeadlineExceeded,
    HookError,
    HostError,
    HostImportError,
    InstantiationError,
    MemoryLimitExceeded,
)
from murmurd.host.host import ComponentHost
from murmurd.host.http_egress import EgressDenial
from murmurd.host.interrupt import CallGuard
from murmurd.host.loaded import LoadedComponent
from murmurd.host.values import ToolInput, ToolResult, ToolStatus
from murmurd.host.wasi import CallGrant
from murmurd.host.workers import frames
from murmurd.host.workers.frames import (
    COMPONENT_MISSING,
    CallRequest, Chunk, Control, Denied, Done, Failed, GrantSpec, GuardSpec, InputRequest, LimitsSpec, Reply,
)
from murmurd.text import valid_text

log = logging.getLogger("murmurd.host.workers")

READY_SECONDS = 120.0  # how long a starting worker may take to say it is ready (a loaded machine)
STOP_SECONDS = 5.0  # how long a closing worker may take to end before it is killed
PRESEND_BYTES = 64 * 1024  # a request this small is written before its socket is passed (a fresh pair's buffer holds it)
OVERDUE_GRACE_SECONDS = 10.0  # past a call's deadline (a guest blocked in a wasi:http wait), then the daemon stops waiting
DECODE_ON_LOOP_BYTES = 64 * 1024  # a frame larger than this is decoded off the loop
BlockingRunner = Callable[..., Awaitable[Any]]  # runs `fn(*args)` on a thread, awaited (the host's pool)
_ERRORS: dict[str, type[HostError]] = {cls.__name__: cls for cls in (
    HostError, ContractError, CompileError, InstantiationError, CallTrap, DeadlineExceeded,
    MemoryLimitExceeded, CallCancelled, HostImportError, HookError)}


def start_workers(host: ComponentHost, count: int) -> None:
    """From now on `host` runs its tool and driver calls in `count` worker processes (none
    for 0), spawned now and ready by their first call."""
    if count > 0:
        host.run_tool_calls_in(WorkerProcesses(count, tick_seconds=host.ticker.tick))


class WorkerGone(Exception):
    """A worker process could not be started, or ended."""


class _ComponentMissing(Exception):
    """The worker has not the call's component (a load that failed, a worker started afresh)."""


@dataclass
class _Worker:
    """One worker process and what the daemon knows of it."""

    process: subprocess.Popen[bytes]
    control: socket.socket
    control_lock: threading.Lock = field(default_factory=threading.Lock)  # sends, and the socket's close
    ready_lock: threading.Lock = field(default_factory=threading.Lock)  # the first word's wait
    components: set[tuple[str, str]] = field(default_factory=set)  # (digest, name) whose compiled form it has
    in_flight: int = 0

    ready: bool = False

    def alive(self) -> bool:
        return self.process.poll() is None

    def await_ready(self, seconds: float = READY_SECONDS) -> None:
        """Wait for the worker's first word (once); a worker that has not said it is ready
        within `seconds` is killed, and the next call starts another."""
        if self.ready:
            return
        with self.ready_lock:  # not the control lock: a send (a cancel from the loop) never waits on this
            if self.ready:
                return
            try:
                self.control.settimeout(seconds)
                message, fds = frames.receive_control(self.control)
                for fd in fds:
                    os.close(fd)
                if message is None or message.op != "ready":
                    raise frames.FrameError("it said something else before it was ready")
            except (OSError, frames.FrameError) as exc:
                self.stop()
                raise WorkerGone(f"the WASM worker process did not start: {exc}") from None
            finally:
                with contextlib.suppress(OSError):  # closed meanwhile (the host closing)
                    self.control.settimeout(None)
            self.ready = True

    def open_call(self, call_id: int, theirs: socket.socket, artifact: str, guards: list[GuardSpec]) -> None:
        wait, deadline = _wait_bound(guards)
        self._control(Control(op="call", id=call_id, artifact=artifact, wait_seconds=wait if math.isfinite(wait) else None,
                              deadline_seconds=deadline if math.isfinite(deadline) else None), [theirs.fileno()])

    def cancel(self, call_id: int, reason: str) -> None:
        """Never blocks (the event loop cancels); a worker that cannot take it is stopped."""
        try:
            self._control(Control(op="cancel", id=call_id, reason=reason))
        except OSError:
            pass  # it has ended, or was stopped just now: so has the call, whose reader is told

    def _control(self, message: Control, fds: list[int] | None = None) -> None:
        """Send without waiting: a worker whose control socket is full has stopped reading it
        (stopped, wedged), and is stopped for good, failing its calls, rather than let the
        sender (the event loop, for a cancel) wait on it."""
        with self.control_lock:
            try:
                frames.send_control(self.control, message, fds, wait=False)
            except BlockingIOError:
                self.stop()
                raise

    def stop(self) -> None:
        """Kill the process (its calls' sockets then end) and reap it."""
        with contextlib.suppress(OSError):
            self.process.kill()
        self.process.wait()

    def close(self) -> None:
        with self.control_lock:
            with contextlib.suppress(OSError):  # wakes a reader waiting for the first word
                self.control.shutdown(socket.SHUT_RDWR)
            self.control.close()  # the worker ends at the end of its control socket
        try:
            self.process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.stop()


class _RemoteCancel:
    """Stands in a guard's engines (`CallGuard.watched_by`): a cancel of the guard, or of one
    it is nested in, is sent to the worker running the call."""

    def __init__(self, worker: _Worker, call_id: int, guard: CallGuard) -> None:
        self.worker, self.call_id, self.guard = worker, call_id, guard

    def advance(self) -> None:
        self.worker.cancel(self.call_id, self.guard.cancel_reason or "cancelled")

    def rearm(self, _guard: CallGuard) -> None:
        """Deadlines run in the worker, which is told nothing of a clock stopped here."""


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

    def _start(self) -> _Worker:
        """Spawn a worker; its readiness is awaited by its first call (`_Worker.await_ready`),
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
        return _Worker(process, ours)

    def _pick(self, seconds: float) -> _Worker:
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

    def _pick_placed(self, key: tuple[str, str]) -> _Worker | None:
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

    def _done(self, worker: _Worker) -> None:
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
                    call = _Call(worker, next(self._ids), loaded, guard, session, on_chunk, on_thinking)
                    return call.run(tool_input, grant, with_bytes=attempt > 0)
                except _ComponentMissing:  # nothing of the call ran: once more, with the component's bytes
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
        sinks run on the loop; an input request is answered on `run_blocking`'s thread."""
        key = (loaded.sha256, loaded.name)
        worker = self._pick_placed(key)
        if worker is None:
            return None
        try:
            call = _Call(worker, next(self._ids), loaded, guard, session, on_chunk, on_thinking)
            return await call.run_on_loop(tool_input, grant, run_blocking)
        except _ComponentMissing:  # nothing of the call ran: the caller makes it again on a thread, with the bytes
            worker.components.discard(key)
            return None
        finally:
            self._done(worker)


class _Call:
    """One call on one worker, from the daemon's side: read by the calling thread (`run`) or
    on the event loop (`run_on_loop`)."""

    def __init__(self, worker: _Worker, call_id: int, loaded: LoadedComponent, guard: CallGuard,
                 session: SessionContext, on_chunk: ChunkSink | None, on_thinking: ChunkSink | None) -> None:
        self.worker, self.call_id, self.loaded, self.guard = worker, call_id, loaded, guard
        self.session, self.on_chunk, self.on_thinking = session, on_chunk, on_thinking
        self.failure: BaseException | None = None  # what a host import raised here
        self.due = time.monotonic() + guard.deadline_seconds + OVERDUE_GRACE_SECONDS  # see `_overdue`

    def run(self, tool_input: ToolInput, grant: CallGrant, *, with_bytes: bool = False) -> ToolResult:
        """The call; the component's compiled bytes go with it the first time (marked sent at
        once, so calls made together send them once) and again, `with_bytes`, when the worker
        had not got them (a call that overtook the one bringing them, a load that failed)."""
        key = (self.loaded.sha256, self.loaded.name)
        sent_before = key in self.worker.components and not with_bytes
        self.worker.components.add(key)  # before the bytes are made: a call a moment later sends none
        compiled = None if sent_before else bytes(self.loaded.component.serialize())
        guards = _guard_specs(self.guard)
        request = frames.encode(CallRequest(
            artifact=self.loaded.name, sha256=self.loaded.sha256, compiled=compiled is not None,
            data=tool_input.data, log_path=tool_input.log_path, grant=_grant_spec(grant), guards=guards))
        early = frames.framed(request) if len(request) <= PRESEND_BYTES else b""
        remote = _RemoteCancel(self.worker, self.call_id, self.guard)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with ours:
            try:
                sent = self._presend(ours, early)  # there when the worker takes the call: it need not wait
                self.worker.open_call(self.call_id, theirs, self.loaded.name, guards)
            except OSError as exc:
                raise InstantiationError(self.loaded.name, f"the WASM worker process is gone: {exc}") from None
            finally:
                theirs.close()
            self.guard.watched_by(remote)  # a cancel that came first is sent now
            try:
                ours.settimeout(max(0.001, self.due - time.monotonic()))  # a stopped worker reads nothing
                try:
                    if early:
                        if sent < len(early):  # nothing more to write when all went early: the worker may be done already
                            ours.sendall(memoryview(early)[sent:])
                    else:
                        frames.send_raw(ours, request)
                    if compiled is not None:
                        frames.send_raw(ours, compiled)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the worker answered before it read the rest (a call that expired or was cancelled queued)
                return self._read(ours)  # its answer, or the end of the socket if it is gone
            except TimeoutError:
                raise self._overdue() from None
            except (OSError, frames.FrameError) as exc:
                raise self._lost(exc) from None
            finally:
                self.guard.unwatched_by(remote)

    @staticmethod
    def _presend(sock: socket.socket, early: bytes) -> int:
        """What of `early` the fresh socket's buffer takes without waiting (no one reads it yet)."""
        if not early:
            return 0
        try:
            return sock.send(early, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return 0

    def _read(self, sock: socket.socket) -> ToolResult:
        while True:
            sock.settimeout(self._left())
            frame = frames.receive(sock, frames.FromWorker)
            if isinstance(frame, InputRequest):
                frames.send(sock, self._answer(frame.prompt))
            elif (result := self._settle(frame)) is not None:
                return result

    async def run_on_loop(self, tool_input: ToolInput, grant: CallGrant, run_blocking: BlockingRunner) -> ToolResult:
        """The call with its socket read on the event loop (`call_tool_on_loop`): no thread
        waits for it. Only for a worker that is ready and has the component (no compiled
        bytes go with it); an input request is answered on `run_blocking`'s thread, as the
        session's `request_input` blocks, and so is the decoding of a large frame."""
        loop = asyncio.get_running_loop()
        guards = _guard_specs(self.guard)
        request = frames.framed(frames.encode(CallRequest(
            artifact=self.loaded.name, sha256=self.loaded.sha256, data=tool_input.data,
            log_path=tool_input.log_path, grant=_grant_spec(grant), guards=guards)))
        remote = _RemoteCancel(self.worker, self.call_id, self.guard)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with ours:
            ours.setblocking(False)
            try:
                sent = self._presend(ours, request)
                self.worker.open_call(self.call_id, theirs, self.loaded.name, guards)
            except OSError as exc:
                raise InstantiationError(self.loaded.name, f"the WASM worker process is gone: {exc}") from None
            finally:
                theirs.close()
            self.guard.watched_by(remote)
            try:
                if sent < len(request):
                    with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # answered before it read all
                        async with asyncio.timeout(self._left()):
                            await loop.sock_sendall(ours, memoryview(request)[sent:])
                reader = frames.LoopReader(ours, loop)
                while True:
                    async with asyncio.timeout(self._left()):
                        body = await reader.receive_raw()
                    frame = (frames.decode(body, frames.FromWorker) if len(body) <= DECODE_ON_LOOP_BYTES
                             else await run_blocking(frames.decode, body, frames.FromWorker))
                    if isinstance(frame, InputRequest):
                        reply = frames.framed(frames.encode(await run_blocking(self._answer, frame.prompt)))
                        async with asyncio.timeout(self._left()):
                            await loop.sock_sendall(ours, reply)
                    elif (result := self._settle(frame)) is not None:
                        return result
            except asyncio.CancelledError:
                self.guard.cancel("cancelled")  # told to the worker while the guard is still watched
                raise
            except TimeoutError:
                raise self._overdue() from None
            except (OSError, frames.FrameError) as exc:
                raise self._lost(exc) from None
            finally:
                self.guard.unwatched_by(remote)

    def _left(self) -> float:
        """What is left of the call's time; a worker that keeps frames coming never lets a
        read wait out its timeout, so past the due no read starts."""
        left = self.due - time.monotonic()
        if left <= 0:
            raise TimeoutError("the call is overdue")
        return left

    def _settle(self, frame: frames._Frame) -> ToolResult | None:
        """A frame other than an input request: a chunk or a refusal reported (None), or the
        call's end (its result, or its error raised)."""
        if isinstance(frame, Chunk):
            self._sink(frame)
        elif isinstance(frame, Denied):
            self._import(lambda: self.session.egress_denied(EgressDenial(**frame.model_dump(exclude={"kind"}))))
        elif isinstance(frame, Done):
            if self.failure is not None:
                raise self._import_error()
            return ToolResult(ToolStatus(frame.status), summary=frame.summary, data=frame.data,
                              data_path=frame.data_path, truncated=frame.truncated,
                              metadata=[(k, v) for k, v in frame.metadata])
        elif isinstance(frame, Failed):
            if frame.error == CompileError.__name__:  # its load failed there: sent again by the next call
                self.worker.components.discard((self.loaded.sha256, self.loaded.name))
            if frame.error == COMPONENT_MISSING:  # nothing of the call ran: it goes again, with the bytes
                raise _ComponentMissing()
            if self.failure is not None:
                raise self._import_error()
            if self.guard.cancel_reason is not None:  # the worker may have met the cancel's effects first
                self.guard.cause = "cancelled"
                raise CallCancelled(self.loaded.name, self.guard.cancel_reason)
            raise self._rebuilt(frame)
        return None

    def _overdue(self) -> HostError:
        """The worker has said nothing past the call's deadline and a grace: the call is
        cancelled there and ends here (its thread is not held for a worker that may be stopped)."""
        self.worker.cancel(self.call_id, "the daemon stopped waiting for it")
        if self.failure is not None:
            return self._import_error()
        self.guard.cause = "deadline"
        return DeadlineExceeded(self.loaded.name, self.guard.deadline_seconds)

    def _sink(self, chunk: Chunk) -> None:
        sink = self.on_thinking if chunk.thinking else self.on_chunk
        if sink is not None and self.failure is None:
            self._import(lambda: sink(chunk.text))

    def _answer(self, prompt: str) -> Reply:
        if self.failure is not None:
            return Reply(failed=True)
        answer: list[str] = []
        asked = time.monotonic()
        self._import(lambda: answer.append(self.session.request_input(prompt)))
        self.due += time.monotonic() - asked  # waiting for a human is not the call's time, here as there
        if self.guard.cancel_reason is not None:  # cancelled meanwhile: the guest never gets the answer
            return Reply(failed=True)
        return Reply(text=valid_text(answer[0])) if answer else Reply(failed=True)  # as in-process

    def _import(self, work: object) -> None:
        """A host import answered here: what it raises ends the call as it would in-process
        (the guest is stopped and the call fails with that exception as its cause)."""
        try:
            work()  # type: ignore[operator]
        except BaseException as exc:  # noqa: BLE001 - every failure (cancellation too) ends the call
            if self.failure is None:
                self.failure = exc
                self.worker.cancel(self.call_id, f"host import failed: {exc!r}")

    def _import_error(self) -> HostImportError:
        return HostImportError(self.loaded.name, f"host import failed: {self.failure}", self.failure)

    def _rebuilt(self, frame: Failed) -> HostError:
        """The worker's typed error, as the same class here with the same message and fields."""
        cls = _ERRORS.get(frame.error, HostError)
        error = cls.__new__(cls)
        HostError.__init__(error, frame.artifact, frame.cause)
        if cls is HostImportError:
            error.failure = None  # type: ignore[attr-defined]
        for name, value in frame.extra.items():
            setattr(error, name, value)
        if isinstance(error, DeadlineExceeded):
            self.guard.cause = "deadline"
        elif isinstance(error, CallCancelled):
            self.guard.cause = "cancelled"
        return error

    def _lost(self, exc: BaseException) -> HostError:
        if self.failure is not None:
            return self._import_error()
        if self.guard.cancel_reason is not None:
            return CallCancelled(self.loaded.name, self.guard.cancel_reason)
        return CallTrap(self.loaded.name, f"the WASM worker process running the call ended ({exc})")


def _grant_spec(grant: CallGrant) -> GrantSpec:
    limits = grant.limits
    text = lambda path: None if path is None else str(path)  # noqa: E731
    return GrantSpec(env=dict(grant.env), preopen=text(grant.preopen), log_path=text(grant.log_path),
                     network=list(grant.network), root=text(grant.root),
                     limits=LimitsSpec(memory_bytes=limits.memory_bytes, table_elements=limits.table_elements,
                                       instances=limits.instances, deadline_seconds=limits.deadline_seconds))


def _wait_bound(guards: list[GuardSpec]) -> tuple[float, float]:
    """How long the call may wait in the worker for a place, as in-process (`ComponentHost._place`):
    its own deadline, or less of what is left of a call it is nested in (`_guard_specs`: the
    call's own first); and the nominal deadline that bound is (what a `DeadlineExceeded` names)."""
    own, *outers = guards
    wait, deadline = own.deadline_seconds, own.deadline_seconds
    for outer in outers:
        if outer.remaining is not None and outer.remaining < wait:
            wait, deadline = max(0.0, outer.remaining), outer.deadline_seconds
    return wait, deadline


def _guard_specs(guard: CallGuard) -> list[GuardSpec]:
    """The call's guard and those it is nested in: nominal deadlines, and what is left of the
    outer ones' (whose clocks run in this process; None where a clock is stopped)."""
    now = time.monotonic()
    specs = [GuardSpec(deadline_seconds=guard.deadline_seconds, remaining=None)]
    outer = guard.parent
    while outer is not None:
        left = outer.deadline_at - now
        specs.append(GuardSpec(deadline_seconds=outer.deadline_seconds, remaining=None if math.isinf(left) else left))
        outer = outer.parent
    return specs
