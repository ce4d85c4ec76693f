"""The host's run gate (issue 29): guest calls take turns for its places, and no call waits
behind a slow one: host work gives the place up, a hog loses it after a quantum, nested calls
run inside their caller's place, a cancelled call stops waiting."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from hostile import SPIN, tool_component
from murmurd.host import CallCancelled, CallGrant, CallGuard, ComponentHost, DeadlineExceeded, Limits, ToolInput
from murmurd.host.run_gate import GateWaitCancelled, RunGate

WAIT = 60  # what a test waits at most for an event that must happen (a loaded machine)


def _in_thread(target) -> tuple[threading.Thread, list[BaseException]]:  # type: ignore[no-untyped-def]
    raised: list[BaseException] = []

    def run() -> None:
        try:
            target()
        except BaseException as exc:  # noqa: BLE001 - the test reads what it was
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, raised


def _enter(gate: RunGate, entered: threading.Event) -> None:
    """A call that only says it got its place."""
    with gate.call(lambda: False):
        entered.set()


def _hold(gate: RunGate, holding: threading.Event, done: threading.Event) -> None:
    """A call that holds its place until `done` (a guest sleeping inside wasmtime: no host
    import, no epoch check)."""
    with gate.call(lambda: False):
        holding.set()
        done.wait(WAIT)


def test_one_place_is_taken_in_turn_and_host_work_gives_it_up() -> None:
    gate = RunGate(1, quantum=600)  # no hog here: only the turns are tested
    holding, release, host_work, second_in = (threading.Event() for _ in range(4))

    def first() -> None:
        with gate.call(lambda: False):
            holding.set()
            host_work.wait(WAIT)
            with gate.away(lambda: False):  # a host import: the place serves the other call meanwhile
                assert second_in.wait(WAIT)
                release.wait(WAIT)

    a, a_raised = _in_thread(first)
    assert holding.wait(WAIT)
    b, b_raised = _in_thread(lambda: _enter(gate, second_in))
    assert not second_in.wait(0.3)  # the one place is held
    host_work.set()
    assert second_in.wait(WAIT)
    release.set()
    a.join(WAIT), b.join(WAIT)
    assert not a_raised and not b_raised and gate.revoked == 0


def test_a_call_holding_its_place_past_the_quantum_loses_it() -> None:
    gate = RunGate(1, quantum=0.05)
    holding, done, other_in = threading.Event(), threading.Event(), threading.Event()

    a, _ = _in_thread(lambda: _hold(gate, holding, done))
    assert holding.wait(WAIT)
    b, raised = _in_thread(lambda: _enter(gate, other_in))
    assert other_in.wait(WAIT), "the hog kept the only place"
    done.set()
    a.join(WAIT), b.join(WAIT)
    assert not raised and gate.revoked >= 1


def test_turns_given_up_and_taken_back_count_toward_one_quantum() -> None:
    """A call that gives its place up for a moment again and again (a guest looping over a
    waiting host import) still loses it once its turns add up to the quantum; before they were
    summed it could keep the only place for its whole deadline."""
    gate = RunGate(1, quantum=0.05)
    holding, done, other_in = threading.Event(), threading.Event(), threading.Event()

    def looper() -> None:
        with gate.call(lambda: False):
            holding.set()
            while not done.is_set():
                time.sleep(0.005)  # guest code, holding the place
                with gate.away(lambda: False):
                    pass  # the import returns at once: the place is taken back first

    a, a_raised = _in_thread(looper)
    assert holding.wait(WAIT)
    b, b_raised = _in_thread(lambda: _enter(gate, other_in))
    try:
        assert other_in.wait(WAIT), "the looping call kept the only place"
    finally:
        done.set()
    a.join(WAIT), b.join(WAIT)
    assert not a_raised and not b_raised and gate.revoked >= 1


def test_a_call_stopped_while_it_waits_to_come_back_runs_on_without_a_place() -> None:
    gate = RunGate(1, quantum=600)
    away, other_holding, release, back = (threading.Event() for _ in range(4))

    def waiting_call() -> None:
        with gate.call(lambda: False):
            with gate.away(lambda: True):  # cancelled while the host waited for it
                away.set()
                assert other_holding.wait(WAIT)
            back.set()  # it did not wait for the place the other call holds

    def other() -> None:
        assert away.wait(WAIT)
        with gate.call(lambda: False):
            other_holding.set()
            release.wait(WAIT)

    a, a_raised = _in_thread(waiting_call)
    b, b_raised = _in_thread(other)
    assert back.wait(WAIT)
    release.set()
    a.join(WAIT), b.join(WAIT)
    assert not a_raised and not b_raised and gate.held == 0


def test_a_call_nested_in_one_running_free_takes_a_place_of_its_own() -> None:
    gate = RunGate(1, quantum=600)
    free, holding, done, nested_in = (threading.Event() for _ in range(4))

    def outer() -> None:
        with gate.call(lambda: False):
            gate.leave()  # it sent a wasi:http request: it runs free from here on
            free.set()
            assert holding.wait(WAIT)
            _enter(gate, nested_in)  # a tool it invokes

    a, a_raised = _in_thread(outer)
    assert free.wait(WAIT)
    b, _ = _in_thread(lambda: _hold(gate, holding, done))
    assert holding.wait(WAIT)
    assert not nested_in.wait(0.3), "the nested call ran without a place while another held the only one"
    done.set()
    assert nested_in.wait(WAIT)
    a.join(WAIT), b.join(WAIT)
    assert not a_raised


def test_waiting_to_take_the_place_back_after_a_suspended_wait_counts_against_the_deadline() -> None:
    """The clock runs again before the call waits for its place: a deadline passing in that
    wait lets the call run on (to trap at its next epoch check) instead of waiting on."""
    gate = RunGate(1, quantum=600)
    guard = CallGuard(0.3)
    guard.gate = gate
    inside, other_holding, done, back = (threading.Event() for _ in range(4))

    def suspended_call() -> None:
        with gate.call(lambda: False):
            guard.deadline_at = time.monotonic() + guard.deadline_seconds  # what install does
            with guard.suspended():
                inside.set()
                assert other_holding.wait(WAIT)
            back.set()

    a, a_raised = _in_thread(suspended_call)
    assert inside.wait(WAIT)  # its place is given up now
    b, _ = _in_thread(lambda: _hold(gate, other_holding, done))
    try:
        assert back.wait(WAIT), "the call waited for its place past its deadline"
        assert guard.is_set()
    finally:
        done.set()
    a.join(WAIT), b.join(WAIT)
    assert not a_raised


def test_a_nested_call_runs_inside_its_callers_place() -> None:
    gate = RunGate(1, quantum=600)
    entered = threading.Event()

    def outer() -> None:
        with gate.call(lambda: False):
            with gate.call(lambda: False):  # a tool the capsule invokes, on the capsule's thread
                entered.set()

    thread, raised = _in_thread(outer)
    assert entered.wait(WAIT), "the nested call waited for its own caller's place"
    thread.join(WAIT)
    assert not raised


def test_a_call_cancelled_while_it_waits_for_a_place_stops_waiting() -> None:
    gate = RunGate(1, quantum=600)
    holding, done, cancelled = threading.Event(), threading.Event(), threading.Event()

    def waiter() -> None:
        with gate.call(cancelled.is_set):
            pass

    a, _ = _in_thread(lambda: _hold(gate, holding, done))
    assert holding.wait(WAIT)
    b, raised = _in_thread(waiter)
    cancelled.set()
    b.join(WAIT)
    assert not b.is_alive() and len(raised) == 1 and isinstance(raised[0], GateWaitCancelled)
    done.set()
    a.join(WAIT)


def test_the_gate_needs_a_place() -> None:
    with pytest.raises(ValueError, match="at least one place"):
        RunGate(0)


@pytest.fixture
def one_place_host() -> Iterator[ComponentHost]:
    host = ComponentHost(run_places=1)
    yield host
    host.close()


def test_a_spinning_guest_does_not_keep_a_one_place_host_from_other_calls(one_place_host: ComponentHost,
                                                                          artifacts) -> None:
    """A real guest spinning until its deadline (600 s) on a host with one place: another
    component's calls still run, on the place the watchdog took back from the spinner."""
    host = one_place_host
    spin = host.load_bytes(tool_component(SPIN), name="spin")
    echo = host.load(artifacts.example("echo"))
    guard = CallGuard(600)
    spinner, raised = _in_thread(lambda: host.call_tool_sync(
        spin, ToolInput(), grant=CallGrant(limits=Limits(deadline_seconds=600)), guard=guard))
    try:
        for n in range(3):
            assert host.call_tool_sync(echo, ToolInput(data=f'{{"n": {n}}}')).data == f'{{"n": {n}}}'
    finally:
        guard.cancel("test over")
        spinner.join(WAIT)
    assert len(raised) == 1 and isinstance(raised[0], CallCancelled)


