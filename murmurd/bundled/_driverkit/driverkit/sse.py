"""Server-sent events, parsed incrementally from the response body's byte chunks (WHATWG rules)."""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator
from dataclasses import dataclass

from driverkit.errors import StreamError


@dataclass(frozen=True)
class Event:
    event: str
    data: str


MAX_LINE_CHARS = 16 * 1024 * 1024
"""A line longer than this (no end in sight) is a broken stream, not one to buffer without end."""
MAX_EVENT_CHARS = 16 * 1024 * 1024
"""The data of one event, all its `data:` lines together."""

_EOL = re.compile(r"\r\n|\r|\n")


class SseParser:
    """Feed bytes, get the complete events; a chunk may split a line or a UTF-8 sequence.

    Linear in the bytes fed: a chunk without a line end is kept aside, never rescanned, so a
    provider sending one endless line costs its length once, and past `MAX_LINE_CHARS` (or an
    event's data past `MAX_EVENT_CHARS`) the stream is refused (`StreamError`)."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._pending: list[str] = []  # the start of a line whose end has not come yet
        self._pending_chars = 0
        self._event = ""
        self._data: list[str] = []
        self._data_chars = 0

    def feed(self, chunk: bytes) -> Iterator[Event]:
        yield from self._push(self._decoder.decode(chunk), final=False)

    def close(self) -> Iterator[Event]:
        """The stream ended: a last line without its newline still counts; a half event is dropped."""
        yield from self._push(self._decoder.decode(b"", final=True), final=True)

    def _keep(self, text: str) -> None:
        self._pending.append(text)
        self._pending_chars += len(text)
        if self._pending_chars > MAX_LINE_CHARS:
            raise StreamError(f"the event stream sent a line longer than {MAX_LINE_CHARS} characters")

    def _push(self, text: str, final: bool) -> Iterator[Event]:
        waiting_cr = bool(self._pending) and self._pending[-1].endswith("\r")
        if not final and not waiting_cr and "\n" not in text and "\r" not in text:
            if text:
                self._keep(text)
            return
        buffer = "".join(self._pending) + text
        self._pending, self._pending_chars = [], 0
        pos = 0
        while True:
            found = _EOL.search(buffer, pos)
            if found is None or (found.group() == "\r" and found.end() == len(buffer) and not final):
                # no line end, or a lone CR at the end that may be the first half of CRLF
                rest = buffer[pos:]
                if found is None and final:
                    if rest:
                        self._field(rest)
                elif rest:
                    self._keep(rest)
                return
            line, pos = buffer[pos:found.start()], found.end()
            if line:
                self._field(line)
                continue
            if self._data:
                yield Event(self._event or "message", "\n".join(self._data))
            self._event, self._data, self._data_chars = "", [], 0

    def _field(self, line: str) -> None:
        if line.startswith(":"):
            return
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
            self._data_chars += len(value) + 1
            if self._data_chars > MAX_EVENT_CHARS:
                raise StreamError(f"the event stream sent an event of more than {MAX_EVENT_CHARS} characters")
