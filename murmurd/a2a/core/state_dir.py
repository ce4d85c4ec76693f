"""The daemon's state directory, held by one daemon at a time.

Two daemons on one state directory would each think they own its tasks: the second one marks
the first one's running task failed at start-up. `StateDirLock` takes an exclusive `flock` on
`<state-dir>/daemon.lock` for the daemon's lifetime (the kernel drops it when the process dies,
even by SIGKILL, so a crash never leaves a stale lock) and writes who holds it, so a second
daemon refuses to start and names the holder.
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
import time
from pathlib import Path
from typing import Any

LOCK_FILENAME = "daemon.lock"
_MAX_HOLDER_BYTES = 4096


class StateDirError(Exception):
    """The state directory cannot be used; the message says why and what to do."""


class StateDirLock:
    def __init__(self, state_dir: Path, fd: int) -> None:
        self.state_dir = state_dir
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, state_dir: Path) -> StateDirLock:
        """Create the directory if needed and lock it, or raise `StateDirError`."""
        state_dir = Path(state_dir)
        _ensure_directory(state_dir)
        path = state_dir / LOCK_FILENAME
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise StateDirError(f"state directory {state_dir}: cannot open {path.name}: {exc.strerror}") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise StateDirError(f"state directory {state_dir}: {path.name} is not a regular file; remove it")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _describe_holder(_read_holder(fd))
            os.close(fd)
            raise StateDirError(
                f"state directory {state_dir} is in use by another murmurd ({holder}); "
                "stop that daemon or pass another --state-dir"
            ) from None
        lock = cls(state_dir, fd)
        lock.record_holder()
        return lock

    def record_holder(self, **details: Any) -> None:
        """Write who holds the lock (pid, start time, and whatever the daemon adds, e.g. its URL)."""
        if self._fd is None:
            return
        holder = {"pid": os.getpid(), "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **details}
        data = json.dumps(holder).encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)

    def release(self) -> None:
        if self._fd is None:
            return
        os.ftruncate(self._fd, 0)
        os.close(self._fd)  # closing the descriptor drops the flock
        self._fd = None


def _ensure_directory(state_dir: Path) -> None:
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise StateDirError(
            f"state directory {state_dir} exists and is not a directory; "
            "move it aside or pass another --state-dir"
        ) from None
    except NotADirectoryError:
        raise StateDirError(f"state directory {state_dir}: a parent of it is not a directory") from None
    except OSError as exc:
        raise StateDirError(f"state directory {state_dir}: cannot create it: {exc.strerror}") from None
    if not state_dir.is_dir():
        raise StateDirError(f"state directory {state_dir} is not a directory; pass a directory")


def _read_holder(fd: int) -> dict[str, Any]:
    try:
        holder = json.loads(os.pread(fd, _MAX_HOLDER_BYTES, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}


def _describe_holder(holder: dict[str, Any]) -> str:
    parts = [f"{key} {holder[key]}" for key in ("pid", "url", "since") if isinstance(holder.get(key), str | int)]
    return ", ".join(parts) or "holder unknown"
