"""One WASM worker process as the daemon knows it (`processes.py` keeps several): the process,
its control socket, its readiness, the components it has, the calls it runs.

A send on the control socket never waits: a call's socket passed (`open_call`) and a cancel go
as one message each, and a worker that has stopped reading them is killed rather than let the
sender (often the event loop) wait on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import socket
import subprocess
import threading
from dataclasses import dataclass, field

from murmurd.host.workers import frames
from murmurd.host.workers.frames import Control, GuardSpec

READY_SECONDS = 120.0  # how long a starting worker may take to say it is ready (a loaded machine)
STOP_SECONDS = 5.0  # how long a closing worker may take to end before it is killed


class WorkerGone(Exception):
    """A worker process could not be started, or ended."""


@dataclass
class WorkerLink:
    """One worker process and what the daemon knows of it."""

    process: subprocess.Popen[bytes]
    control: socket.socket
    control_lock: threading.Lock = field(default_factory=threading.Lock)  # sends, and the socket's close
    ready_lock: threading.Lock = field(default_factory=threading.Lock)  # the first word's wait
    components: set[tuple[str, str]] = field(default_factory=set)  # (digest, name) whose compiled form it has
    in_flight: int = 0
    drains: set[asyncio.Task[None]] = field(default_factory=set)  # cancelled calls read to their end (`calls.py`)

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
        wait, deadline = wait_bound(guards)
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
        (stopped, wedged), and is killed, failing its calls, rather than let the sender (the
        event loop, for a call or a cancel) wait on it; the next call's pick reaps it and
        starts another (a large process takes a while to free: not on the loop)."""
        with self.control_lock:
            try:
                frames.send_control(self.control, message, fds, wait=False)
            except BlockingIOError:
                self.kill()
                raise

    def kill(self) -> None:
        """Kill the process (its calls' sockets then end), without waiting for it."""
        with contextlib.suppress(OSError):
            self.process.kill()

    def stop(self) -> None:
        """Kill the process and reap it."""
        self.kill()
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


def wait_bound(guards: list[GuardSpec]) -> tuple[float, float]:
    """How long the call may wait in the worker for a place, as in-process (`ComponentHost._place`):
    its own deadline, or less of what is left of a call it is nested in (`calls.guard_specs`: the
    call's own first); and the nominal deadline that bound is (what a `DeadlineExceeded` names)."""
    own, *outers = guards
    wait, deadline = own.deadline_seconds, own.deadline_seconds
    for outer in outers:
        if outer.remaining is not None and outer.remaining < wait:
            wait, deadline = max(0.0, outer.remaining), outer.deadline_seconds
    return wait, deadline
