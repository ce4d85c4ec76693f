"""One tool or driver call on a WASM worker process, from the daemon's side (`processes.py`
picks the worker): the call's own socket, its request, and what comes back until its end.

The caller makes a socket pair for the call, writes a small request into it, passes one end to
the worker over its control socket (`link.WorkerLink.open_call`), and reads its own end until
the call is done: chunks go to the caller's sinks, an input request is answered from the
caller's session (blocking, as a host import does), an egress refusal is reported to it. The
reader is a pool thread (`Call.run`, which can also send the component's compiled bytes) or the
event loop (`Call.run_on_loop`); both keep one set of rules (`_settle`) and one bound (`due`:
the call's deadline and a grace, past which no read starts). A cancel of the call's guard, or of
a guard it is nested in, reaches the worker as a `cancel` on the control socket, and the
worker's own epoch ticker stops the guest; deadlines run there. Everything the worker sends is
read as a hostile peer's: bounded frames, known kinds, known error fields.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
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
from murmurd.host.http_egress import EgressDenial
from murmurd.host.interrupt import CallGuard
from murmurd.host.loaded import LoadedComponent
from murmurd.host.values import ToolInput, ToolResult, ToolStatus
from murmurd.host.wasi import CallGrant
from murmurd.host.workers import frames
from murmurd.host.workers.frames import (
    COMPONENT_MISSING,
    CallRequest, Chunk, Denied, Done, Failed, GrantSpec, GuardSpec, InputRequest, LimitsSpec, Reply,
)
from murmurd.host.workers.link import WorkerLink
from murmurd.text import valid_text

PRESEND_BYTES = 64 * 1024  # a request this small is written before its socket is passed (a fresh pair's buffer holds it)
OVERDUE_GRACE_SECONDS = 10.0  # past a call's deadline (a guest blocked in a wasi:http wait), then the daemon stops waiting
DECODE_ON_LOOP_BYTES = 64 * 1024  # a frame larger than this is decoded off the loop
FRAMES_PER_TURN = 16  # frames the loop's reader handles before it lets the loop run others
BlockingRunner = Callable[..., Awaitable[Any]]  # runs `fn(*args)` on a thread, awaited (the host's pool)
_ERRORS: dict[str, type[HostError]] = {cls.__name__: cls for cls in (
    HostError, ContractError, CompileError, InstantiationError, CallTrap, DeadlineExceeded,
    MemoryLimitExceeded, CallCancelled, HostImportError, HookError)}


class ComponentMissing(Exception):
    """The worker has not the call's component (a load that failed, a worker started afresh)."""


class RemoteCancel:
    """Stands in a guard's engines (`CallGuard.watched_by`): a cancel of the guard, or of one
    it is nested in, is sent to the worker running the call."""

    def __init__(self, worker: WorkerLink, call_id: int, guard: CallGuard) -> None:
        self.worker, self.call_id, self.guard = worker, call_id, guard

    def advance(self) -> None:
        self.worker.cancel(self.call_id, self.guard.cancel_reason or "cancelled")

    def rearm(self, _guard: CallGuard) -> None:
        """Deadlines run in the worker, which is told nothing of a clock stopped here."""


