"""How many guest calls of one host run guest code at once (its places).

Guest calls on many threads at once cost more each than one after another: a store maps its
memory, the guest faults pages in and closing the store unmaps them, all under the process's one
memory-map lock (`bench/wasm_concurrency.py` on two cores: eight bare threads at once cost 3.3x
one thread, the same calls one at a time 1.05x). A call holds a place from its store's creation
until the store is closed; the gate never makes a call wait behind a slow one:

- a host import runs without the place (`away`): while the host works or waits (a reply, a
  peer, the shell, a tool or driver run on another thread) the place serves another call; the
  call then waits its turn for a place again;
- a call that sends a `wasi:http` request runs without a place for the rest of the call
  (`leave`): the answer is awaited inside wasmtime, out of the host's sight;
- a call that has held its place for `quantum` seconds loses it and runs on without one (a
  watchdog thread takes it back, so a guest that spins, or sleeps inside wasmtime, delays the
  others by about a quantum, never by its deadline);
- a call nested in another on the same thread while that one holds a place runs inside it.

Each host has its own gate (no module state), so each replica has its own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

QUANTUM_SECONDS = 0.05
POLL_SECONDS = 0.05  # how often a call waiting for a place looks at its cancel flag


class GateWaitCancelled(Exception):
    """The call was cancelled (or its caller's deadline passed) while it waited for a place."""


class _Hold:
    """One call's claim: `active` while it holds a place, `free` once it runs without for good."""

    __slots__ = ("active", "free", "since")

    def __init__(self) -> None:
        self.active = False
        self.free = False
        self.since = 0.0


class RunGate:
    def __init__(self, places: int, quantum: float = QUANTUM_SECONDS) -> None:
        if places < 1:
            raise ValueError("a run gate needs at least one place")
        self.places = places
        self.quantum = quantum
        self.revoked = 0  # places taken back from calls past the quantum (for tests and metrics)
        self._free = threading.Semaphore(places)
        self._lock = threading.Condition()
        self._holds: set[_Hold] = set()
        self._watchdog: threading.Thread | None = None
        self._closed = False
        self._local = threading.local()  # this thread's innermost gated call

    @property
    def held(self) -> int:
        """Places held now."""
        with self._lock:
            return len(self._holds)

    @contextmanager
    def call(self, stop: Callable[[], bool]) -> Iterator[None]:
        """One call: a place for it, unless it is nested in a call holding one on this thread.
        `stop()` true while waiting raises `GateWaitCancelled`."""
        outer: _Hold | None = getattr(self._local, "hold", None)
        if outer is not None and (outer.active or outer.free):
            yield
            return
        hold = _Hold()
        self._take(hold, stop)
        self._local.hold = hold
        try:
            yield
        finally:
            self._give(hold)
            self._local.hold = outer

    @contextmanager
    def away(self) -> Iterator[None]:
        """This thread's call gives its place up while the host works; takes one again after."""
        hold: _Hold | None = getattr(self._local, "hold", None)
        if hold is None or not hold.active:
            yield
            return
        self._give(hold)
        try:
            yield
        finally:
            if not hold.free:
                self._take(hold, lambda: False)

    def leave(self) -> None:
        """This thread's call runs without a place for the rest of the call."""
        hold: _Hold | None = getattr(self._local, "hold", None)
        if hold is not None:
            hold.free = True
            self._give(hold)

    def _take(self, hold: _Hold, stop: Callable[[], bool]) -> None:
        while not self._free.acquire(timeout=POLL_SECONDS):
            if stop():
                raise GateWaitCancelled()
        with self._lock:
            hold.active, hold.since = True, time.monotonic()
            self._holds.add(hold)
            if len(self._holds) == 1:
                self._wake_watchdog()

    def _give(self, hold: _Hold) -> None:
        with self._lock:
            if not hold.active:
                return
            hold.active = False
            self._holds.discard(hold)
        self._free.release()

    def _wake_watchdog(self) -> None:
        """Under the lock: the watchdog starts, or stops idling (it sleeps while no place is held)."""
        if self._watchdog is None and not self._closed:
            self._watchdog = threading.Thread(target=self._watch, name="murmurd-run-gate", daemon=True)
            self._watchdog.start()
        self._lock.notify()

    def close(self) -> None:
        """Stop the watchdog (the host is closing); calls still running keep their places."""
        with self._lock:
            self._closed = True
            self._lock.notify()

    def _watch(self) -> None:
        with self._lock:
            while not self._closed:
                if not self._holds:
                    self._lock.wait()
                    continue
                now = time.monotonic()
                for hold in [h for h in self._holds if now - h.since >= self.quantum]:
                    hold.free, hold.active = True, False
                    self._holds.discard(hold)
                    self._free.release()
                    self.revoked += 1
                oldest = min((h.since for h in self._holds), default=now)
                self._lock.wait(max(self.quantum - (now - oldest), 0.001))
