"""Deadlines and cancellation for running WASM, through epoch interruption.

Each call's store gets an epoch-deadline callback (a `CallGuard`) that runs on the worker
thread when the engine's epoch moves past the store's deadline: it lets the guest go on, or
traps it when the call's deadline has passed or someone cancelled it. The cause is kept on the
guard so the host can raise a typed error instead of wasmtime's generic "interrupt".

The epoch moves only when a running call must be looked at, not on a clock: `cancel` advances
it at once (the guest stops at its next epoch check), and one `EpochTicker` thread per engine
sleeps until the earliest deadline of the calls running and advances it then, and again every
`tick` while a call past its deadline has not ended (one blocked in a host import). A call that
ends in time costs no tick, no thread switch and no Python callback.
"""

from __future__ import annotations

import ctypes
import threading
import time
from contextlib import contextmanager
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from wasmtime import Engine, Store
from wasmtime import _ffi as ffi

if TYPE_CHECKING:
    from murmurd.host.run_gate import RunGate

_CONTINUE = 0  # WASMTIME_UPDATE_DEADLINE_CONTINUE

_CALLBACK_TYPE = ctypes.CFUNCTYPE(
    ctypes.c_size_t,
    ctypes.POINTER(ffi.wasmtime_context_t),
    ctypes.c_void_p,
    ctypes.POINTER(ctypes.c_uint64),
    ctypes.POINTER(ffi.wasmtime_update_deadline_kind_t),
)
_NO_FINALIZER = ctypes.cast(None, ctypes.CFUNCTYPE(None, ctypes.c_void_p))
_NEVER = float("inf")


class EpochWatcher(Protocol):
    """What a guard tells when it is cancelled or its deadline moves: an engine's ticker, or
    the daemon's link to a call running in a worker process."""

    def advance(self) -> None: ...

    def rearm(self, guard: CallGuard) -> None: ...