class Call:
    """One call on one worker, from the daemon's side: read by the calling thread (`run`) or
    on the event loop (`run_on_loop`). `due` bounds it (its deadline and a grace; a second
    attempt of one call keeps the first's)."""

    def __init__(self, worker: WorkerLink, call_id: int, loaded: LoadedComponent, guard: CallGuard,
                 session: SessionContext, on_chunk: ChunkSink | None, on_thinking: ChunkSink | None,
                 *, due: float | None = None) -> None:
        self.worker, self.call_id, self.loaded, self.guard = worker, call_id, loaded, guard
        self.session, self.on_chunk, self.on_thinking = session, on_chunk, on_thinking
        self.failure: BaseException | None = None  # what a host import raised here
        self.due = due if due is not None else time.monotonic() + guard.deadline_seconds + OVERDUE_GRACE_SECONDS
        self.heard = False  # the worker has sent more than the call's end: a chunk, a refusal, a question
        self.release: Callable[[], None] | None = None  # ends the worker's count of the call (the loop's reader)

    def run(self, tool_input: ToolInput, grant: CallGrant, *, with_bytes: bool = False) -> ToolResult:
        """The call; the component's compiled bytes go with it the first time (marked sent at
        once, so calls made together send them once) and again, `with_bytes`, when the worker
        had not got them (a call that overtook the one bringing them, a load that failed)."""
        key = (self.loaded.sha256, self.loaded.name)
        sent_before = key in self.worker.components and not with_bytes
        self.worker.components.add(key)  # before the bytes are made: a call a moment later sends none
        compiled = None if sent_before else bytes(self.loaded.component.serialize())
        guards = guard_specs(self.guard)
        request = frames.encode(CallRequest(
            artifact=self.loaded.name, sha256=self.loaded.sha256, compiled=compiled is not None,
            data=tool_input.data, log_path=tool_input.log_path, grant=grant_spec(grant), guards=guards))
        early = frames.framed(request) if len(request) <= PRESEND_BYTES else b""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with ours:
            sent = self._open(ours, theirs, early, guards)
            with self._watched():
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

    def _open(self, ours: socket.socket, theirs: socket.socket, early: bytes, guards: list[GuardSpec]) -> int:
        """Pass the call's socket to the worker, with what of `early` its buffer takes first
        (there when the worker takes the call: it need not wait); how much that was."""
        try:
            sent = self._presend(ours, early)
            self.worker.open_call(self.call_id, theirs, self.loaded.name, guards)
        except OSError as exc:
            raise InstantiationError(self.loaded.name, f"the WASM worker process is gone: {exc}") from None
        finally:
            theirs.close()
        return sent

    @contextlib.contextmanager
    def _watched(self) -> Iterator[None]:
        """While a reader waits for the call: the guard's cancels reach the worker (one that
        came first is sent now), and how the wait ends becomes the call's error."""
        remote = RemoteCancel(self.worker, self.call_id, self.guard)
        self.guard.watched_by(remote)
        try:
            yield
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
        """The call with its socket read on the event loop (`WorkerProcesses.call_tool_on_loop`):
        no thread waits for it. Only for a worker that is ready and has the component (no
        compiled bytes go with it); an input request is answered on `run_blocking`'s thread, as
        the session's `request_input` blocks, and so is the decoding of a large frame. The loop
        gets a turn every `FRAMES_PER_TURN` frames: a worker keeping the socket full of small
        frames never holds it. Cancelled, the call's guard is cancelled (the worker is told)
        and its socket read to the call's end by a task of its own, which then `release`s the
        worker's count of it: a worker still ending a guest is not taken for idle."""
        try:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        except OSError as exc:  # out of descriptors: this call fails, the daemon goes on
            if self.release is not None:
                self.release()
            raise InstantiationError(self.loaded.name, f"no socket for the call: {exc}") from None
        reader = frames.LoopReader(ours, asyncio.get_running_loop())
        drained = False
        try:
            guards = guard_specs(self.guard)
            request = frames.framed(frames.encode(CallRequest(
                artifact=self.loaded.name, sha256=self.loaded.sha256, data=tool_input.data,
                log_path=tool_input.log_path, grant=grant_spec(grant), guards=guards)))
            ours.setblocking(False)
            sent = self._open(ours, theirs, request, guards)
            with self._watched():
                try:
                    return await self._exchange(reader, request, sent, run_blocking)
                except asyncio.CancelledError:
                    self.guard.cancel("cancelled")  # told to the worker while the guard is still watched
                    drained = self._drain_later(reader)
                    raise
        finally:
            theirs.close()  # the worker's end, passed to it or not: ours no longer
            if not drained:
                ours.close()
                if self.release is not None:
                    self.release()

    async def _exchange(self, reader: frames.LoopReader, request: bytes, sent: int,
                        run_blocking: BlockingRunner) -> ToolResult:
        """The rest of the request written, then the worker's frames read to the call's end,
        an input request answered on a thread; the loop gets a turn every few frames."""
        loop = asyncio.get_running_loop()
        if sent < len(request):
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # answered before it read all
                async with asyncio.timeout(self._left()):
                    await loop.sock_sendall(reader.sock, memoryview(request)[sent:])
        for count in itertools.count(1):
            if count % FRAMES_PER_TURN == 0:
                await asyncio.sleep(0)
            async with asyncio.timeout(self._left()):
                body = await reader.receive_raw()
            frame = (frames.decode(body, frames.FromWorker) if len(body) <= DECODE_ON_LOOP_BYTES
                     else await run_blocking(frames.decode, body, frames.FromWorker))
            if isinstance(frame, InputRequest):
                reply = frames.framed(frames.encode(await run_blocking(self._answer, frame.prompt)))
                async with asyncio.timeout(self._left()):
                    await loop.sock_sendall(reader.sock, reply)
            elif (result := self._settle(frame)) is not None:
                return result
        raise AssertionError("unreachable")

    def _drain_later(self, reader: frames.LoopReader) -> bool:
        """Read the cancelled call's socket to its end (the worker's close after its answer, or
        the call's due) on a task of its own, then close it and release the call; False if no task
        could start (the loop closing): the caller does both now. The ending is the task's done
        callback, which runs however the task ends (cancelled before its first step too)."""
        try:
            task = asyncio.get_running_loop().create_task(self._drain(reader))
        except RuntimeError:
            return False
        self.worker.drains.add(task)

        def ended(_task: asyncio.Task[None]) -> None:
            self.worker.drains.discard(task)
            reader.sock.close()
            if self.release is not None:
                self.release()

        task.add_done_callback(ended)
        return True

    async def _drain(self, reader: frames.LoopReader) -> None:
        with contextlib.suppress(TimeoutError, OSError, frames.FrameError):
            for count in itertools.count(1):
                if count % FRAMES_PER_TURN == 0:
                    await asyncio.sleep(0)
                async with asyncio.timeout(self._left()):
                    await reader.receive_raw()  # whatever it is: the worker closes the socket at the call's end

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
            self.heard = True
            self._sink(frame)
        elif isinstance(frame, Denied):
            self.heard = True
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
            if frame.error == COMPONENT_MISSING:
                if self.heard:  # "nothing ran" after the guest spoke: not a call to make again
                    raise CallTrap(self.loaded.name, "the WASM worker process said the component was missing "
                                                     "after the call had run")
                raise ComponentMissing()  # nothing of the call ran: it goes again, with the bytes
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
        self.heard = True
        if self.failure is not None or self.guard.cancel_reason is not None:  # a cancelled call asks no one
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
            if name in frames.ERROR_FIELDS:  # the fields the errors add, never a name the worker chooses
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


def grant_spec(grant: CallGrant) -> GrantSpec:
    limits = grant.limits
    text = lambda path: None if path is None else str(path)  # noqa: E731
    return GrantSpec(env=dict(grant.env), preopen=text(grant.preopen), log_path=text(grant.log_path),
                     network=list(grant.network), root=text(grant.root),
                     limits=LimitsSpec(memory_bytes=limits.memory_bytes, table_elements=limits.table_elements,
                                       instances=limits.instances, deadline_seconds=limits.deadline_seconds))


def guard_specs(guard: CallGuard) -> list[GuardSpec]:
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
