"""The threads a worker process runs its calls on: as few as keep its run gate's places busy.

A thread per call, as a thread pool gives, costs the worker more than the calls' own work when
many arrive at once (16 callers on one worker with one place: about 5 ms of the worker's CPU
per call against 3.3 ms one at a time; `bench/worker_calls.py`): every call takes its turn at
the one place on a thread of its own, so each turn is a sleep and a wake-up, and the guest's
stores are mapped and unmapped on a different thread each time. Here a call is queued until a
thread holds a place for it (`RunGate.call`: the call's store then runs inside that place), and
a thread that ends a call takes the next one queued while its place is still its own.

A call's thread never waits for the others: when a call gives its place up (a host import
waiting for the daemon, a `wasi:http` request, the gate's quantum taking the place back) the
place is free, and a thread waiting for one (there is always one while calls are queued) starts
the next call. So the threads are the places, plus one waiting, plus one per call that waits
outside its place; never so few that a queued call waits behind a blocked one.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import deque
from collections.abc import Callable

from murmurd.host.run_gate import RunGate, never

log = logging.getLogger("murmurd.host.workers")

IDLE_SECONDS = 30.0  # a thread with no call queued this long ends


class PlaceRunners:
    """Runs submitted work, each piece inside a place of `gate`."""

    def __init__(self, gate: RunGate, *, name: str = "murmurd-worker-call", idle_seconds: float = IDLE_SECONDS) -> None:
        self._gate = gate
        self._name = name
        self._idle_seconds = idle_seconds
        self._queue: deque[Callable[[], None]] = deque()
        self._lock = threading.Condition()
        self._idle = 0  # threads waiting for work
        self._wakeups = 0  # idle threads told to wait for a place, not yet awake
        self._contending = 0  # threads waiting (or told to wait) for a place for queued work
        self._threads = 0
        self._started = 0

    @property
    def threads(self) -> int:
        with self._lock:
            return self._threads

    def submit(self, work: Callable[[], None]) -> None:
        """Queue `work`. `RuntimeError` (no thread could start, and none runs to take it) leaves
        nothing queued."""
        with self._lock:
            self._queue.append(work)
            try:
                self._wake_one()
            except RuntimeError:
                if self._threads == 0:
                    self._queue.remove(work)
                    raise
                log.warning("no new thread for the WASM worker's queue; a running one takes it")

    def remove(self, work: Callable[[], None]) -> bool:
        """Take `work` out of the queue if it has not started (True if it was queued)."""
        with self._lock:
            try:
                self._queue.remove(work)
            except ValueError:
                return False
            return True

    def _wake_one(self) -> None:
        """Under the lock, with work queued: a thread to wait for a place for it, unless one
        waits (or was told to) already; an idle one if there is one, else a new one."""
        if self._contending:
            return
        self._contending += 1  # counted here, for the thread told: the next caller sees it at once
        if self._idle > self._wakeups:
            self._wakeups += 1
            self._lock.notify()
            return
        self._threads += 1
        self._started += 1
        try:
            threading.Thread(target=self._run, args=(True,), name=f"{self._name}_{self._started}", daemon=True).start()
        except BaseException:  # no thread: nothing waits for a place, and the next call tries again
            self._threads -= 1
            self._contending -= 1
            raise

    def _run(self, told: bool) -> None:
        contending = False
        try:
            while told or self._await_work():
                told, contending = False, True
                with self._gate.call(never):  # places come back within a quantum: it waits until it has one
                    with self._lock:
                        self._contending -= 1
                    contending = False
                    self._serve_while_placed()
        finally:
            with self._lock:
                self._threads -= 1
                if contending:  # the gate failed it (no watchdog thread): another may wait instead
                    self._contending -= 1
                    if self._queue:
                        with contextlib.suppress(RuntimeError):  # the next submit tries again
                            self._wake_one()

    def _await_work(self) -> bool:
        """Wait until this thread is to wait for a place for queued work (False: nothing came
        within the idle time, and the thread ends)."""
        with self._lock:
            while True:
                if self._wakeups:
                    self._wakeups -= 1
                    return True
                if self._queue and not self._contending:
                    self._contending += 1
                    return True
                self._idle += 1
                try:
                    woke = self._lock.wait(self._idle_seconds)
                finally:
                    self._idle -= 1
                if not woke and not self._wakeups and not self._queue:
                    return False

    def _serve_while_placed(self) -> None:
        """Run queued work one after another while this thread's place is its own and at least
        half a quantum of it is left: once a call gives it up, or the gate's quantum takes it
        back (summed over the calls run here, so a call waiting to take its place again is not
        kept waiting), or too little is left for the next call, the waiting thread starts it."""
        while self._gate.turn_left() > self._gate.quantum / 2:  # a call started here has half a quantum at least
            with self._lock:
                if not self._queue:
                    return
                work = self._queue.popleft()
                if self._queue:
                    try:
                        self._wake_one()  # the call after it waits for a place from another thread
                    except RuntimeError:  # none could start: this thread takes the queue up again after
                        log.warning("no new thread for the WASM worker's queue; this one goes on with it")
            try:
                work()
            except Exception:  # noqa: BLE001 - one call's defect ends neither this thread nor the queue
                log.exception("a call in the WASM worker failed outside its own handling")
