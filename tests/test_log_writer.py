"""`murmurd.log_writer`: the log written from a thread of its own, the caller only queueing."""

from __future__ import annotations

import io
import json
import logging
import os
import select
import threading

import pytest

from murmurd import logsetup
from murmurd.log_writer import BackgroundStreamHandler


class HeldStream(io.StringIO):
    """A stream whose first write waits until released (a reader that stopped reading)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.entered = threading.Event()  # a write is waiting
        self.writes: list[tuple[int, str]] = []  # (thread, text)

    def write(self, text: str) -> int:
        self.entered.set()
        self.release.wait(60)
        self.writes.append((threading.get_ident(), text))
        return super().write(text)


def _logger(name: str, handler: logging.Handler) -> logging.Logger:
    log = logging.getLogger(f"test.log_writer.{name}")
    log.handlers[:] = [handler]
    log.propagate = False
    log.setLevel(logging.INFO)
    return log


def test_the_caller_never_waits_on_the_stream_and_queued_lines_share_one_write() -> None:
    stream = HeldStream()
    handler = BackgroundStreamHandler(stream)
    handler.setFormatter(logsetup.TextFormatter())
    log = _logger("held", handler)
    try:
        log.info("first %d", 1, extra={"task_id": "tsk_1"})  # the writer takes it and waits on the stream
        for n in range(2, 101):  # all of these return although nothing can be written
            log.info("line %d", n)
        assert stream.getvalue() == ""
        stream.release.set()
        handler.flush()
    finally:
        handler.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 100 and lines[0].endswith("first 1 task_id=tsk_1") and lines[-1].endswith("line 100")
    assert [int(line.split()[-1]) for line in lines[1:]] == list(range(2, 101))  # in order
    assert threading.get_ident() not in {thread for thread, _ in stream.writes}
    assert len(stream.writes) <= 3  # the first line, then what queued meanwhile in one write (or two)


def test_an_exception_is_rendered_where_it_was_raised_and_other_handlers_keep_it() -> None:
    stream = io.StringIO()
    handler = BackgroundStreamHandler(stream)
    handler.setFormatter(logsetup.TextFormatter())
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    log = _logger("exception", handler)
    log.addHandler(Keep())
    try:
        try:
            raise KeyError("the key named here")
        except KeyError:
            log.exception("lookup failed for %s", "ctx-1")
        handler.flush()
    finally:
        handler.close()
    text = stream.getvalue()
    assert "ERROR test.log_writer.exception: lookup failed for ctx-1\nTraceback" in text
    assert "KeyError: 'the key named here'" in text
    assert seen[0].exc_info is not None and seen[0].args == ("ctx-1",)  # the original is untouched


def test_lines_on_a_descriptor_never_share_a_write_with_half_a_line() -> None:
    """Each write holds whole lines, at most PIPE_BUF bytes (a longer line alone): a line printed
    straight to the same pipe by another thread lands between lines, never inside one."""
    read_end, write_end = os.pipe()
    stream = os.fdopen(write_end, "w")
    handler = BackgroundStreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    log = _logger("pipe", handler)
    received = bytearray()
    reader = threading.Thread(target=lambda: _read_all(read_end, received))
    reader.start()
    try:
        for n in range(300):
            log.info("log-%03d-%s", n, "x" * 60)
            if n % 50 == 0:
                os.write(write_end, f"other-{n}\n".encode())  # a direct write, one system call
        log.info("long-%s", "y" * (2 * select.PIPE_BUF))
        handler.flush()
    finally:
        handler.close()
        stream.close()
        reader.join(60)
    lines = received.decode().splitlines()
    logged = [line for line in lines if line.startswith("log-")]
    assert logged == [f"log-{n:03d}-{'x' * 60}" for n in range(300)]
    assert sorted(line for line in lines if line.startswith("other-")) == sorted(f"other-{n}" for n in range(0, 300, 50))
    assert lines.count("long-" + "y" * (2 * select.PIPE_BUF)) == 1
    assert len(lines) == 300 + 6 + 1  # nothing cut, nothing joined


def _read_all(fd: int, into: bytearray) -> None:
    with os.fdopen(fd, "rb") as source:
        while chunk := source.read1(65536):
            into.extend(chunk)


def test_a_record_after_close_starts_another_writer() -> None:
    stream = io.StringIO()
    handler = BackgroundStreamHandler(stream)
    log = _logger("reopen", handler)
    log.info("before")
    handler.close()  # what was queued is written first
    assert stream.getvalue() == "before\n"
    log.info("after")
    handler.flush()
    handler.close()
    assert stream.getvalue() == "before\nafter\n"


CHILD = r"""
import logging, sys, threading
from murmurd import logsetup
logsetup.configure("text", "info")
log = logging.getLogger("murmurd.child")

