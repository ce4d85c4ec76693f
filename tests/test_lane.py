"""`Lane`, `murmurd serve`'s one thread for short blocking work (real threads): `submit_first`
work runs before `submit` work not yet started, each in submission order, on one thread; a
failure is the submitter's to see; `shutdown` runs what was queued (or cancels it) and refuses
what comes after."""

from __future__ import annotations

import threading
from concurrent.futures import CancelledError, wait

import pytest

from murmurd.lane import Lane

WAIT = 60.0


def _held(lane: Lane) -> tuple[threading.Event, threading.Event]:
    started, gate = threading.Event(), threading.Event()
    lane.submit(lambda: (started.set(), gate.wait(WAIT)))
    assert started.wait(WAIT)
    return started, gate


def test_first_work_goes_ahead_of_queued_work_and_all_of_it_runs_on_one_thread() -> None:
    lane = Lane("test-lane")
    try:
        _started, gate = _held(lane)
        order: list[str] = []
        threads: set[int] = set()

        def note(name: str) -> None:
            order.append(name)
            threads.add(threading.get_ident())

        futures = [lane.submit(note, "rest 1"), lane.submit(note, "rest 2"),
                   lane.submit_first(note, "first 1"), lane.submit_first(note, "first 2")]
        gate.set()
        wait(futures, WAIT)
        assert order == ["first 1", "first 2", "rest 1", "rest 2"]
        assert len(threads) == 1 and threading.get_ident() not in threads
    finally:
        lane.shutdown()


def test_a_failure_is_the_submitters_and_the_lane_goes_on() -> None:
    lane = Lane("test-lane")
    try:
        failed = lane.submit(lambda: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            failed.result(WAIT)
        assert lane.submit(lambda: "still here").result(WAIT) == "still here"
    finally:
        lane.shutdown()


def test_shutdown_runs_what_was_queued_and_refuses_what_comes_after() -> None:
    lane = Lane("test-lane")
    _started, gate = _held(lane)
    queued = [lane.submit(lambda n=n: n) for n in range(5)]
    gate.set()
    lane.shutdown(wait=True)
    assert [f.result(0) for f in queued] == list(range(5))
    with pytest.raises(RuntimeError, match="after shutdown"):
        lane.submit(lambda: None)


def test_shutdown_with_cancel_futures_cancels_what_has_not_started() -> None:
    lane = Lane("test-lane")
    _started, gate = _held(lane)
    queued = [lane.submit(lambda: None), lane.submit_first(lambda: None)]
    closing = threading.Thread(target=lane.shutdown, kwargs={"cancel_futures": True})
    closing.start()
    for future in queued:
        with pytest.raises(CancelledError):
            future.result(WAIT)
    gate.set()
    closing.join(WAIT)
    assert not closing.is_alive()


def test_any_asyncio_loop_takes_it_as_its_default_executor_and_closes_it() -> None:
    import asyncio

    loop = asyncio.new_event_loop()  # asyncio's own loop refuses any but a ThreadPoolExecutor
    lane = Lane("test-lane")
    try:
        loop.set_default_executor(lane)
        name = loop.run_until_complete(asyncio.to_thread(lambda: threading.current_thread().name))
        assert name == "test-lane_0"
        loop.run_until_complete(loop.shutdown_default_executor())
        with pytest.raises(RuntimeError, match="after shutdown"):
            lane.submit(lambda: None)
    finally:
        loop.close()
