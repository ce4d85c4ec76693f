"""The trace drain (issue 29 item 2): every session's trace written by at most two threads, each
trace's lines in the order they were queued, a barrier that means every line is in the file, a
failed write still sticky and named (E-RUN-007), and no thread once there is nothing to write."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from murmurd import workdir_fs
from murmurd.trace.writer import TraceDrain, TraceWriteError, TraceWriter

pytestmark = pytest.mark.anyio


async def test_many_traces_from_many_threads_keep_their_order_on_two_threads(tmp_path: Path) -> None:
    drain = TraceDrain(threads=2, idle_seconds=0.2)
    writers = []
    for k in range(200):
        root = tmp_path / f"ses_{k}"
        root.mkdir()
        writers.append(TraceWriter(root, "trace.jsonl", f"ses_{k}", drain=drain))
    peak = 0

    def produce(part: list[TraceWriter]) -> None:
        nonlocal peak
        for n in range(50):
            for writer in part:
                writer.write("tick", n=n)
            peak = max(peak, drain.threads)

    producers = [threading.Thread(target=produce, args=(writers[i::4],)) for i in range(4)]
    for producer in producers:
        producer.start()
    for producer in producers:
        await asyncio.to_thread(producer.join, 120)
    await asyncio.gather(*(writer.flush() for writer in writers))  # the barrier: every line is there
    for k, writer in enumerate(writers):
        lines = [json.loads(line) for line in writer.path.read_text().splitlines()]
        assert [line["n"] for line in lines] == list(range(50)), k
        assert {line["session_id"] for line in lines} == {f"ses_{k}"}
    assert 1 <= peak <= 2
    await asyncio.gather(*(writer.aclose() for writer in writers))
    deadline = asyncio.get_running_loop().time() + 60
    while drain.threads and asyncio.get_running_loop().time() < deadline:  # idle: the threads go
        await asyncio.sleep(0.05)
    assert drain.threads == 0


async def test_a_barrier_with_nothing_queued_returns_and_a_failed_write_is_named(tmp_path: Path) -> None:
    drain = TraceDrain(threads=2)
    writer = TraceWriter(tmp_path, "trace.jsonl", "ses_x", drain=drain)
    await writer.flush()  # nothing queued: no hand-off, no thread
    assert drain.threads == 0
    writer.write("first")
    await writer.flush()
    full = os.open("/dev/full", os.O_WRONLY)
    os.dup2(full, writer._file.fileno())
    os.close(full)
    writer.write("task_start")
    writer.write("second")
    with pytest.raises(TraceWriteError, match="E-RUN-007: cannot write task_start to trace .*No space left"):
        await writer.flush()
    with pytest.raises(TraceWriteError, match="cannot write task_start"):
        writer.write("later")  # sticky
    other = TraceWriter(tmp_path, "other.jsonl", "ses_y", drain=drain)  # the drain serves the rest
    other.write("fine")
    await other.flush()
    assert json.loads((tmp_path / "other.jsonl").read_text())["event_type"] == "fine"
    await writer.aclose()
    await other.aclose()


async def test_closing_an_idle_trace_needs_no_drain_thread_and_a_busy_one_writes_every_line(tmp_path: Path) -> None:
    drain = TraceDrain(threads=2)
    root_fd, trace_fd = workdir_fs.lay_down(tmp_path, "ses_idle", workdir_fs.plan_tree((), (), append="trace.jsonl"), ())
    os.close(root_fd)
    assert trace_fd is not None
    idle = TraceWriter(tmp_path / "ses_idle", "trace.jsonl", "ses_idle", drain=drain, fd=trace_fd)
    await idle.aclose()  # nothing queued: closed here, no thread started for it
    assert drain.threads == 0
    assert _names(trace_fd) != str(tmp_path / "ses_idle" / "trace.jsonl")  # the descriptor closed with it
    with pytest.raises(TraceWriteError, match="closed"):
        idle.write("late")
    busy = TraceWriter(tmp_path, "busy.jsonl", "ses_busy", drain=drain)
    for k in range(200):
        busy.write("line", k=k)
    await busy.aclose()  # queued lines: the drain writes them all before the file closes
    assert [json.loads(line)["k"] for line in (tmp_path / "busy.jsonl").read_text().splitlines()] == list(range(200))


def _names(fd: int) -> str | None:
    """What descriptor `fd` of this process is open on now (None: nothing)."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except FileNotFoundError:
        return None


