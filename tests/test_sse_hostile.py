"""The drivers' event-stream parser against a hostile provider body (attack review, issue 28:
murmur-driver-deepseek and every bundled driver share it): one endless line or one endless event
is refused with a `StreamError` past its cap instead of being buffered without end, and a long
line fed in small chunks costs its length once (it was rescanned from its start on every chunk:
quadratic); invalid UTF-8 becomes U+FFFD."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "murmurd" / "bundled" / "_driverkit"))

from driverkit.errors import StreamError  # noqa: E402
from driverkit.sse import MAX_EVENT_CHARS, MAX_LINE_CHARS, Event, SseParser  # noqa: E402


def test_an_endless_line_is_refused_past_the_cap() -> None:
    parser = SseParser()
    chunk = b"a" * (1024 * 1024)
    with pytest.raises(StreamError, match="line longer than"):
        for _ in range(MAX_LINE_CHARS // len(chunk) + 2):
            list(parser.feed(chunk))


def test_an_endless_event_is_refused_past_the_cap() -> None:
    parser = SseParser()
    line = b"data: " + b"x" * (1024 * 1024) + b"\n"
    with pytest.raises(StreamError, match="event of more than"):
        for _ in range(MAX_EVENT_CHARS // (1024 * 1024) + 2):
            list(parser.feed(line))


def test_a_long_line_in_small_chunks_is_parsed_in_linear_time() -> None:
    parser = SseParser()
    body = b"data: " + b"y" * (4 * 1024 * 1024) + b"\n\n"
    started = time.monotonic()
    events = [e for i in range(0, len(body), 4096) for e in parser.feed(body[i:i + 4096])]
    elapsed = time.monotonic() - started
    assert events == [Event("message", "y" * (4 * 1024 * 1024))]
    assert elapsed < 30, elapsed  # the rescanning parser took hours for this (1024 chunks x 2 M chars)


def test_invalid_utf8_and_every_line_end_still_parse() -> None:
    parser = SseParser()
    wire = b"data: \xff\xfe ok\r\n\r\ndata: cr\r\rdata: lf\n\n"
    events = [e for b in wire for e in parser.feed(bytes([b]))] + list(parser.close())
    assert events == [Event("message", "\ufffd\ufffd ok"), Event("message", "cr"), Event("message", "lf")]
