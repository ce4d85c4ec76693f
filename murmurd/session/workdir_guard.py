"""`capabilities.resources.workdir_max_bytes`: the workdir's size bound (`E-RUN-013`).

Upstream walks the workdir every 10 s; a breach ends the session with `E-RUN-013` and blocks
every further subprocess. murmurd walks it every `interval` seconds while a shell command runs
(on a thread of the command's own; the command is killed when the walk finds the bound passed)
and when a command ends, unless a walk finished less than `interval` ago (so a session of many
short commands walks at most once per interval); and every `interval` for as long as the session
is open (`walk_periodically`, what a component writing files is found by: its next tool call
ends the session). From the first breach on the guard stays tripped: no other
shell command of the session starts, and the session ends (`murmurd.session.tools`).

The size is disk use (`st_blocks`, as `du` counts it), each inode once, never following a
symlink; a walk stops as soon as it has seen more than the bound.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from murmurd.session.own_thread import on_own_thread

CODE = "E-RUN-013"
CHECK_SECONDS = 10.0


class Flag(Protocol):
    def is_set(self) -> bool: ...


def disk_use_past(root: Path, bound: int) -> int:
    """The workdir's disk use, counted until it exceeds `bound` (then the count so far).

    Directories are opened by descriptor relative to their parent with `O_NOFOLLOW`, so a guest
    that swaps a directory for a symlink mid-walk never leads the walk outside the workdir."""
    total = 0
    seen: set[tuple[int, int]] = set()
    try:
        pending = [os.open(root, _DIRECTORY_FLAGS)]
    except OSError:
        return 0
    try:
        while pending:
            fd = pending.pop()
            try:
                total = _count_directory(fd, total, bound, seen, pending)
            finally:
                os.close(fd)
            if total > bound:
                return total
        return total
    finally:
        for fd in pending:
            os.close(fd)


_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _count_directory(fd: int, total: int, bound: int, seen: set[tuple[int, int]], pending: list[int]) -> int:
    try:
        entries = list(os.scandir(fd))
    except OSError:
        return total  # vanished, or a directory the walk may not read
    for entry in entries:
        try:
            info = os.stat(entry.name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            continue
        if (info.st_dev, info.st_ino) in seen:
            continue
        seen.add((info.st_dev, info.st_ino))
        total += info.st_blocks * 512
        if total > bound:
            return total
        if entry.is_dir(follow_symlinks=False):
            try:
                pending.append(os.open(entry.name, _DIRECTORY_FLAGS, dir_fd=fd))
            except OSError:
                continue  # replaced by a symlink or removed since it was listed
    return total


@dataclass
class WorkdirGuard:
    """One session's workdir bound; `breach` is the `E-RUN-013` message once it was passed."""

    root: Path
    bound: int
    interval: float = CHECK_SECONDS
    breach: str | None = None
    _walked_at: float | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def check(self) -> bool:
        """Walk the workdir; True (and `breach` set) when it is past the bound."""
        if self.breach is not None:
            return True
        used = disk_use_past(self.root, self.bound)
        self._walked_at = time.monotonic()
        if used > self.bound:
            with self._lock:
                if self.breach is None:
                    self.breach = (f"{CODE}: the workdir holds more than capabilities.resources.workdir_max_bytes "
                                   f"({self.bound} bytes; at least {used} found): the session ends and no further "
                                   "shell command runs")
        return self.breach is not None

    def check_if_due(self) -> bool:
        """`check`, unless a walk finished less than `interval` ago (then the last answer)."""
        if self.breach is None and (self._walked_at is None or time.monotonic() - self._walked_at >= self.interval):
            return self.check()
        return self.breach is not None

    def watch(self, cancel: Flag | None = None) -> CommandWatch:
        """Walk every `interval` seconds until the returned watch is stopped."""
        return CommandWatch(self, cancel)


class CommandWatch:
    """The walks while one command runs. A cancel flag for the shell runner: set when the
    caller's own `cancel` is, or once a walk found the bound passed (`breached`)."""

    def __init__(self, guard: WorkdirGuard, cancel: Flag | None = None) -> None:
        self.guard = guard
        self.cancel = cancel
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="murmurd-workdir-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(self.guard.interval):
            if self.guard.check():
                return

    def breached(self) -> bool:
        return self.guard.breach is not None

    def is_set(self) -> bool:
        return self.breached() or (self.cancel is not None and self.cancel.is_set())

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


async def walk_periodically(guard: WorkdirGuard) -> None:
    """Walk (off the event loop) every `interval` seconds until the bound is passed or cancelled."""
    while True:
        await asyncio.sleep(guard.interval)
        if await on_own_thread(guard.check_if_due):  # a walk of a large tree takes a while
            return
