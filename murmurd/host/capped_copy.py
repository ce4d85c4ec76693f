"""Copying one call's stretch of a guest's stdout or stderr into its log, within a byte cap.

The guest decides how much it writes, and a file that claims a size costs nothing until it is
read (a sparse truncate to terabytes). So the copy goes through a fixed-size buffer, never the
whole stretch in memory, and keeps at most `LOG_BYTES_PER_STREAM` of one call's stream: the
head, a note saying how much was cut, and the last `KEPT_TAIL` bytes, where a trap's message or
a traceback ends. The log's disk use is bounded the same way.
"""

from __future__ import annotations

import os

from murmurd.workdir_fs import write_all

LOG_BYTES_PER_STREAM = 4 * 1024 * 1024
KEPT_TAIL = 64 * 1024
_CHUNK = 64 * 1024


def copy_stretch(source: int, start: int, end: int, sink: int, label: str, *, limit: int = LOG_BYTES_PER_STREAM) -> None:
    """Append `source[start:end]` to the descriptor `sink`; past `limit` bytes keep the head and
    the tail with a note between them naming `label` and how many bytes were cut."""
    length = end - start
    if length <= limit:
        _copy(source, start, end, sink)
        return
    tail = min(KEPT_TAIL, limit // 2)
    head_end = start + limit - tail
    _copy(source, start, head_end, sink)
    cut = length - limit
    write_all(sink, f"\n[murmurd: {cut} bytes of {label} cut here; a call's log keeps at most "
                    f"{limit} bytes of each stream]\n".encode())
    _copy(source, end - tail, end, sink)


def read_tail(source: int, start: int, end: int, size: int) -> bytes:
    """The last `size` bytes of `source[start:end]` (fewer if the stretch is shorter)."""
    count = max(0, min(size, end - start))
    return os.pread(source, count, end - count) if count else b""


def _copy(source: int, start: int, end: int, sink: int) -> None:
    offset = start
    while offset < end:
        chunk = os.pread(source, min(_CHUNK, end - offset), offset)
        if not chunk:  # the file shrank since its size was taken
            return
        write_all(sink, chunk)
        offset += len(chunk)
