"""The threads a WASM worker process runs its calls on (murmurd/host/workers/runners.py, issue
29): calls that arrive together run one after another on as few threads as the run gate's
places need, and no queued call waits behind one that gave its place up (a host import waiting
for the daemon) or lost it (a guest spinning past the quantum)."""

from __future__ import annotations

import threading

from murmurd.host.run_gate import RunGate
from murmurd.host.workers.runners import PlaceRunners

WAIT = 60  # what a test waits at most for an event that must happen (a loaded machine)


def _names_of_threads_that_ran(runners: PlaceRunners, calls: int, work=lambda: None) -> set[str]:  # type: ignore[no-untyped-def]
    names: set[str] = set()
    done = threading.Semaphore(0)

    def call() -> None:
        work()
        names.add(threading.current_thread().name)
        done.release()

    for _ in range(calls):
        runners.submit(call)
    for _ in range(calls):
        assert done.acquire(timeout=WAIT), "a queued call never ran"
    return names


def test_calls_arriving_together_run_on_the_places_and_one_waiting_thread() -> None:
    gate = RunGate(1, quantum=600)  # no take-back here: only the queue is tested
    runners = PlaceRunners(gate)
    in_place: list[bool] = []
    names = _names_of_threads_that_ran(runners, 200, lambda: in_place.append(gate.turn_left() > 0))
    assert all(in_place), "a call ran outside a place"
    assert len(names) <= 2, names  # the place's thread, and the one waiting for a place
    assert runners.threads <= 2


def test_two_places_run_two_calls_at_once() -> None:
    gate = RunGate(2, quantum=600)
    runners = PlaceRunners(gate)
    both_in, release = threading.Barrier(2, timeout=WAIT), threading.Event()

    def meet() -> None:
        both_in.wait()  # breaks (and the call fails to count) unless the two run together
        release.wait(WAIT)

    running = threading.Semaphore(0)
    for _ in range(2):
        runners.submit(lambda: (meet(), running.release()))
    release.set()
    assert running.acquire(timeout=WAIT) and running.acquire(timeout=WAIT)


def test_a_call_waiting_outside_its_place_lets_the_queued_calls_run() -> None:
    gate = RunGate(1, quantum=600)
    runners = PlaceRunners(gate)
    waiting, answer = threading.Event(), threading.Event()

    def asks_the_daemon() -> None:  # a host import waiting for a reply gives the place up
        with gate.away(lambda: False):
            waiting.set()
            answer.wait(WAIT)

    runners.submit(asks_the_daemon)
    assert waiting.wait(WAIT)
    names = _names_of_threads_that_ran(runners, 20)  # all ran while the first still waits
    assert not answer.is_set()
    answer.set()
    assert len(names) <= 2


def test_a_call_spinning_past_the_quantum_does_not_hold_the_queue() -> None:
    gate = RunGate(1, quantum=0.05)
    runners = PlaceRunners(gate)
    spinning, stop = threading.Event(), threading.Event()

    def spins() -> None:  # a guest that never gives its place up: the gate takes it back
        spinning.set()
        while not stop.is_set():
            pass

    runners.submit(spins)
    assert spinning.wait(WAIT)
    try:
        _names_of_threads_that_ran(runners, 10)
    finally:
        stop.set()
    assert gate.revoked >= 1


def test_threads_with_nothing_queued_end() -> None:
    gate = RunGate(1, quantum=600)
    runners = PlaceRunners(gate, idle_seconds=0.05)
    _names_of_threads_that_ran(runners, 20)
    ended = threading.Event()
    for _ in range(WAIT * 20):
        if runners.threads == 0:
            ended.set()
            break
        ended.wait(0.05)
    assert ended.is_set(), f"{runners.threads} threads still waiting for work"


def test_work_no_thread_can_run_is_refused_and_not_left_queued(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """No thread runs and none can start: `submit` says so (the worker answers the call that
    failed), and nothing stays queued for a thread that will never come."""
    runners = PlaceRunners(RunGate(1, quantum=600))

    def start(_thread: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", start)
    ran: list[int] = []
    try:
        runners.submit(lambda: ran.append(1))
    except RuntimeError as exc:
        assert "can't start new thread" in str(exc)
    else:
        raise AssertionError("submit took work no thread will run")
    assert runners.threads == 0
    assert not runners._queue, "the refused work stays queued"
    monkeypatch.undo()
    names = _names_of_threads_that_ran(runners, 3)  # threads start again: the queue works
    assert names and ran == []
