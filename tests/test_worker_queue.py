"""A WASM worker's queue of calls waiting for a place (murmurd/host/workers/worker.py and
runners.py, issue 29), as the attack review of that queue probed it: a queued call's deadline
and its cancel end it where it waits, never behind the calls ahead of it; a call started late in
a thread's turn gets a turn of its own; a thread that cannot start loses no call; a frame's send
keeps to its socket's timeout; calls made together send a component's compiled bytes once."""

from __future__ import annotations

import os
import random
import signal
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from hostile import tool_component
from test_host_workers_attacks import chunk_tool
from murmurd.host import (
    CallCancelled, CallGrant, CallGuard, ComponentHost, DeadlineExceeded, InstantiationError, Limits, ToolInput, ToolStatus,
)
from murmurd.host.run_gate import RunGate
from murmurd.host.workers import frames
from murmurd.host.workers.runners import PlaceRunners

WAIT = 120  # what a test waits at most for an event that must happen (a loaded machine)
FILLERS = 30  # another session's calls, each holding the worker's one place for a quantum


def _in_thread(target) -> tuple[threading.Thread, dict[str, object]]:  # type: ignore[no-untyped-def]
    out: dict[str, object] = {}

    def run() -> None:
        try:
            out["result"] = target()
        except BaseException as exc:  # noqa: BLE001 - the test reads what it was
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


class _Passed:
    """Counts the calls the daemon has passed to its worker (`_Worker.open_call`)."""

    def __init__(self, workers: ComponentHost) -> None:
        assert workers.workers is not None
        worker = workers.workers._workers[0]
        self.count = 0
        self._changed = threading.Condition()
        real = worker.open_call

        def counted(*args: object) -> None:
            real(*args)  # type: ignore[arg-type]
            with self._changed:
                self.count += 1
                self._changed.notify_all()

        worker.open_call = counted  # type: ignore[method-assign]

    def wait_for(self, count: int) -> None:
        with self._changed:
            assert self._changed.wait_for(lambda: self.count >= count, WAIT), f"{self.count} of {count} calls passed"


class _Stalled:
    """Another session's calls: a guest sending 1 MiB chunks to a sink that stopped reading, so
    each blocks in its send inside its place (no CPU) until the gate's quantum takes it back."""

    def __init__(self, workers: ComponentHost, passed: _Passed, count: int) -> None:
        tool = workers.load_bytes(chunk_tool(1000, 1 << 20), name="stall")
        self.release = threading.Event()
        self.guards = [CallGuard(600) for _ in range(count)]
        self.started: set[int] = set()
        self.threads = []
        first = passed.count
        for k, guard in enumerate(self.guards):
            self.threads.append(_in_thread(lambda k=k, guard=guard: workers.call_tool_sync(
                tool, ToolInput(), guard=guard, on_chunk=lambda _text: self._sink(k))))
            passed.wait_for(first + k + 1)  # queued in this order

    def _sink(self, k: int) -> None:
        self.started.add(k)
        self.release.wait(WAIT)

    def end(self) -> None:
        for guard in self.guards:
            guard.cancel("the test is over")
        self.release.set()
        for thread, _ in self.threads:
            thread.join(WAIT)


def _warmed(workers: ComponentHost) -> object:
    quick = workers.load_bytes(tool_component("(i32.const 2048)"), name="quick")
    assert workers.call_tool_sync(quick, ToolInput()).status is ToolStatus.PASSED  # ready, bytes sent
    return quick


@pytest.fixture
def behind_others(workers: ComponentHost) -> Iterator[tuple[object, _Passed, _Stalled]]:
    """A quick tool, and the worker's queue holding `FILLERS` stalled calls of another session."""
    quick = _warmed(workers)
    passed = _Passed(workers)
    others = _Stalled(workers, passed, FILLERS)
    yield quick, passed, others
    others.end()


def test_a_queued_call_past_its_deadline_ends_where_it_waits(workers: ComponentHost, behind_others) -> None:
    quick, _passed, others = behind_others
    victim, out = _in_thread(lambda: workers.call_tool_sync(
        quick, ToolInput(), grant=CallGrant(limits=Limits(deadline_seconds=0.5))))
    victim.join(WAIT)
    started = len(others.started)
    assert isinstance(out.get("error"), DeadlineExceeded), out
    assert "deadline exceeded after 0.5 s" in str(out["error"])
    assert started < FILLERS, "the call waited for every call ahead of it before its deadline held"


