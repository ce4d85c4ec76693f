"""A WASM worker process: a `ComponentHost` of its own that runs the daemon's tool and driver
calls, so their guest code, their stores' memory and wasmtime's calls into Python run under
another interpreter lock and in another address space than the daemon's loop.

`python -m murmurd.host.workers.worker FD`: FD is the control socket (`SOCK_SEQPACKET`) the
daemon passed. Each `call` on it brings the call's own socket; the call is queued until a
thread holds one of the host's run-gate places for it (`runners.py`; a cancel or the end of its
deadline answers it where it waits), and runs in a fresh store as any call does, with the
limits, preopen, log and egress
policy of its grant (the paths are the daemon's: same user, same file system, reached through
`workdir_fs` without following a symlink). What the guest asks of its session (a chunk, a
reply, a refused request) goes back on the call's socket. The process ends when the daemon
closes the control socket; it ignores SIGINT and SIGTERM, which a terminal or a service
manager sends the whole group, so that the daemon can drain its running calls first.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import select
import signal
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from murmurd.host.context import ImportFailed, SessionContext
from murmurd.host.errors import CallCancelled, DeadlineExceeded, HostError
from murmurd.host.host import ComponentHost
from murmurd.host.http_egress import EgressDenial
from murmurd.host.interrupt import CallGuard
from murmurd.host.limits import Limits
from murmurd.host.loaded import LoadedComponent
from murmurd.host.run_gate import never
from murmurd.host.values import ToolInput
from murmurd.host.wasi import CallGrant
from murmurd.host.workers import frames
from murmurd.host.workers.runners import PlaceRunners
from murmurd.host.workers.frames import COMPONENT_MISSING, CallRequest, Denied, Done, Failed, InputRequest, Reply

log = logging.getLogger("murmurd.host.workers")

MAX_EARLY_CANCELS = 4096  # cancels kept for calls not (or no longer) running here
LOAD_WAIT_SECONDS = 120.0  # a call may wait this long for another call's bytes of its component to load
MAX_POLL_MS = 3_600_000  # the control loop looks at its queue at least this often (poll's limit is ~24.8 days)


class _DaemonSide(SessionContext):
    """The session as a tool or driver reaches it from here: over the call's socket."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def request_input(self, prompt: str) -> str:
        frames.send(self._sock, InputRequest(prompt=prompt))
        reply = frames.receive(self._sock, frames.ToWorker)
        if not isinstance(reply, Reply) or reply.failed:
            raise ImportFailed("request-input failed in the daemon")
        return reply.text

    def egress_denied(self, denial: EgressDenial) -> None:
        frames.send(self._sock, Denied(**denial.fields()))


@dataclass
class _Queued:
    """A call the daemon passed, not yet started: it waits for a place (`runners.py`) until
    `expires_at`, and a cancel or that time ends it here, answered without a place."""

    call_id: int
    sock: socket.socket
    artifact: str
    arrived: float
    expires_at: float
    deadline_seconds: float
    work: Callable[[], None] = lambda: None


