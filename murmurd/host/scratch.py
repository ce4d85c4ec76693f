"""Unnamed scratch files for guests' stdout and stderr, lent to one call at a time.

Making an `O_TMPFILE` file and freeing it again cost a tenth of a millisecond per call, so
the host keeps the files it made and lends each to one call at a time. A file goes back only
once the store that wrote to it is closed: wasmtime writes a guest's stdio synchronously on the
thread running the guest (`OutputFile::write`) and its handles to the file live in the store, so
after `Store.close` nothing of that call can write to it any more (`tests/test_host_scratch.py`
counts the open descriptors of a returned file to show it). A returned file is emptied at
once, and wasmtime's own open truncates it again, so no call reads what an earlier call
(another session's guest) wrote. Files are kept per file system (`st_dev`), at most `keep` of
each; the rest are closed. Every call borrows from the temporary directory's files
(`wasi.CallOutput`), a logged call two: none is beneath a session's workdir, so a kept one holds
nothing of a session that has closed.
"""

from __future__ import annotations

import os
import threading


class ScratchFiles:
    """The scratch files not lent out now, per file system (`st_dev`). Thread-safe."""

    def __init__(self, keep: int = 16) -> None:
        self.keep = keep
        self._free: dict[int, list[int]] = {}
        self._lock = threading.Lock()
        self._closed = False
        self.made = 0  # files created (a pool miss each): what a test and the bench read

    def take(self, device: int) -> int | None:
        """A free scratch file on `device`; None when there is none (the caller makes one)."""
        with self._lock:
            free = self._free.get(device)
            if free:
                return free.pop()
            self.made += 1
            return None

    def give_back(self, device: int, fd: int, size: int | None = None) -> None:
        """Return `fd` once no store can write to it any more: emptied, then kept or closed.
        `size`: its size when the caller has just read it."""
        try:
            if size is None:
                size = os.fstat(fd).st_size
            if size:
                os.ftruncate(fd, 0)
        except OSError:
            os.close(fd)
            return
        with self._lock:
            free = self._free.setdefault(device, [])
            if not self._closed and len(free) < self.keep:
                free.append(fd)
                return
        os.close(fd)

    def kept(self) -> list[int]:
        """The descriptors kept now, not lent out."""
        with self._lock:
            return [fd for free in self._free.values() for fd in free]

    def free_count(self) -> int:
        return len(self.kept())

    def close(self) -> None:
        """Close every kept file; files lent out now are closed when they come back."""
        with self._lock:
            self._closed = True
            kept = [fd for free in self._free.values() for fd in free]
            self._free.clear()
        for fd in kept:
            os.close(fd)