async def test_lines_wake_the_drain_once_per_linger_and_a_barrier_at_once(tmp_path: Path) -> None:
    drain = TraceDrain(threads=2, linger_seconds=3600)  # lines alone would wait an hour
    writers = [TraceWriter(tmp_path, f"t{k}.jsonl", f"ses_{k}", drain=drain) for k in range(10)]
    for n in range(20):
        for writer in writers:
            writer.write("tick", n=n)
    assert drain.wakes == 1  # 200 lines of 10 traces: one thread told to watch the clock
    assert all(writer.path.read_text() == "" for writer in writers)  # and none written yet
    await writers[3].flush()  # a barrier hurries the drain: every waiting trace is written
    assert drain.wakes == 2
    assert [json.loads(line)["n"] for line in writers[3].path.read_text().splitlines()] == list(range(20))
    await asyncio.gather(*(writer.aclose() for writer in writers))
    for writer in writers:
        assert [json.loads(line)["n"] for line in writer.path.read_text().splitlines()] == list(range(20))


async def test_a_line_reaches_the_file_after_the_linger_with_no_barrier(tmp_path: Path) -> None:
    drain = TraceDrain(threads=2, linger_seconds=0.05)
    writer = TraceWriter(tmp_path, "trace.jsonl", "ses_x", drain=drain)
    writer.write("alone")
    deadline = asyncio.get_running_loop().time() + 60
    while writer.path.read_text() == "":  # waits for the drain's own clock, nothing else
        assert asyncio.get_running_loop().time() < deadline, "the line was never written"
        await asyncio.sleep(0.01)
    assert json.loads(writer.path.read_text())["event_type"] == "alone"
    await writer.aclose()


def test_a_blocking_barrier_writes_the_queued_lines_on_its_own_thread(tmp_path: Path) -> None:
    drain = TraceDrain(threads=2, linger_seconds=3600)
    writer = TraceWriter(tmp_path, "trace.jsonl", "ses_x", drain=drain)
    for n in range(5):
        writer.write("tick", n=n)
    assert drain.wakes == 1
    writer.flush_blocking(timeout=60)  # the drain's thread watches an hour's clock: this one writes
    assert [json.loads(line)["n"] for line in writer.path.read_text().splitlines()] == list(range(5))
    assert drain.wakes == 1  # nobody was woken for the barrier
    writer.write("after")  # the trace is the drain's again
    writer.close(timeout=60)
    assert [json.loads(line)["event_type"] for line in writer.path.read_text().splitlines()][-1] == "after"