class Worker:
    """The calls of one daemon: components by digest, queued calls and running calls' guards by id."""

    def __init__(self, control: socket.socket, host: ComponentHost) -> None:
        self.control = control
        self.host = host
        self.components: dict[tuple[str, str], LoadedComponent] = {}  # by (digest, the artifact's name)
        self._loaded = threading.Condition()
        self._loading: Counter[tuple[str, str]] = Counter()  # calls bringing a component's bytes now
        self._queued: dict[int, _Queued] = {}  # calls waiting for a place; whoever pops one owns it
        self._guards: dict[int, CallGuard] = {}
        self._early: dict[int, str] = {}  # cancels that came before their call's guard
        self._guards_lock = threading.Lock()
        self._calls = PlaceRunners(host.gate)  # runners.py: calls queued until a place is free

    def serve(self) -> None:
        frames.send_control(self.control, frames.Control(op="ready"))
        poller = select.poll()
        poller.register(self.control, select.POLLIN)
        while True:
            wait = self._until_next_expiry()
            if wait is not None and not poller.poll(wait):  # with nothing queued, the receive waits
                self._expire_queued()
                continue
            try:
                message, fds = frames.receive_control(self.control)
            except frames.FrameError:
                return  # the daemon is gone or closed us: nothing more will come
            try:
                self._handle(message, fds)
                self._expire_queued()
            except Exception:  # noqa: BLE001 - one message's defect ends neither the worker nor its calls
                log.exception("a control message failed in the WASM worker")

    def _handle(self, message: frames.Control | None, fds: list[int]) -> None:
        if message is not None and message.op == "call" and fds:
            self._queue(message, socket.socket(fileno=fds[0]))
            fds = fds[1:]
        elif message is not None and message.op == "cancel":
            self._cancel(message.id, message.reason or "cancelled")
        for fd in fds:  # whatever else came (a malformed message's are closed already)
            os.close(fd)

    def _queue(self, message: frames.Control, sock: socket.socket) -> None:
        now = time.monotonic()
        wait = message.wait_seconds if message.wait_seconds is not None else math.inf  # None: no deadline bounds it
        queued = _Queued(message.id, sock, message.artifact or "?", now, now + max(0.0, wait),
                         message.deadline_seconds if message.deadline_seconds is not None else wait)
        queued.work = functools.partial(self._start_queued, queued)
        with self._guards_lock:
            self._queued[queued.call_id] = queued
        try:
            self._calls.submit(queued.work)
        except RuntimeError as exc:  # no thread could start for it (and none runs to take it)
            if self._take_queued(queued.call_id) is not None:
                self._answer_unstarted(queued, Failed(
                    error="InstantiationError", artifact=queued.artifact,
                    cause=f"the WASM worker could not start a thread for the call: {exc}"))

    def _take_queued(self, call_id: int) -> _Queued | None:
        with self._guards_lock:
            return self._queued.pop(call_id, None)

    def _until_next_expiry(self) -> int | None:
        """Milliseconds until the first queued call's wait runs out (None: nothing queued)."""
        with self._guards_lock:
            first = min((q.expires_at for q in self._queued.values()), default=math.inf)
        if math.isinf(first):
            return None
        return min(MAX_POLL_MS, max(0, math.ceil((first - time.monotonic()) * 1000)))

    def _expire_queued(self) -> None:
        now = time.monotonic()
        with self._guards_lock:
            expired = [q for q in self._queued.values() if q.expires_at <= now]
            for queued in expired:
                del self._queued[queued.call_id]
        for queued in expired:
            self._answer_unstarted(queued, _failed(DeadlineExceeded(queued.artifact, queued.deadline_seconds)))

    def _answer_unstarted(self, queued: _Queued, failed: Failed) -> None:
        """End a call that never started: out of the queue, its answer sent (a small frame on a
        socket nothing was written to yet: it never waits), its socket closed."""
        self._calls.remove(queued.work)
        with queued.sock, contextlib.suppress(OSError, frames.FrameError):
            frames.send(queued.sock, failed)

    def _cancel(self, call_id: int, reason: str) -> None:
        queued = self._take_queued(call_id)
        if queued is not None:
            self._answer_unstarted(queued, _failed(CallCancelled(queued.artifact, reason)))
            return
        with self._guards_lock:
            guard = self._guards.get(call_id)
            if guard is None:  # starting now, or over: kept a while, the oldest dropped first
                self._early[call_id] = reason
                while len(self._early) > MAX_EARLY_CANCELS:
                    del self._early[next(iter(self._early))]
        if guard is not None:
            guard.cancel(reason)

    def _start_queued(self, queued: _Queued) -> None:
        if self._take_queued(queued.call_id) is not None:  # else cancelled or expired: answered already
            self._serve_call(queued.call_id, queued.sock, queued.arrived)

    def _serve_call(self, call_id: int, sock: socket.socket, arrived: float) -> None:
        request: object = None
        with sock:
            try:
                self._await_request(sock)
                request = frames.receive(sock, frames.ToWorker)
                if isinstance(request, CallRequest):
                    frames.send(sock, self._outcome(call_id, request, sock, arrived))
            except (frames.FrameError, OSError):
                pass  # the daemon's end is gone (its call was abandoned): nothing to tell
            except Exception as exc:  # noqa: BLE001 - the call fails; the worker and its other calls go on
                with contextlib.suppress(Exception):
                    frames.send(sock, Failed(error="HostError", artifact=getattr(request, "artifact", "?"),
                                             cause=f"the WASM worker failed: {type(exc).__name__}: {exc}"[:4096]))
            finally:
                with self._guards_lock:
                    self._guards.pop(call_id, None)
                    self._early.pop(call_id, None)

    def _await_request(self, sock: socket.socket) -> None:
        """A small request is written before its socket is passed; a large one after. While none
        of it is here the place is given up (`RunGate.away`), so no other call waits on a socket."""
        try:
            if sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT):
                return
        except BlockingIOError:
            pass
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        with self.host.gate.away(never):
            poller.poll()  # readable, or closed: the read that follows tells which

    def _outcome(self, call_id: int, request: CallRequest, sock: socket.socket, arrived: float) -> Done | Failed:
        guard = _guard_chain(request, arrived)
        with self._guards_lock:
            self._guards[call_id] = guard
            early = self._early.pop(call_id, None)
        if early is not None:  # cancelled as it started: its component is not even loaded
            guard.cancel(early)
            return _failed(CallCancelled(request.artifact, early))
        loaded = self._component(request, sock)
        if isinstance(loaded, Failed):
            return loaded
        with contextlib.ExitStack() as outer_clocks:
            for outer in _ancestors(guard):  # the ticker wakes at their deadlines too
                outer_clocks.enter_context(self.host.ticker.active(outer))
            return self._run(loaded, request, guard, sock)

    def _component(self, request: CallRequest, sock: socket.socket) -> LoadedComponent | Failed:
        """The call's component: loaded from the bytes that follow its request, else as loaded
        for an earlier call (waiting for one whose bytes are arriving or loading now). Missing
        altogether (a load that failed, a worker started afresh, a call that overtook the one
        bringing them), it is a `ComponentMissing` failure: the daemon sends the call again with
        the bytes; nothing of the call has run."""
        key = (request.sha256, request.artifact)  # one artifact's bytes under two names: two entries
        with self._loaded:
            if not request.compiled:
                self._loaded.wait_for(lambda: key in self.components or not self._loading[key], LOAD_WAIT_SECONDS)
                found = self.components.get(key)
                return found if found is not None else Failed(
                    error=COMPONENT_MISSING, artifact=request.artifact, cause="its compiled form is not here")
            self._loading[key] += 1  # from before its bytes arrive: a call without them waits for them
        loaded: LoadedComponent | None = None
        try:
            compiled = frames.receive_raw(sock)  # read off the socket in any case
            with self._loaded:
                loaded = self.components.get(key)
            if loaded is None:
                loaded = self.host.load_compiled(bytes(compiled), name=request.artifact, sha256=request.sha256)
        except HostError as exc:
            return _failed(exc)
        finally:
            with self._loaded:  # loaded or not, in one step: a waiter sees one or the other
                if loaded is not None:
                    loaded = self.components.setdefault(key, loaded)
                self._loading[key] -= 1
                if not self._loading[key]:
                    del self._loading[key]
                self._loaded.notify_all()
        return loaded

    def _run(self, loaded: LoadedComponent, request: CallRequest, guard: CallGuard,
             sock: socket.socket) -> Done | Failed:
        try:
            result = self.host.call_tool_sync(
                loaded, ToolInput(data=request.data, log_path=request.log_path), grant=_grant(request),
                session=_DaemonSide(sock), guard=guard,
                on_chunk=lambda text: frames.send_chunk(sock, text),
                on_thinking=lambda text: frames.send_chunk(sock, text, thinking=True),
            )
        except HostError as exc:
            return _failed(exc)
        except Exception as exc:  # noqa: BLE001 - a defect here must reach the daemon as a failed call
            return Failed(error="HostError", artifact=loaded.name, cause=f"the WASM worker failed: {exc!r}")
        return Done(status=result.status.value, summary=result.summary, data=result.data, data_path=result.data_path,
                    truncated=result.truncated, metadata=list(result.metadata))


