"""Server-sent events, parsed incrementally from the response body's byte chunks (WHATWG rules)."""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Event:
    event: str
    data: str


class SseParser:
    """Feed bytes, get the complete events; a chunk may split a line or a UTF-8 sequence."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._buffer = ""
        self._event = ""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> Iterator[Event]:
        self._buffer += self._decoder.decode(chunk)
        yield from self._lines(final=False)

    def close(self) -> Iterator[Event]:
        """The stream ended: a last line without its newline still counts; a half event is dropped."""
        self._buffer += self._decoder.decode(b"", final=True)
        yield from self._lines(final=True)

    def _lines(self, final: bool) -> Iterator[Event]:
        while True:
            cut = _line_end(self._buffer)
            if cut is None:
                if final and self._buffer:
                    line, self._buffer = self._buffer, ""
                    self._field(line)
                return
            line, rest = self._buffer[: cut[0]], self._buffer[cut[1] :]
            if cut[1] == len(self._buffer) and self._buffer.endswith("\r") and not final:
                return  # a lone CR at the end may be the first half of CRLF
            self._buffer = rest
            if line:
                self._field(line)
                continue
            if self._data:
                yield Event(self._event or "message", "\n".join(self._data))
            self._event, self._data = "", []

    def _field(self, line: str) -> None:
        if line.startswith(":"):
            return
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)


def _line_end(text: str) -> tuple[int, int] | None:
    """(end of the first line, start of the next) for LF, CRLF or CR endings."""
    for i, ch in enumerate(text):
        if ch == "\n":
            return i, i + 1
        if ch == "\r":
            return (i, i + 2) if text[i + 1 : i + 2] == "\n" else (i, i + 1)
    return None
