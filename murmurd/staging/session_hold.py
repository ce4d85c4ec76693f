"""A session directory in use: a shared `flock` on the directory, held while its Session lives.

`murmurd gc` and `run --keep-sessions` remove old session directories; a directory some process
still runs a session in (a `serve` daemon's, another `run`'s) must survive them. Every Session
takes a shared lock on its session directory when it is created and drops it when it closes (or
when the process dies: the kernel drops it then); a remover takes an exclusive lock without
waiting and leaves the directory alone when it cannot. Standard library only.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class SessionHold:
    """The shared lock of one session directory (None fd: the directory could not be locked)."""

    def __init__(self, directory: Path) -> None:
        self._fd: int | None = None
        try:
            fd = os.open(directory, _DIR_FLAGS)
        except OSError:
            return  # the session fails elsewhere, with its own message; no hold to keep
        self._take(fd)

    @classmethod
    def of_descriptor(cls, fd: int) -> SessionHold:
        """Hold the directory open on `fd`, which the hold then owns: a session workdir just laid
        down is held at once, without opening it again."""
        hold = cls.__new__(cls)
        hold._fd = None
        hold._take(fd)
        return hold

    @classmethod
    def of_held(cls, fd: int | None) -> SessionHold:
        """Own `fd`, whose open file already holds the shared lock: the file process took it when
        it laid the workdir down and handed the descriptor over (a lock goes with its open file).
        None: it could not (a remover held the directory that instant), and the session runs
        unprotected, as `of_descriptor` leaves it then."""
        hold = cls.__new__(cls)
        hold._fd = fd
        return hold

    def hand_over(self) -> int:
        """The held descriptor, for another process to own; this hold then holds nothing."""
        fd, self._fd = self._fd, None
        if fd is None:
            raise ValueError("nothing is held")
        return fd

    def _take(self, fd: int) -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)  # a remover holds it this instant: the session runs unprotected
            return
        self._fd = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __del__(self) -> None:
        self.release()


@contextlib.contextmanager
def exclusive(directory: Path) -> Iterator[bool]:
    """Hold `directory` exclusively for the block: True when no session holds it (remove it
    then), False when one does or it is not a plain directory (leave it)."""
    try:
        fd = os.open(directory, _DIR_FLAGS)
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        yield True
    finally:
        os.close(fd)
