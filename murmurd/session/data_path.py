"""Read a tool's `data-path` result beneath the session workdir (seed: "Returning a large result").

`read_data_path` percent-decodes the name first (so `%2e%2e` is `..` and `%2F...` is absolute),
then refuses, in this order: an empty name or a NUL byte, an absolute path, any `..`
component, a symlink anywhere on the path (wherever it points, even inside the workdir), a
missing file, anything that is not a regular file, and a file over `max_bytes` (10 MiB).

Every component below `root` is checked with lstat and opened relative to its parent's
descriptor with `O_NOFOLLOW`, so a component swapped for a symlink between the check and the
open is refused too. `root` itself (the workdir the runtime created) is trusted. At most
`max_bytes + 1` bytes are read, whatever the file claims its size is. The text is decoded as
UTF-8 with invalid bytes replaced.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote

MAX_DATA_BYTES = 10 * 1024 * 1024

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_CHUNK = 1024 * 1024


class DataPathError(ValueError):
    """A `data-path` the runtime refuses to read; the message names the path and the rule."""

    def __init__(self, data_path: str, decoded: str, rule: str) -> None:
        shown = repr(data_path) if decoded == data_path else f"{data_path!r} (decoded {decoded!r})"
        super().__init__(f"data-path {shown}: {rule}")
        self.data_path = data_path
        self.rule = rule


def read_data_path(root: Path, data_path: str, max_bytes: int = MAX_DATA_BYTES) -> str:
    """The text of the regular file `data_path` names beneath `root`; `DataPathError` otherwise."""
    if max_bytes < 0:
        raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
    decoded = unquote(data_path)

    def refuse(rule: str) -> DataPathError:
        return DataPathError(data_path, decoded, rule)

    if not decoded:
        raise refuse("names no file")
    if "\x00" in decoded:
        raise refuse("holds a NUL byte")
    if decoded.startswith("/"):
        raise refuse("is absolute; name a file relative to the session workdir")
    parts = decoded.split("/")
    if ".." in parts:
        raise refuse("climbs out with '..'")
    parts = [part for part in parts if part not in ("", ".")]
    if not parts:
        raise refuse("names the session workdir itself, not a file")

    try:
        dir_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise refuse(f"the session workdir {str(root)!r} cannot be opened: {exc.strerror}") from None
    try:
        walked: list[str] = []
        for index, part in enumerate(parts):
            walked.append(part)
            here = "/".join(walked)
            last = index == len(parts) - 1
            try:
                info = os.stat(part, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                raise refuse("no such file") from None
            except OSError as exc:
                raise refuse(f"cannot inspect {here!r}: {exc.strerror}") from None
            if stat.S_ISLNK(info.st_mode):
                raise refuse(f"passes through a symlink at {here!r}")
            if not last:
                if not stat.S_ISDIR(info.st_mode):
                    raise refuse(f"no such file ({here!r} is not a directory)")
                next_fd = _open_checked(part, _DIR_FLAGS, dir_fd, refuse, here)
                os.close(dir_fd)
                dir_fd = next_fd
                continue
            if not stat.S_ISREG(info.st_mode):
                raise refuse("is not a regular file")
            if info.st_size > max_bytes:
                raise refuse(_too_large(info.st_size, max_bytes))
            file_fd = _open_checked(part, _FILE_FLAGS, dir_fd, refuse, here)
            try:
                opened = os.fstat(file_fd)
                if not stat.S_ISREG(opened.st_mode):
                    raise refuse("is not a regular file")
                data = _read_at_most(file_fd, max_bytes + 1)
            finally:
                os.close(file_fd)
            if len(data) > max_bytes:
                raise refuse(_too_large(max(len(data), opened.st_size), max_bytes))
            return data.decode("utf-8", errors="replace")
    finally:
        os.close(dir_fd)
    raise AssertionError("unreachable")  # pragma: no cover


def _open_checked(
    part: str, flags: int, dir_fd: int, refuse: Callable[[str], DataPathError], here: str
) -> int:
    try:
        return os.open(part, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):
            raise refuse(f"passes through a symlink at {here!r}") from None
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            raise refuse("no such file") from None
        raise refuse(f"cannot open {here!r}: {exc.strerror}") from None


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    remaining = limit
    while remaining > 0:
        chunk = os.read(fd, min(remaining, _CHUNK))
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _too_large(size: int, limit: int) -> str:
    return f"is {size} bytes, over the {limit}-byte limit"
