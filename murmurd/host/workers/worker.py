"""A WASM worker process: a `ComponentHost` of its own that runs the daemon's tool and driver
calls, so their guest code, their stores' memory and wasmtime's calls into Python run under
another interpreter lock and in another address space than the daemon's loop.

`python -m murmurd.host.workers.worker FD`: FD is the control socket (`SOCK_SEQPACKET`) the
daemon passed. Each `call` on it brings the call's own socket; the call runs on a thread of
this process, in a fresh store as any call does, with the limits, preopen, log and egress
policy of its grant (the paths are the daemon's: same user, same file system, reached through
`workdir_fs` without following a symlink). What the guest asks of its session (a chunk, a
reply, a refused request) goes back on the call's socket. The process ends when the daemon
closes the control socket; it ignores SIGINT and SIGTERM, which a terminal or a service
manager sends the whole group, so that the daemon can drain its running calls first.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

from murmurd.host.context import ImportFailed, SessionContext
from murmurd.host.errors import HostError
from murmurd.host.host import ComponentHost
from murmurd.host.http_egress import EgressDenial
from murmurd.host.interrupt import CallGuard
from murmurd.host.limits import Limits
from murmurd.host.loaded import LoadedComponent
from murmurd.host.values import ToolInput
from murmurd.host.wasi import CallGrant
from murmurd.host.workers import frames
from murmurd.host.workers.runners import PlaceRunners
from murmurd.host.workers.frames import COMPONENT_MISSING, CallRequest, Denied, Done, Failed, InputRequest, Reply

_EXTRA_FIELDS = ("seconds", "limit_bytes")
MAX_EARLY_CANCELS = 4096  # cancels kept for calls not (or no longer) running here
LOAD_WAIT_SECONDS = 120.0  # a call may wait this long for another call's bytes of its component to load


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


class Worker:
    """The calls of one daemon: components by digest, running calls' guards by id."""

    def __init__(self, control: socket.socket, host: ComponentHost) -> None:
        self.control = control
        self.host = host
        self.components: dict[tuple[str, str], LoadedComponent] = {}  # by (digest, the artifact's name)
        self._loaded = threading.Condition()
        self._loading: set[tuple[str, str]] = set()  # components whose bytes are being loaded now
        self._guards: dict[int, CallGuard] = {}
        self._early: dict[int, str] = {}  # cancels that came before their call's guard
        self._guards_lock = threading.Lock()
        self._calls = PlaceRunners(host.gate)  # runners.py: calls queued until a place is free

    def serve(self) -> None:
        frames.send_control(self.control, frames.Control(op="ready"))
        while True:
            try:
                message, fds = frames.receive_control(self.control)
            except frames.FrameError:
                return  # the daemon is gone or closed us: nothing more will come
            if message is not None and message.op == "call" and fds:
                self._calls.submit(functools.partial(self._serve_call, message.id, socket.socket(fileno=fds[0])))
                fds = fds[1:]
            elif message is not None and message.op == "cancel":
                self._cancel(message.id, message.reason or "cancelled")
            for fd in fds:  # whatever else came (a malformed message's are closed already)
                os.close(fd)

    def _cancel(self, call_id: int, reason: str) -> None:
        with self._guards_lock:
            guard = self._guards.get(call_id)
            if guard is None:  # not started yet, or over: kept a while, the oldest dropped first
                self._early[call_id] = reason
                while len(self._early) > MAX_EARLY_CANCELS:
                    del self._early[next(iter(self._early))]
        if guard is not None:
            guard.cancel(reason)

    def _serve_call(self, call_id: int, sock: socket.socket) -> None:
        request: object = None
        with sock:
            try:
                request = frames.receive(sock, frames.ToWorker)
                if isinstance(request, CallRequest):
                    frames.send(sock, self._outcome(call_id, request, sock))
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

    def _outcome(self, call_id: int, request: CallRequest, sock: socket.socket) -> Done | Failed:
        loaded = self._component(request, sock)
        if isinstance(loaded, Failed):
            return loaded
        guard = _guard_chain(request)
        with self._guards_lock:
            self._guards[call_id] = guard
            early = self._early.pop(call_id, None)
        if early is not None:
            guard.cancel(early)
        with contextlib.ExitStack() as outer_clocks:
            for outer in _ancestors(guard):  # the ticker wakes at their deadlines too
                outer_clocks.enter_context(self.host.ticker.active(outer))
            return self._run(loaded, request, guard, sock)

    def _component(self, request: CallRequest, sock: socket.socket) -> LoadedComponent | Failed:
        """The call's component: loaded from the bytes that follow its request, else as loaded
        for an earlier call (waiting for one whose bytes are loading now). Missing altogether
        (a load that failed, a worker started afresh), it is a `ComponentMissing` failure: the
        daemon sends the call again with the bytes; nothing of the call has run."""
        compiled = frames.receive_raw(sock) if request.compiled else None
        key = (request.sha256, request.artifact)  # one artifact's bytes under two names: two entries
        with self._loaded:
            if compiled is None:
                self._loaded.wait_for(lambda: key in self.components or key not in self._loading, LOAD_WAIT_SECONDS)
                found = self.components.get(key)
                if found is None:
                    return Failed(error=COMPONENT_MISSING, artifact=request.artifact, cause="its compiled form is not here")
                return found
            if key in self.components:
                return self.components[key]
            self._loading.add(key)
        loaded: LoadedComponent | None = None
        try:
            loaded = self.host.load_compiled(bytes(compiled), name=request.artifact, sha256=request.sha256)
        except HostError as exc:
            return Failed(error=type(exc).__name__, artifact=exc.artifact, cause=exc.cause)
        finally:
            with self._loaded:  # loaded or not, in one step: a waiter sees one or the other
                if loaded is not None:
                    self.components[key] = loaded
                self._loading.discard(key)
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
            extra = {name: getattr(exc, name) for name in _EXTRA_FIELDS if hasattr(exc, name)}
            return Failed(error=type(exc).__name__, artifact=exc.artifact, cause=exc.cause, extra=extra)
        except Exception as exc:  # noqa: BLE001 - a defect here must reach the daemon as a failed call
            return Failed(error="HostError", artifact=loaded.name, cause=f"the WASM worker failed: {exc!r}")
        return Done(status=result.status.value, summary=result.summary, data=result.data, data_path=result.data_path,
                    truncated=result.truncated, metadata=list(result.metadata))


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


def _guard_chain(request: CallRequest) -> CallGuard:
    """The call's guard here, nested in copies of the guards it is nested in at the daemon,
    each with its own nominal deadline and the time left of it (its clock runs on here)."""
    parent: CallGuard | None = None
    now = time.monotonic()
    for spec in reversed(request.guards[1:]):
        parent = CallGuard(spec.deadline_seconds, parent=parent)
        if spec.remaining is not None:
            parent.deadline_at = now + spec.remaining
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
