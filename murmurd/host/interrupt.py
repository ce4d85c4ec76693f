"""Deadlines and cancellation for running WASM, through epoch interruption.

One `EpochTicker` thread per engine bumps the epoch every `tick` seconds while any call is
running. Each call's store gets an epoch-deadline callback (a `CallGuard`) that runs on the
worker thread at every tick: it lets the guest continue for one more tick, or traps it when the
call's deadline has passed or someone cancelled it. The cause is kept on the guard so the host
can raise a typed error instead of wasmtime's generic "interrupt".
"""

from __future__ import annotations

import ctypes
import threading
import time
from contextlib import contextmanager
from collections.abc import Iterator

from wasmtime import Engine, Store
from wasmtime import _ffi as ffi

_CONTINUE = 0  # WASMTIME_UPDATE_DEADLINE_CONTINUE

_CALLBACK_TYPE = ctypes.CFUNCTYPE(
    ctypes.c_size_t,
    ctypes.POINTER(ffi.wasmtime_context_t),
    ctypes.c_void_p,
    ctypes.POINTER(ctypes.c_uint64),
    ctypes.POINTER(ffi.wasmtime_update_deadline_kind_t),
)
_NO_FINALIZER = ctypes.cast(None, ctypes.CFUNCTYPE(None, ctypes.c_void_p))


class EpochTicker:
    """Advances an engine's epoch every `tick` seconds while at least one call is active."""

    def __init__(self, engine: Engine, tick: float = 0.01) -> None:
        self.engine = engine
        self.tick = tick
        self._active = 0
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="murmurd-epoch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._active == 0 and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
            time.sleep(self.tick)
            self.engine.increment_epoch()

    @contextmanager
    def active(self) -> Iterator[None]:
        with self._cond:
            self._active += 1
            self._cond.notify()
        try:
            yield
        finally:
            with self._cond:
                self._active -= 1

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join(timeout=1)


class CallGuard:
    """Per-call deadline and cancel flag, checked at every epoch tick of the call's store.

    A guard made for a call nested in another (a tool a capsule invokes) has the outer guard as
    `parent`: cancelling the outer call cancels it too. Host imports that block outside WASM
    (the shell) poll `is_set`, since no epoch tick reaches them."""

    def __init__(self, deadline_seconds: float, parent: CallGuard | None = None) -> None:
        self.deadline_seconds = deadline_seconds
        self.parent = parent
        self._deadline_at = float("inf")  # the clock starts when the call starts (install)
        self._cancel_reason: str | None = None
        self.cause: str | None = None  # "deadline" or "cancelled" once the guard has trapped
        self._callback = _CALLBACK_TYPE(self._on_epoch)

    def cancel(self, reason: str = "cancelled") -> None:
        """Ask the running guest to stop at its next epoch check (within one tick)."""
        self._cancel_reason = reason

    @property
    def cancel_reason(self) -> str | None:
        """Why this call (or the call it is nested in) was cancelled; None while it was not."""
        if self._cancel_reason is None and self.parent is not None:
            return self.parent.cancel_reason
        return self._cancel_reason

    def is_set(self) -> bool:
        """Whether the call must stop: cancelled, or past its deadline (or its caller's). The
        shell runner polls this as its cancel flag; the next epoch tick then names the cause."""
        if self.cancel_reason is not None or time.monotonic() >= self._deadline_at:
            return True
        return self.parent is not None and self.parent.is_set()

    @contextmanager
    def suspended(self) -> Iterator[None]:
        """Stop the deadline clock while a host import waits (for a reply, for a peer)."""
        started = time.monotonic()
        try:
            yield
        finally:
            self._deadline_at += time.monotonic() - started

    def install(self, store: Store) -> None:
        """Arm the guard on a fresh store; the deadline counts from here."""
        self._deadline_at = time.monotonic() + self.deadline_seconds
        store.set_epoch_deadline(1)
        ffi.wasmtime_store_epoch_deadline_callback(store.ptr(), self._callback, None, _NO_FINALIZER)

    def _on_epoch(self, _ctx, _data, next_delta, kind) -> int:  # type: ignore[no-untyped-def]
        reason = self.cancel_reason
        if reason is not None:
            self.cause = "cancelled"
            return _trap(reason)
        if time.monotonic() >= self._deadline_at:
            self.cause = "deadline"
            return _trap(f"deadline exceeded after {self.deadline_seconds:g} s")
        next_delta[0] = 1
        kind[0] = _CONTINUE
        return 0


def _trap(message: str) -> int:
    error = ffi.wasmtime_error_new(ctypes.create_string_buffer(message.encode()))
    return ctypes.cast(error, ctypes.c_void_p).value or 0