def test_a_cancel_of_a_queued_call_ends_it_where_it_waits(workers: ComponentHost, behind_others) -> None:
    quick, passed, others = behind_others
    guard = CallGuard(600)
    victim, out = _in_thread(lambda: workers.call_tool_sync(quick, ToolInput(), guard=guard))
    passed.wait_for(FILLERS + 1)  # queued behind the others
    guard.cancel("the caller went away")
    victim.join(WAIT)
    started = len(others.started)
    assert isinstance(out.get("error"), CallCancelled), out
    assert "the caller went away" in str(out["error"])
    assert started < FILLERS, "the cancel waited for every call ahead of it"


@pytest.mark.parametrize("what", ["a request too large to go first", "a component's bytes"])
def test_a_queued_call_that_expires_before_its_rest_is_written_is_told_so(
        workers: ComponentHost, behind_others, what: str) -> None:
    """The worker answers the expiry and closes the socket while the daemon still writes the
    rest of the call on it: the caller reads the answer, not a broken pipe."""
    quick, _passed, _others = behind_others
    tool, data = quick, "x" * (4 << 20)
    if what == "a component's bytes":
        tool, data = workers.load_bytes(tool_component("(i32.const 1024)"), name="fresh"), ""
    victim, out = _in_thread(lambda: workers.call_tool_sync(
        tool, ToolInput(data=data), grant=CallGrant(limits=Limits(deadline_seconds=0.3))))
    victim.join(WAIT)
    assert isinstance(out.get("error"), DeadlineExceeded), out


def test_a_call_answered_before_the_daemons_thread_goes_on_is_read(workers: ComponentHost) -> None:
    """The daemon's thread loses the processor right after passing the call; the worker answers
    and closes the socket meanwhile. Nothing is left to write, and the answer is read."""
    quick = _warmed(workers)
    assert workers.workers is not None
    worker = workers.workers._workers[0]
    real = worker.open_call

    def then_stalled(*args: object) -> None:
        real(*args)  # type: ignore[arg-type]
        time.sleep(0.3)  # a stall injected here: the thread descheduled (the worker answers meanwhile)

    worker.open_call = then_stalled  # type: ignore[method-assign]
    assert workers.call_tool_sync(quick, ToolInput()).status is ToolStatus.PASSED


def test_a_deadline_of_many_days_leaves_the_worker_running(workers: ComponentHost) -> None:
    """A manifest's deadline has no upper bound; the worker's control loop must not pass it to
    `poll` whole (its limit is about 24.8 days)."""
    quick = _warmed(workers)
    assert workers.workers is not None
    for _ in range(3):
        result = workers.call_tool_sync(quick, ToolInput(), grant=CallGrant(limits=Limits(deadline_seconds=30 * 86400)))
        assert result.status is ToolStatus.PASSED
    assert workers.workers.started == 1, "the worker process died and was started again"


def test_a_call_to_a_worker_whose_control_socket_is_full_fails_at_once(workers: ComponentHost) -> None:
    """A worker that stopped reading its control socket is killed: a call's message (the one
    that carries a descriptor) must not wait on the full socket, holding its lock against the
    event loop's cancels, nor wait for the killed process to be freed."""
    quick = _warmed(workers)
    assert workers.workers is not None
    worker = workers.workers._workers[0]
    os.kill(worker.process.pid, signal.SIGSTOP)
    try:
        with worker.control_lock:  # filled to the brim
            while True:
                try:
                    frames.send_control(worker.control, frames.Control(op="cancel", id=0, reason="x"), wait=False)
                except BlockingIOError:
                    break
        caller, out = _in_thread(lambda: workers.call_tool_sync(quick, ToolInput()))
        caller.join(WAIT)
        assert not caller.is_alive(), "the call waited on the worker's full control socket"
        assert isinstance(out.get("error"), InstantiationError), out
        canceller, _ = _in_thread(lambda: worker.cancel(1, "from the event loop"))
        canceller.join(WAIT)
        assert not canceller.is_alive()
        worker.process.wait(WAIT)  # killed, not waited for by the sender (the loop may be it): it ends
        assert not worker.alive()
    finally:
        if worker.alive():
            os.kill(worker.process.pid, signal.SIGCONT)
    assert workers.call_tool_sync(quick, ToolInput()).status is ToolStatus.PASSED  # a new worker