def test_a_call_cancelled_while_it_waits_for_a_place_reads_as_cancelled(artifacts) -> None:
    """A host whose place a spinner holds for its whole quantum (600 s here): a call waiting
    for the place is cancelled by its guard, and says so as any cancelled call does."""
    host = ComponentHost(run_places=1)
    host.gate.quantum = 600
    try:
        spin = host.load_bytes(tool_component(SPIN), name="spin")
        echo = host.load(artifacts.example("echo"))
        spinning, waiting = CallGuard(600), CallGuard(600)
        spinner, _ = _in_thread(lambda: host.call_tool_sync(
            spin, ToolInput(), grant=CallGrant(limits=Limits(deadline_seconds=600)), guard=spinning))
        try:
            deadline = time.monotonic() + WAIT
            while host.gate.held == 0:  # the spinner has the place before the other call asks
                assert time.monotonic() < deadline and spinner.is_alive()
                time.sleep(0.01)
            waiter, raised = _in_thread(lambda: host.call_tool_sync(echo, ToolInput(data="{}"), guard=waiting))
            waiting.cancel("gave up waiting")
            waiter.join(WAIT)
            assert len(raised) == 1 and isinstance(raised[0], CallCancelled), raised
            assert "gave up waiting" in str(raised[0])
        finally:
            spinning.cancel("test over")
            spinner.join(WAIT)
    finally:
        host.close()


def test_waiting_for_a_place_counts_against_the_calls_own_deadline(artifacts) -> None:
    host = ComponentHost(run_places=1)
    host.gate.quantum = 600
    try:
        spin = host.load_bytes(tool_component(SPIN), name="spin")
        echo = host.load(artifacts.example("echo"))
        spinning = CallGuard(600)
        spinner, _ = _in_thread(lambda: host.call_tool_sync(
            spin, ToolInput(), grant=CallGrant(limits=Limits(deadline_seconds=600)), guard=spinning))
        try:
            deadline = time.monotonic() + WAIT
            while host.gate.held == 0:
                assert time.monotonic() < deadline and spinner.is_alive()
                time.sleep(0.01)
            with pytest.raises(DeadlineExceeded, match="echo: deadline exceeded after 0.5 s"):
                host.call_tool_sync(echo, ToolInput(data="{}"), grant=CallGrant(limits=Limits(deadline_seconds=0.5)))
        finally:
            spinning.cancel("test over")
            spinner.join(WAIT)
    finally:
        host.close()