def test_blocking_barriers_racing_the_drain_each_see_their_lines(tmp_path: Path) -> None:
    """Threads write and flush their traces while the drain writes them too (a linger of 1 ms):
    after every `flush_blocking` the file holds every line its thread queued before it, in order."""
    drain = TraceDrain(threads=2, linger_seconds=0.001)
    writers = [TraceWriter(tmp_path, f"t{k}.jsonl", f"ses_{k}", drain=drain) for k in range(8)]
    failures: list[str] = []

    def produce(mine: list[TraceWriter]) -> None:
        for n in range(300):
            for writer in mine:
                writer.write("tick", n=n)
            if n % 25 == 24:
                for writer in mine:
                    writer.flush_blocking(timeout=60)
                    seen = [json.loads(line)["n"] for line in writer.path.read_text().splitlines()]
                    if seen[: n + 1] != list(range(n + 1)):
                        failures.append(f"{writer.path.name} after {n}: {len(seen)} lines")

    threads = [threading.Thread(target=produce, args=(writers[i::4],)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert failures == []
    for writer in writers:
        writer.close(timeout=60)
        assert [json.loads(line)["n"] for line in writer.path.read_text().splitlines()] == list(range(300))


class _Paused(TraceWriter):
    """A trace whose drain-thread batches wait for `go` (a slow write), and whose batches on a
    thread named `flusher` wait for `flusher_go` (a switch at the worst moment)."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.draining, self.go = threading.Event(), threading.Event()
        self.flusher_paused, self.flusher_go = threading.Event(), threading.Event()

    def _write_batch(self, items) -> None:  # type: ignore[no-untyped-def]
        name = threading.current_thread().name
        if name == "flusher":
            self.flusher_paused.set()
            self.flusher_go.wait(30)
        elif name.startswith("murmurd-trace") and items:
            self.draining.set()
            self.go.wait(30)
        super()._write_batch(items)


def _until(condition, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.005)


def test_a_blocking_barrier_on_an_idle_trace_takes_nothing_from_a_drain_thread(tmp_path: Path) -> None:
    """Attack review: `flush_blocking` on an idle trace claimed nothing, yet released the trace
    afterwards; a drain thread that had taken it meanwhile lost it, and a close then returned
    before the lines were written (they were dropped)."""
    drain = TraceDrain(threads=2, linger_seconds=0)
    writer = _Paused(tmp_path, "trace.jsonl", "ses_x", drain=drain)
    flusher = threading.Thread(target=writer.flush_blocking, kwargs={"timeout": 30}, name="flusher")
    flusher.start()
    _until(lambda: writer.flusher_paused.is_set() or not flusher.is_alive(), "the barrier ran")
    writer.write("l1")
    writer.write("l2")
    assert writer.draining.wait(30)  # a drain thread is writing them, held
    writer.flusher_go.set()
    flusher.join(30)
    closer = threading.Thread(target=writer.close, kwargs={"timeout": 30})
    closer.start()
    _until(lambda: writer._closed, "the close was asked for")
    writer.go.set()
    closer.join(30)
    assert [json.loads(line)["event_type"] for line in writer.path.read_text().splitlines()] == ["l1", "l2"]
    assert writer.failure is None


def test_a_barrier_while_a_close_is_queued_waits_for_the_close(tmp_path: Path) -> None:
    """Attack review (older than the linger): a barrier taken while a close was queued returned
    at once, before the lines queued ahead of it were in the file."""
    drain = TraceDrain(threads=1, linger_seconds=0)
    busy = _Paused(tmp_path, "busy.jsonl", "ses_busy", drain=drain)
    busy.write("slow")
    assert busy.draining.wait(30)  # the one drain thread is held by another trace
    writer = TraceWriter(tmp_path, "trace.jsonl", "ses_x", drain=drain)
    writer.write("l1")
    closer = threading.Thread(target=writer.close, kwargs={"timeout": 30})
    closer.start()
    _until(lambda: writer._closed, "the close was queued")
    seen: list[str] = []
    flusher = threading.Thread(target=lambda: (writer.flush_blocking(timeout=30), seen.append(writer.path.read_text())))
    flusher.start()
    flusher.join(0.5)  # a barrier that does not wait returns here (and then finds no line)
    busy.go.set()
    flusher.join(30)
    closer.join(30)
    assert [json.loads(line)["event_type"] for line in seen[0].splitlines()] == ["l1"]
    busy.close(timeout=30)


def test_lines_with_blocking_barriers_keep_one_drain_thread(tmp_path: Path) -> None:
    """Attack review: a drain thread woken for a line that a blocking barrier then wrote itself
    ended at once, so a session's write-then-barrier started a thread per line."""
    started = []

    class Counting(TraceDrain):
        def _run(self) -> None:
            started.append(threading.current_thread().name)
            super()._run()

    drain = Counting(threads=2, idle_seconds=10)
    writer = TraceWriter(tmp_path, "trace.jsonl", "ses_x", drain=drain)
    for n in range(500):
        writer.write("tick", n=n)
        writer.flush_blocking(timeout=30)
    writer.close(timeout=30)
    assert len(started) <= 2, f"{len(started)} drain threads started"
    assert [json.loads(line)["n"] for line in writer.path.read_text().splitlines()] == list(range(500))


def test_a_thread_waiting_out_a_long_linger_still_ends_when_idle(tmp_path: Path) -> None:
    """Attack review: a drain thread in a linger wait whose lines a blocking barrier took slept
    the whole linger (an hour here) instead of ending after `idle_seconds`."""
    drain = TraceDrain(threads=2, idle_seconds=0.1, linger_seconds=3600)
    writer = TraceWriter(tmp_path, "trace.jsonl", "ses_x", drain=drain)
    writer.write("tick")
    _until(lambda: drain._idle > 0, "a thread waits")
    writer.flush_blocking(timeout=30)
    writer.close(timeout=30)
    _until(lambda: drain.threads == 0, "the drain's threads ended")


def test_a_line_written_through_on_an_idle_trace_wakes_no_drain_thread(tmp_path: Path) -> None:
    """`write_through` (a task's start and end, issue 29): nothing queued, so the line is in the
    file when it returns, written by the calling thread; no drain thread is woken for it."""
    drain = TraceDrain(threads=2, linger_seconds=3600)
    writer = TraceWriter(tmp_path, "trace.jsonl", "ses_x", drain=drain)
    event = writer.write_through("task_start", task_id="task_1")
    assert [json.loads(line) for line in writer.path.read_text().splitlines()] == [event]
    assert drain.wakes == 0 and drain.threads == 0
    writer.write("tick")  # the trace is the drain's again afterwards
    assert drain.wakes == 1
    writer.close(timeout=60)
    assert [json.loads(line)["event_type"] for line in writer.path.read_text().splitlines()] == ["task_start", "tick"]


def test_a_line_written_through_goes_behind_the_lines_queued_and_a_drain_writing_them(tmp_path: Path) -> None:
    """Lines queued before it are written first, by this thread when the drain only holds them
    (its thread lingers), or by the drain thread writing them: the caller waits for it."""
    drain = TraceDrain(threads=2, linger_seconds=3600)
    writer = TraceWriter(tmp_path, "trace.jsonl", "ses_x", drain=drain)
    writer.write("l1")
    writer.write_through("l2")  # the drain's thread watches an hour's clock: this one writes both
    assert [json.loads(line)["event_type"] for line in writer.path.read_text().splitlines()] == ["l1", "l2"]
    writer.close(timeout=60)

    busy = _Paused(tmp_path, "busy.jsonl", "ses_busy", drain=TraceDrain(threads=1, linger_seconds=0))
    busy.write("l1")
    assert busy.draining.wait(30)  # a drain thread is writing it, held
    seen: list[str] = []
    through = threading.Thread(target=lambda: (busy.write_through("l2"), seen.append(busy.path.read_text())))
    through.start()
    through.join(0.2)  # a write-through that did not wait would be done here, its line first
    busy.go.set()
    through.join(30)
    assert [json.loads(line)["event_type"] for line in seen[0].splitlines()] == ["l1", "l2"]
    busy.close(timeout=30)


def test_a_line_written_through_a_failed_or_closed_trace_is_refused_by_name(tmp_path: Path) -> None:
    writer = TraceWriter(tmp_path, "trace.jsonl", "ses_x", drain=TraceDrain(threads=1))
    assert writer._file is not None
    writer._file.close()  # the file refuses the next write
    with pytest.raises(TraceWriteError, match="E-RUN-007: cannot write task_start to trace"):
        writer.write_through("task_start", task_id="task_1")
    with pytest.raises(TraceWriteError, match="task_start"):  # sticky: the first failure is named
        writer.write_through("task_end", task_id="task_1")
    writer.close(timeout=30)
    closed = TraceWriter(tmp_path, "closed.jsonl", "ses_y", drain=TraceDrain(threads=1))
    closed.close(timeout=30)
    with pytest.raises(TraceWriteError, match="is closed"):
        closed.write_through("task_start")


async def test_a_handover_takes_the_queue_and_what_comes_meanwhile_waits_behind_it(tmp_path: Path) -> None:
    """`hand_over` takes the queued events (and a barrier among them) for another writer of the
    file, which appends them with a line of its own; lines written meanwhile queue behind and
    reach the file after; the barrier is released at `settle`, and the counts see every line."""
    drain = TraceDrain(threads=1, idle_seconds=0.2)
    writer = TraceWriter(tmp_path, "trace.jsonl", "ses_h", drain=drain)
    writer.write("one")
    barrier = asyncio.ensure_future(writer.flush())
    await asyncio.sleep(0)  # the barrier is queued behind "one"
    handover = await _handed(writer)
    writer.write("meanwhile")  # queued behind the handover
    end = [writer.event("end", n=1)]
    with open(handover.fd, "a", closefd=False) as other:  # the other process's write, on the same file
        other.write(handover.text(end))
    handover.settle(end, None)
    await asyncio.wait_for(barrier, 60)
    await writer.flush()
    lines = [json.loads(line)["event_type"] for line in writer.path.read_text().splitlines()]
    assert lines == ["one", "end", "meanwhile"]
    assert writer.mark() == 3
    await writer.flush_to(3)
    await writer.aclose()


async def test_a_handover_given_back_writes_nothing_twice_and_loses_nothing(tmp_path: Path) -> None:
    drain = TraceDrain(threads=1, idle_seconds=0.2)
    writer = TraceWriter(tmp_path, "trace.jsonl", "ses_g", drain=drain)
    writer.write("a")
    writer.write("b")
    handover = await _handed(writer)
    assert [e["event_type"] for e in handover.events] in (["a", "b"], [])
    writer.write("c")
    handover.give_back()
    handover.settle([], None)  # once only: a settle after giving back changes nothing
    await writer.flush()
    assert [json.loads(line)["event_type"] for line in writer.path.read_text().splitlines()] == ["a", "b", "c"]
    failing = await _handed(writer)
    failing.settle([writer.event("end")], "No space left on device")
    with pytest.raises(TraceWriteError, match="cannot write end"):
        writer.write("after")
    await writer.aclose()


async def _handed(writer: TraceWriter) -> Any:
    """`hand_over`, once no drain thread is writing the trace (None until then)."""
    async with asyncio.timeout(60):
        while (handover := writer.hand_over()) is None:
            await asyncio.sleep(0.01)
    return handover


async def test_a_line_given_back_with_a_handover_goes_ahead_of_a_close_queued_meanwhile(tmp_path: Path) -> None:
    """The session closed while the other process held its end, which could not be written
    there: the taken lines and the end's own line reach the file before the close (review)."""
    drain = TraceDrain(threads=1, idle_seconds=0.2)
    writer = TraceWriter(tmp_path, "trace.jsonl", "ses_c", drain=drain)
    writer.write("a")
    handover = await _handed(writer)
    closing = asyncio.ensure_future(writer.aclose())
    await asyncio.sleep(0)  # the close is queued behind the handover
    assert not closing.done()
    handover.give_back([writer.event("end")])
    await asyncio.wait_for(closing, 60)
    assert [json.loads(line)["event_type"] for line in writer.path.read_text().splitlines()] == ["a", "end"]