def talk(name):
    for n in range(300):
        log.info("%s log %d", name, n)
        print(f"{name} print {n}", file=sys.stderr)  # two writes: the text, then its newline
        sys.stderr.write(f"{name} part ")
        sys.stderr.write(f"{n}\n")

threads = [threading.Thread(target=talk, args=(f"t{i}",)) for i in range(3)]
for t in threads: t.start()
for t in threads: t.join()
log.info("peer said %s", "x\nFORGED 2026-01-01T00:00:00.000Z INFO murmurd.tasks: task finished")
log.info("last line before the crash")
raise SystemExit("the last error")
"""


def test_what_is_printed_to_stderr_shares_the_writer_whole_lines_in_order(tmp_path) -> None:
    """`serve` configured: prints from many threads are never cut by log lines nor overtake the
    ones logged before them, a peer's newline forges no line, and the last error comes after
    everything logged before it."""
    import subprocess
    import sys

    from tests.a2akit import ROOT

    proc = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True, timeout=120)
    lines = proc.stderr.splitlines()
    assert proc.returncode == 1 and lines[-1] == "the last error"
    assert lines[-2].endswith("murmurd.child: last line before the crash")
    assert any(line.endswith("peer said x\\nFORGED 2026-01-01T00:00:00.000Z INFO murmurd.tasks: task finished")
               for line in lines)
    assert not any(line.startswith("FORGED") for line in lines)
    for name in ("t0", "t1", "t2"):
        mine = [line for line in lines if f"{name} " in line]
        expected = []
        for n in range(300):
            expected += [f"murmurd.child: {name} log {n}", f"{name} print {n}", f"{name} part {n}"]
        assert len(mine) == len(expected)
        for line, want in zip(mine, expected):  # every line whole, each thread's in its order
            assert line == want or (want.startswith("murmurd.child") and line.endswith(" INFO " + want)), (line, want)
    assert len(lines) == 3 * 900 + 3


@pytest.mark.parametrize("bound", [50, 600])  # below and above the lines one write takes
def test_a_reader_that_stopped_reading_costs_a_bounded_queue_and_the_drops_are_said_where(bound: int) -> None:
    stream = HeldStream()
    handler = BackgroundStreamHandler(stream, max_pending=bound)
    log = _logger(f"bounded{bound}", handler)
    try:
        log.info("first")  # the writer takes it and waits on the stream
        assert stream.entered.wait(60)
        for n in range(1000):
            log.info("line %d", n)
        stream.release.set()
        handler.flush()
        log.info("after")
        for n in range(1000, 1000 + 2 * bound):  # and again, with no reader: a second gap
            log.info("line %d", n)
        handler.flush()
    finally:
        handler.close()
    lines = stream.getvalue().splitlines()
    said = [n for n, line in enumerate(lines) if "log lines dropped here" in line]
    assert lines[:bound + 2] == ["first", *[f"line {n}" for n in range(bound)], f"{1000 - bound} log lines dropped here: "
                                 "stderr was not read as fast as they came"]
    assert lines[bound + 2] == "after" and said[0] == bound + 1
    after = [line for line in lines[bound + 3:] if line.startswith("line ")]  # the writer keeps up or not:
    assert after == [f"line {n}" for n in range(1000, 1000 + len(after))] or len(said) == 2  # a gap is said


def test_the_drop_note_is_a_record_of_the_logs_format() -> None:
    stream = HeldStream()
    handler = BackgroundStreamHandler(stream, max_pending=5)
    handler.setFormatter(logsetup.json_formatter())
    log = _logger("bounded-json", handler)
    try:
        log.info("first")
        assert stream.entered.wait(60)
        for n in range(20):
            log.info("line %d", n)
        stream.release.set()
        handler.flush()
    finally:
        handler.close()
    records = [json.loads(line) for line in stream.getvalue().splitlines()]  # every line JSON
    note = records[-1]
    assert note["level"] == "WARNING" and note["logger"] == "murmurd.log"
    assert note["message"].startswith("15 log lines dropped here")


def test_the_byte_bound_holds_the_same_after_lines_were_dropped() -> None:
    """Each time the reader stops, as many lines are kept as the first time: what the queue
    counts is given back exactly as its lines are written (the drop notes counted nothing)."""
    stream = HeldStream()
    handler = BackgroundStreamHandler(stream, max_pending_bytes=10 * (len("line 000") + 256) + 50)
    log = _logger("bytes", handler)
    kept: list[int] = []
    try:
        for cycle in range(3):
            stream.release.clear()
            stream.entered.clear()
            log.info("held %d", cycle)  # the writer takes it and waits on the stream
            assert stream.entered.wait(60)
            for n in range(100, 140):
                log.info("line %d", n)
            stream.release.set()
            handler.flush()
            lines = stream.getvalue().splitlines()
            kept.append(len([line for line in lines[lines.index(f"held {cycle}"):] if line.startswith("line ")]))
    finally:
        stream.release.set()
        handler.close()
    assert kept == [10, 10, 10]


class CountedStream(io.StringIO):
    """A stream with no descriptor, its writes counted (the handler writes it as a stream)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0
        self.wrote = threading.Event()

    def write(self, text: str) -> int:
        self.writes += 1
        written = super().write(text)
        self.wrote.set()
        return written