def test_queued_calls_racing_their_deadlines_and_cancels_end_as_one_of_them(
        workers: ComponentHost, behind_others) -> None:
    """80 calls behind stalled ones, with deadlines from 0.1 ms to 5 s and half of them
    cancelled at a random moment: each ends passed, past its deadline or cancelled, answered
    once, and the worker lives on."""
    quick, _passed, _others = behind_others
    chance = random.Random(7)
    calls = []
    for _ in range(80):
        guard = CallGuard(chance.choice([0.0001, 0.01, 0.05, 0.2, 5]))
        calls.append(_in_thread(lambda guard=guard: workers.call_tool_sync(quick, ToolInput(), guard=guard)))
        if chance.random() < 0.5:
            time.sleep(chance.random() * 0.01)  # a random moment, not a wait for anything
            guard.cancel("at random")
    ends = set()
    for thread, out in calls:
        thread.join(WAIT)
        assert not thread.is_alive()
        ended = out.get("error") or out.get("result")
        ends.add(type(ended).__name__ if "error" in out else getattr(ended, "status", ended))
    assert ends <= {"DeadlineExceeded", "CallCancelled", ToolStatus.PASSED}, ends
    assert workers.workers is not None and workers.workers.started == 1


def test_calls_made_together_send_the_compiled_component_once(
        workers: ComponentHost, artifacts, monkeypatch: pytest.MonkeyPatch) -> None:
    _warmed(workers)
    echo = workers.load(artifacts.example("echo"))  # tens of MB compiled
    passed = _Passed(workers)
    sent: list[int] = []
    real = frames.send_raw

    def counting(sock: socket.socket, data: bytes | bytearray) -> None:
        if len(data) > 1 << 20:
            sent.append(len(data))
        real(sock, data)

    monkeypatch.setattr(frames, "send_raw", counting)
    others = _Stalled(workers, passed, 3)  # the calls below queue behind these
    try:
        calls = []
        for i in range(5):
            calls.append(_in_thread(lambda i=i: workers.call_tool_sync(echo, ToolInput(data=f'{{"text": "{i}"}}'))))
            passed.wait_for(3 + i + 1)
        others.end()
        for thread, out in calls:
            thread.join(WAIT)
            assert getattr(out.get("result"), "status", None) is ToolStatus.PASSED, out
        assert len(sent) == 1, f"the compiled component was sent {len(sent)} times"
    finally:
        others.end()


def test_a_call_started_late_in_a_threads_turn_gets_a_turn_of_its_own() -> None:
    """The quantum is summed over the calls one thread runs in a row; a call is started there
    only with half a quantum left, else by the thread waiting for a place, with a fresh one."""
    gate = RunGate(1, quantum=2.0)
    runners = PlaceRunners(gate)
    left: list[float] = []
    done = threading.Event()

    def second() -> None:
        left.append(gate.turn_left())
        done.set()

    with runners._lock:  # both queued at once
        runners._queue.extend([lambda: time.sleep(1.6), second])  # the first holds its place 1.6 s
        runners._wake_one()
    assert done.wait(WAIT)
    assert left[0] > 1.0, f"the second call began with {left[0]:.2f} s of its turn"


def test_a_thread_that_cannot_start_loses_no_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """One place: the first call waits outside it; the thread that then takes the place pops the
    second call with a third queued, and the thread it starts for the third fails to start."""
    gate = RunGate(1, quantum=600)
    runners = PlaceRunners(gate, idle_seconds=600)
    away, answer = threading.Event(), threading.Event()
    ran = threading.Semaphore(0)

    def first() -> None:
        with gate.away(lambda: False):
            away.set()
            answer.wait(WAIT)

    runners.submit(first)
    assert away.wait(WAIT)
    real_start = threading.Thread.start
    armed = threading.Event()

    def start(thread: threading.Thread) -> None:
        if armed.is_set() and thread.name.startswith("murmurd-worker-call"):
            armed.clear()
            raise RuntimeError("can't start new thread")
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", start)
    with runners._lock:  # both queued before any thread looks
        runners._queue.extend([ran.release, ran.release])
        runners._wake_one()  # a new thread to wait for the place (none is idle)
        armed.set()  # the next start, for the third call, fails
    try:
        assert ran.acquire(timeout=WAIT) and ran.acquire(timeout=WAIT), "a queued call never ran"
    finally:
        answer.set()


def test_a_frames_send_keeps_to_the_sockets_timeout_in_all() -> None:
    """As `sendall`: the timeout bounds the whole frame, not each partial send of it."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    stop = threading.Event()

    def trickle() -> None:  # a reader that takes 256 KiB and then waits a while, again and again
        while not stop.is_set() and theirs.recv(256 * 1024):
            stop.wait(0.2)

    reader = threading.Thread(target=trickle, daemon=True)
    reader.start()
    ours.settimeout(0.5)
    try:
        with pytest.raises(TimeoutError):
            frames.send_raw(ours, b"x" * (16 << 20))  # 64 rounds of 0.2 s at that pace
        assert ours.gettimeout() == 0.5  # the socket's own timeout, as it was
    finally:
        stop.set()
        ours.close()
        theirs.close()
        reader.join(WAIT)
