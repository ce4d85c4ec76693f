"""Read a tool's `data-path` result beneath the session workdir (seed: "Returning a large result").

`read_data_path` percent-decodes the name first (so `%2e%2e` is `..` and `%2F...` is absolute),
then refuses, in this order: an empty name or a NUL byte, an absolute path, any `..`
component, a symlink anywhere on the path (wherever it points, even inside the workdir), a
missing file, anything that is not a regular file, and a file over `max_bytes` (10 MiB).

The file is read through `murmurd.workdir_fs` (every component opened relative to its parent's
descriptor with `O_NOFOLLOW`; `root` itself is trusted). At most `max_bytes + 1` bytes are
read, whatever the file claims its size is. The text is decoded as UTF-8 with invalid bytes
replaced.
"""

from __future__ import annotations

import errno
from pathlib import Path
from urllib.parse import unquote

from murmurd import workdir_fs
from murmurd.workdir_fs import FileTooLarge, NotRegularFile, UnsafePathError

MAX_DATA_BYTES = 10 * 1024 * 1024



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
        data = workdir_fs.read_bytes(root, "/".join(parts), max_bytes=max_bytes)
    except UnsafePathError as exc:
        if exc.errno == errno.ENOTDIR:
            raise refuse(f"no such file ({exc.path!r} is not a directory)") from None
        raise refuse(f"passes through a symlink at {exc.path!r}") from None
    except FileNotFoundError:
        raise refuse("no such file") from None
    except NotRegularFile:
        raise refuse("is not a regular file") from None
    except FileTooLarge as exc:
        raise refuse(_too_large(exc.size, max_bytes)) from None
    except OSError as exc:
        raise refuse(f"cannot be read: {exc.strerror}") from None
    return data.decode("utf-8", errors="replace")


def _too_large(size: int, limit: int) -> str:
    return f"is {size} bytes, over the {limit}-byte limit"