class EpochTicker:
    """Advances an engine's epoch when a running call's deadline comes (see the module's doc)."""

    def __init__(self, engine: Engine, tick: float = 0.01) -> None:
        self.engine = engine
        self.tick = tick  # how often a call past its deadline is looked at again until it ends
        self._guards: set[CallGuard] = set()  # the calls running now
        self._cond = threading.Condition(threading.Lock())
        self._wake_at = _NEVER  # when the thread looks next; an earlier deadline wakes it
        self._stopped = False
        self.advances = 0  # epoch advances made for deadlines (what a test and the bench read)
        self._thread = threading.Thread(target=self._run, name="murmurd-epoch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with self._cond:
            while not self._stopped:
                now = time.monotonic()
                due = [guard for guard in self._guards if guard.deadline_at <= now]
                if due:
                    self.engine.increment_epoch()
                    self.advances += 1
                later = (guard.deadline_at for guard in self._guards if guard.deadline_at > now)
                self._wake_at = min(later, default=_NEVER)
                if due:
                    self._wake_at = min(self._wake_at, now + self.tick)
                self._cond.wait(None if self._wake_at == _NEVER else self._wake_at - now)

    def active(self, guard: CallGuard) -> _Active:
        """`with ticker.active(guard):` while `guard`'s call runs: its deadline is watched and
        a cancel of it reaches this engine."""
        return _Active(self, guard)

    def _enter(self, guard: CallGuard) -> None:
        with self._cond:
            self._guards.add(guard)
            if guard.deadline_at < self._wake_at:
                self._cond.notify()
        guard.watched_by(self)

    def rearm(self, guard: CallGuard) -> None:
        """`guard`'s deadline moved (its clock restarted after a suspended wait): wake the
        thread if that deadline comes before its next look."""
        with self._cond:
            if guard in self._guards and guard.deadline_at < self._wake_at:
                self._cond.notify()

    def _leave(self, guard: CallGuard) -> None:
        with self._cond:
            self._guards.discard(guard)

    def advance(self) -> None:
        """Advance the epoch now: every running store on the engine checks its guard (a cancel)."""
        self.engine.increment_epoch()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join(timeout=1)


class _Active:
    """The span of one call on a ticker (a class, not a generator: it runs on every call)."""

    __slots__ = ("_ticker", "_guard")

    def __init__(self, ticker: EpochTicker, guard: CallGuard) -> None:
        self._ticker, self._guard = ticker, guard

    def __enter__(self) -> None:
        self._ticker._enter(self._guard)

    def __exit__(self, *_exc: object) -> None:
        self._ticker._leave(self._guard)


class CallGuard:
    """Per-call deadline and cancel flag, checked by the call's store at each epoch advance.

    A guard made for a call nested in another (a tool a capsule invokes) has the outer guard as
    `parent`: cancelling the outer call cancels it too. Host imports that block outside WASM
    (the shell) poll `is_set`, since no epoch check reaches them."""

    def __init__(self, deadline_seconds: float, parent: CallGuard | None = None) -> None:
        self.deadline_seconds = deadline_seconds
        self.parent = parent
        self.deadline_at = _NEVER  # monotonic; the clock starts when the call starts (install)
        self._cancel_reason: str | None = None
        self.cause: str | None = None  # "deadline" or "cancelled" once the guard has trapped
        self.expired: CallGuard | None = None  # whose deadline it was: this guard's, or its caller's
        self._callback = _CALLBACK_TYPE(self._on_epoch)
        self._tickers: set[EpochWatcher] = set()  # the engines this guard's calls (and nested ones) run on
        self.gate: RunGate | None = None  # the host's run gate, set by the host that runs the call

    def cancel(self, reason: str = "cancelled") -> None:
        """Ask the running guest to stop at its next epoch check: the epoch of every engine a
        call under this guard (or nested in its call) runs on is advanced now."""
        self._cancel_reason = reason
        for ticker in tuple(self._tickers):
            ticker.advance()

    def watched_by(self, ticker: EpochWatcher) -> None:
        """A call under this guard runs on `ticker`'s engine: a cancel of it, or of a call it is
        nested in, advances that epoch. A cancel that came first is acted on now."""
        guard: CallGuard | None = self
        while guard is not None:
            guard._tickers.add(ticker)
            guard = guard.parent
        if self.cancel_reason is not None:
            ticker.advance()

    def unwatched_by(self, ticker: EpochWatcher) -> None:
        """The call `watched_by(ticker)` registered has ended: forget it here and in the
        guards this one is nested in."""
        guard: CallGuard | None = self
        while guard is not None:
            guard._tickers.discard(ticker)
            guard = guard.parent

    @property
    def cancel_reason(self) -> str | None:
        """Why this call (or the call it is nested in) was cancelled; None while it was not."""
        if self._cancel_reason is None and self.parent is not None:
            return self.parent.cancel_reason
        return self._cancel_reason

    def is_set(self) -> bool:
        """Whether the call must stop: cancelled, or past its deadline (or its caller's). The
        shell runner polls this as its cancel flag; the next epoch check then names the cause."""
        if self.cancel_reason is not None or time.monotonic() >= self.deadline_at:
            return True
        return self.parent is not None and self.parent.is_set()

    @contextmanager
    def suspended(self) -> Iterator[None]:
        """Stop the deadline clock while a host import waits (for a reply, for a peer)."""
        with self.away():  # outside the stopped clock: waiting to take a place back counts
            started, deadline_at = time.monotonic(), self.deadline_at
            self.deadline_at = _NEVER  # meanwhile not due: the ticker would advance the epoch every tick
            try:
                yield
            finally:
                self.deadline_at = deadline_at + (time.monotonic() - started)
                for ticker in tuple(self._tickers):  # asleep until a deadline it no longer knows
                    ticker.rearm(self)

    @contextmanager
    def away(self) -> Iterator[None]:
        """The host waits for this call (a host import that waits, or runs another call): its
        run-gate place serves another call meanwhile (`run_gate.RunGate.away`)."""
        if self.gate is None:
            yield
        else:
            with self.gate.away(self.is_set):
                yield

    def install(self, store: Store) -> None:
        """Arm the guard on a fresh store; the deadline counts from here. The store checks
        the guard at the engine's next epoch advance."""
        self.deadline_at = time.monotonic() + self.deadline_seconds
        store.set_epoch_deadline(1)
        ffi.wasmtime_store_epoch_deadline_callback(store.ptr(), self._callback, None, _NO_FINALIZER)

    def _on_epoch(self, _ctx, _data, next_delta, kind) -> int:  # type: ignore[no-untyped-def]
        reason = self.cancel_reason
        if reason is not None:
            self.cause = "cancelled"
            return _trap(reason)
        passed = self.deadline_passed(time.monotonic())
        if passed is not None:
            self.cause, self.expired = "deadline", passed
            return _trap(f"deadline exceeded after {passed.deadline_seconds:g} s")
        next_delta[0] = 1
        kind[0] = _CONTINUE
        return 0


    def deadline_passed(self, now: float) -> CallGuard | None:
        """This guard, or the caller's it is nested in, whose deadline has passed: a tool keeps
        to the deadline of the capsule that invoked it, whose clock runs on meanwhile."""
        guard: CallGuard | None = self
        while guard is not None:
            if now >= guard.deadline_at:
                return guard
            guard = guard.parent
        return None


def _trap(message: str) -> int:
    error = ffi.wasmtime_error_new(ctypes.create_string_buffer(message.encode()))
    return ctypes.cast(error, ctypes.c_void_p).value or 0