def _failed(exc: HostError) -> Failed:
    """A host error as the frame the daemon rebuilds it from (its class, fields and extras)."""
    extra = {name: getattr(exc, name) for name in frames.ERROR_FIELDS if hasattr(exc, name)}
    return Failed(error=type(exc).__name__, artifact=exc.artifact, cause=exc.cause, extra=extra)


def _grant(request: CallRequest) -> CallGrant:
    spec = request.grant
    optional = lambda text: None if text is None else Path(text)  # noqa: E731
    return CallGrant(env=dict(spec.env), preopen=optional(spec.preopen), log_path=optional(spec.log_path),
                     network=tuple(spec.network), limits=Limits(**spec.limits.model_dump()), root=optional(spec.root))


def _ancestors(guard: CallGuard) -> list[CallGuard]:
    found, outer = [], guard.parent
    while outer is not None:
        found.append(outer)
        outer = outer.parent
    return found


def _guard_chain(request: CallRequest, arrived: float) -> CallGuard:
    """The call's guard here, nested in copies of the guards it is nested in at the daemon,
    each with its own nominal deadline and the time left of it when the call arrived (its clock
    ran on while the call was queued)."""
    parent: CallGuard | None = None
    for spec in reversed(request.guards[1:]):
        parent = CallGuard(spec.deadline_seconds, parent=parent)
        if spec.remaining is not None:
            parent.deadline_at = arrived + spec.remaining
    own = request.guards[0] if request.guards else None
    return CallGuard(own.deadline_seconds if own else request.grant.limits.deadline_seconds, parent=parent)


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    control = socket.socket(fileno=int(argv[0]))
    tick = float(argv[1]) if len(argv) > 1 else 0.01
    host = ComponentHost(use_disk_cache=False, tick_seconds=tick)
    try:
        Worker(control, host).serve()
    except OSError:
        pass  # the daemon went before this worker said it was ready (a start that failed): nothing to tell
    finally:
        host.close()
    os._exit(0)  # running calls' threads end with the process: their daemon is gone


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