def _lingering(monkeypatch: pytest.MonkeyPatch, seconds: float, name: str) -> tuple[CountedStream, logging.Logger]:
    """A handler whose writer lingers `seconds`, started and idle (its first line written)."""
    from murmurd import log_writer

    monkeypatch.setattr(log_writer, "LINGER_SECONDS", seconds)
    stream = CountedStream()
    handler = BackgroundStreamHandler(stream)
    handler.setFormatter(logsetup.TextFormatter())
    log = _logger(name, handler)
    log.warning("started")
    assert stream.wrote.wait(60)
    stream.wrote.clear()
    return stream, log


def _until_written(stream: CountedStream, text: str) -> None:
    """Wait (bounded, far below the linger) for `text` to be written."""
    for _ in range(600):
        if text in stream.getvalue():
            return
        stream.wrote.wait(0.1)
        stream.wrote.clear()
    raise AssertionError(f"{text!r} was not written: {stream.getvalue()!r}")


def test_lines_that_come_one_by_one_share_the_writers_wake_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """A line arriving while the writer is idle wakes it; the writer lingers before it writes, so
    the lines that follow within the linger share that write (without the linger, each line
    coming after the last write is a wake-up and a write of its own). A flush cuts it short."""
    stream, log = _lingering(monkeypatch, 60.0, "linger")  # far longer than the lines take
    handler = log.handlers[0]
    try:
        for n in range(20):
            log.info("spaced %d", n)
            threading.Event().wait(0.005)  # each line after the writer has had time to wake
        handler.flush()  # not held by the linger (FLUSH_SECONDS is far shorter than it)
        assert stream.writes == 2  # the first line, then the twenty in one
        assert [line.split()[-1] for line in stream.getvalue().splitlines()][1:] == [str(n) for n in range(20)]
    finally:
        handler.close()


def test_a_warning_is_not_held_back_by_a_linger(monkeypatch: pytest.MonkeyPatch) -> None:
    """The line before a crash is the one an operator needs: a warning (or worse) cuts the
    linger short and is written with what waited before it, in order."""
    stream, log = _lingering(monkeypatch, 600.0, "warning")
    try:
        log.info("before")
        log.warning("the warning")
        _until_written(stream, "the warning")  # long before the linger's end
        assert [line.rsplit(": ", 1)[-1] for line in stream.getvalue().splitlines()] == ["started", "before", "the warning"]
    finally:
        log.handlers[0].close()
