"""Epoch advances only when a running call must be looked at: its deadline, or a cancel."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from wasmtime import Store

from hostile import SPIN, tool_component
from murmurd.host import CallCancelled, CallGrant, CallGuard, ComponentHost, DeadlineExceeded, Limits, ToolInput


@pytest.fixture
def own_host() -> Iterator[ComponentHost]:
    host = ComponentHost()
    yield host
    host.close()


def test_calls_that_end_in_time_advance_no_epoch(own_host: ComponentHost, artifacts) -> None:
    echo = own_host.load(artifacts.example("echo"))
    for n in range(20):
        assert own_host.call_tool_sync(echo, ToolInput(data=f'{{"n": {n}}}')).data == f'{{"n": {n}}}'
    assert own_host.ticker.advances == 0


def test_a_deadline_advances_the_epoch_and_stops_the_guest(own_host: ComponentHost) -> None:
    spin = own_host.load_bytes(tool_component(SPIN), name="spin")
    with pytest.raises(DeadlineExceeded, match="spin: deadline exceeded after 0.3 s"):
        own_host.call_tool_sync(spin, ToolInput(), grant=CallGrant(limits=Limits(deadline_seconds=0.3)))
    assert own_host.ticker.advances >= 1


def test_a_guard_cancelled_before_its_call_starts_stops_it_at_once(own_host: ComponentHost) -> None:
    spin = own_host.load_bytes(tool_component(SPIN), name="spin")
    guard = CallGuard(600)  # a deadline the test would never wait for
    guard.cancel("stopped before it began")
    with pytest.raises(CallCancelled, match="stopped before it began"):
        own_host.call_tool_sync(spin, ToolInput(), grant=CallGrant(limits=Limits(deadline_seconds=600)), guard=guard)


def test_cancelling_the_outer_call_stops_a_nested_call_running_now(own_host: ComponentHost) -> None:
    """A tool a capsule invoked runs under a guard whose parent is the capsule's: cancelling the
    capsule's guard, which no epoch was armed for, reaches the nested call's engine."""
    spin = own_host.load_bytes(tool_component(SPIN), name="spin")
    outer = CallGuard(600)
    inner = CallGuard(600, parent=outer)
    raised: list[BaseException] = []

    def run() -> None:
        try:
            own_host.call_tool_sync(spin, ToolInput(), grant=CallGrant(limits=Limits(deadline_seconds=600)), guard=inner)
        except BaseException as exc:  # noqa: BLE001 - the test reads what it was
            raised.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    waited = time.monotonic()
    while not outer._tickers and time.monotonic() - waited < 120:  # the nested call is running
        time.sleep(0.01)
    outer.cancel("capsule cancelled")
    worker.join(timeout=120)
    assert not worker.is_alive()
    assert len(raised) == 1 and isinstance(raised[0], CallCancelled)
    assert "capsule cancelled" in str(raised[0])


def test_a_nested_call_stops_at_its_callers_deadline(own_host: ComponentHost) -> None:
    """A tool a capsule invoked keeps to the capsule's deadline too (the capsule's clock runs on
    while its tool runs): the nested store's check looked at the tool's own deadline alone, so a
    tool granted ten minutes outlived a capsule granted a fraction of a second by all of them."""
    spin = own_host.load_bytes(tool_component(SPIN), name="spin")
    outer = CallGuard(0.3)
    inner = CallGuard(600, parent=outer)
    raised: list[BaseException] = []

    def run() -> None:
        outer.install(Store(own_host.engine))  # the capsule's call, its clock started
        with own_host.ticker.active(outer):  # and running, in the tool it invoked
            try:
                own_host.call_tool_sync(spin, ToolInput(), grant=CallGrant(limits=Limits(deadline_seconds=600)),
                                        guard=inner)
            except BaseException as exc:  # noqa: BLE001 - the test reads what it was
                raised.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive(), "the nested call ran on past its caller's deadline"
    assert len(raised) == 1 and isinstance(raised[0], DeadlineExceeded)
    assert "spin: deadline exceeded after 0.3 s" in str(raised[0])  # the capsule's deadline


def test_a_call_waiting_with_its_clock_stopped_costs_no_tick(own_host: ComponentHost) -> None:
    """A call in a host import that stops its clock (waiting for a human, a peer, the driver) is
    not due, however long it waits: it was, once its nominal deadline passed, and the ticker
    advanced the epoch every 10 ms (each advance a callback in every store running on the engine)
    for as long as the wait lasted. The first advance here is the other call's deadline's."""
    waiting, other = CallGuard(0.05), CallGuard(3)
    waiting.install(Store(own_host.engine))
    other.install(Store(own_host.engine))
    with own_host.ticker.active(waiting), waiting.suspended(), own_host.ticker.active(other):
        started = time.monotonic()
        while own_host.ticker.advances == 0 and time.monotonic() - started < 120:
            time.sleep(0.01)
        assert time.monotonic() >= other.deadline_at, "the epoch advanced for a call whose clock was stopped"
    assert other.deadline_at < waiting.deadline_at < float("inf")  # moved on by the wait, then running again


def test_a_deadline_that_moved_during_a_wait_is_still_watched(own_host: ComponentHost) -> None:
    """A call alone on the ticker whose suspended wait outlasts its deadline: the ticker, woken
    at the old deadline and finding nothing due, must be told when the clock runs again, or a
    guest spinning after the wait is never stopped."""
    guard = CallGuard(0.05)
    guard.install(Store(own_host.engine))
    with own_host.ticker.active(guard):
        with guard.suspended():
            time.sleep(0.2)  # past the nominal deadline: the ticker looked, and nothing was due
        started = time.monotonic()
        while own_host.ticker.advances == 0 and time.monotonic() - started < 120:
            time.sleep(0.01)
    assert own_host.ticker.advances >= 1, "the moved deadline was never looked at"
