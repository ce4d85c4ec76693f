"""How many guest calls of one host run guest code at once (its places).

Guest calls on many threads at once cost more each than one after another: a store maps its
memory, the guest faults pages in and closing the store unmaps them, all under the process's one
memory-map lock (`bench/wasm_concurrency.py` on two cores: eight bare threads at once cost 3.3x
one thread, the same calls one at a time 1.05x). A call holds a place from its store's creation
until the store is closed; the gate never makes a call wait behind a slow one:

- a call gives its place up while the host waits for it (`away`: a reply, a peer, the shell, a
  tool run, a driver run on another thread), and waits its turn for one again after;
- a call that sends a `wasi:http` request runs without a place for the rest of the call
  (`leave`): the answer is awaited inside wasmtime, out of the host's sight;
- a call that has held places for `quantum` seconds in all (summed over its turns, so giving
  the place up and taking it back does not start the count again) loses its place for the rest
  of the call: a watchdog thread takes it back, so a guest that spins, sleeps inside wasmtime or
  loops over host imports delays the others by about a quantum, never by its deadline;
- a call nested in another on the same thread while that one holds a place runs inside it (a
  call nested in one that runs free takes a place of its own).

Every place comes back within about a quantum whatever the guest does, so no arrangement of
waits can deadlock on places. Each host has its own gate (no module state), so each replica has
its own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

QUANTUM_SECONDS = 0.05
_NEVER = float("inf")
POLL_SECONDS = 0.05  # how often a call waiting for a place looks at its stop condition

Stop = Callable[[], bool]


def never() -> bool:
    """A `Stop` that never stops a wait: for a caller that waits until it has a place."""
    return False


class GateWaitCancelled(Exception):
    """The call was stopped (cancelled, or past a deadline) while it waited for a place."""


class _Hold:
    """One call's claim: `active` while it holds a place, `free` once it runs without one for
    good; `used` is the time it held places in earlier turns."""

    __slots__ = ("active", "free", "since", "used")

    def __init__(self) -> None:
        self.active = False
        self.free = False
        self.since = 0.0
        self.used = 0.0


class RunGate:
    def __init__(self, places: int, quantum: float = QUANTUM_SECONDS) -> None:
        if places < 1:
            raise ValueError("a run gate needs at least one place")
        self.places = places
        self.quantum = quantum
        self.revoked = 0  # places taken back from calls past the quantum (for tests and metrics)
        self._free = threading.BoundedSemaphore(places)  # a release too many raises
        self._lock = threading.Condition()
        self._holds: set[_Hold] = set()
        self._watchdog: threading.Thread | None = None
        self._watch_at = _NEVER  # when the watchdog looks next
        self._closed = False
        self._local = threading.local()  # this thread's innermost gated call

    @property
    def held(self) -> int:
        """Places held now."""
        with self._lock:
            return len(self._holds)

    def turn_left(self) -> float:
        """Seconds of its quantum this thread's innermost gated call has left in its place (0 if
        it holds none)."""
        hold: _Hold | None = getattr(self._local, "hold", None)
        with self._lock:
            if hold is None or not hold.active:
                return 0.0
            return max(0.0, self.quantum - hold.used - (time.monotonic() - hold.since))

    @contextmanager
    def call(self, stop: Stop) -> Iterator[None]:
        """One call: a place for it, unless it is nested in a call holding one on this thread.
        `stop()` true while it waits raises `GateWaitCancelled`."""
        outer: _Hold | None = getattr(self._local, "hold", None)
        if outer is not None and outer.active:
            yield
            return
        self._ensure_watchdog()
        hold = _Hold()
        if not self._take(hold, stop):
            raise GateWaitCancelled()
        self._local.hold = hold
        try:
            yield
        finally:
            self._give(hold)
            self._local.hold = outer

    @contextmanager
    def away(self, stop: Stop) -> Iterator[None]:
        """The host waits for this thread's call: its place serves another call meanwhile, and
        the call waits its turn for one afterwards; if `stop()` turns true during that wait (a
        cancel) it runs on without one, to trap at its next epoch check."""
        hold: _Hold | None = getattr(self._local, "hold", None)
        if hold is None or not hold.active:
            yield
            return
        self._give(hold)
        try:
            yield
        finally:
            if not hold.free and not self._take(hold, stop):
                hold.free = True

    def leave(self) -> None:
        """This thread's call runs without a place for the rest of the call."""
        hold: _Hold | None = getattr(self._local, "hold", None)
        if hold is not None:
            hold.free = True
            self._give(hold)

    def close(self) -> None:
        """Stop the watchdog (the host is closing); calls still running keep their places."""
        with self._lock:
            self._closed = True
            self._lock.notify()

    def _take(self, hold: _Hold, stop: Stop) -> bool:
        """Wait for a place; False (none taken) once `stop()` is true."""
        while not self._free.acquire(timeout=POLL_SECONDS):
            if stop():
                return False
        with self._lock:
            hold.active, hold.since = True, time.monotonic()
            self._holds.add(hold)
            if hold.since + self.quantum - hold.used < self._watch_at:
                self._lock.notify()  # this turn ends before the watchdog's next look
        return True

    def _give(self, hold: _Hold) -> None:
        with self._lock:
            if not hold.active:
                return
            hold.active = False
            hold.used += time.monotonic() - hold.since
            self._holds.discard(hold)
        self._free.release()

    def _ensure_watchdog(self) -> None:
        """Started at the first call, before it holds anything (a thread that cannot start
        fails that call, with no place taken)."""
        if self._watchdog is not None:
            return
        with self._lock:
            if self._watchdog is None and not self._closed:
                watchdog = threading.Thread(target=self._watch, name="murmurd-run-gate", daemon=True)
                watchdog.start()
                self._watchdog = watchdog

    def _watch(self) -> None:
        with self._lock:
            while not self._closed:
                if not self._holds:
                    self._watch_at = _NEVER
                    self._lock.wait()
                    continue
                now = time.monotonic()
                for hold in [h for h in self._holds if h.used + now - h.since >= self.quantum]:
                    hold.free, hold.active = True, False
                    self._holds.discard(hold)
                    self._free.release()
                    self.revoked += 1
                left = max(min((self.quantum - h.used - (now - h.since) for h in self._holds),
                               default=self.quantum), 0.001)
                self._watch_at = now + left
                self._lock.wait(left)
