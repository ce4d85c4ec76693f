"""Every file the runtime opens beneath a session workdir, opened without following a symlink.

A tool with a filesystem grant can plant symlinks in the workdir (WASI lets a guest create
them, and a relative one may climb out). So the runtime never opens a workdir path by name:
it opens the workdir root (trusted: the runtime created it), then each component relative to
its parent's descriptor with `O_NOFOLLOW`. A symlink, wherever it sits on the path, is refused
with `UnsafePathError` naming the path; a component swapped for one between two steps is
refused too. Whole-file writes go to a fresh temporary name and are renamed over the target,
so a symlink planted at the file itself is replaced (the link, never its target).

Two functions own the names: `split_relative` is the only way a workdir-relative path becomes
components, and `storage_name` is the only way an id from the wire (a context id, a client's
task id) becomes a file name. This module sits below the host, staging and session layers
and imports only the standard library, so all of them use it.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import BinaryIO, TextIO

from murmurd.ids import random_hex

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_ROOT = os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
# O_NONBLOCK: a FIFO planted where a file should be must not stall the runtime on open.
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC
_APPEND = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC
_CHUNK = 1024 * 1024
_SYMLINK_ERRNOS = (errno.ELOOP, errno.EMLINK)  # EMLINK: FreeBSD's O_NOFOLLOW refusal
_SYMLINK_RULE = "is a symlink; murmurd follows no symlink inside the workdir"

# A wire id kept verbatim as a file name: starts with a letter or digit (so never `.`, `..` or
# a hidden name), then letters, digits, `.`, `_`, `-`. Anything else is hashed, and a hashed
# name starts with `_`, which a kept id cannot, so the two never collide.
_KEPT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")

RelPath = str | PurePath


class UnsafePathError(OSError):
    """A workdir path the runtime refuses to open; the message names the path and the rule."""

    def __init__(self, path: str, rule: str, code: int = errno.ELOOP) -> None:
        super().__init__(code, f"{path!r}: {rule}")
        self.path = path
        self.rule = rule

    def __str__(self) -> str:
        return str(self.strerror)


class NotRegularFile(OSError):
    """The path names something other than a regular file (a directory, a FIFO, ...)."""

    def __init__(self, path: str) -> None:
        super().__init__(errno.EINVAL, f"{path!r} is not a regular file")
        self.path = path

    def __str__(self) -> str:
        return str(self.strerror)


class FileTooLarge(OSError):
    """A read found more than the caller's `max_bytes`; `size` is what was seen (at least)."""

    def __init__(self, path: str, size: int, limit: int, *, at_least: bool = False) -> None:
        seen = f"at least {size}" if at_least else str(size)
        super().__init__(errno.EFBIG, f"{path!r} is {seen} bytes, over the {limit}-byte limit")
        self.path, self.size, self.limit = path, size, limit

    def __str__(self) -> str:
        return str(self.strerror)


# --------------------------------------------------------------------------- names


def storage_name(wire_id: str) -> str:
    """The file name an id from the wire is stored under: the id itself when it is a plain
    name, else `_` + the sha256 of its UTF-8 bytes (so `../x`, `a/b`, NUL never reach a path)."""
    if _KEPT_ID.fullmatch(wire_id):
        return wire_id
    return "_" + hashlib.sha256(wire_id.encode("utf-8", errors="surrogatepass")).hexdigest()


def split_relative(rel: RelPath) -> tuple[str, ...]:
    """The components of a workdir-relative path; refuses absolute, `..`, NUL and empty paths."""
    text = rel.as_posix() if isinstance(rel, PurePath) else rel
    if "\x00" in text:
        raise UnsafePathError(text, "holds a NUL byte", errno.EINVAL)
    if text.startswith("/"):
        raise UnsafePathError(text, "is absolute; workdir paths are relative", errno.EINVAL)
    parts = tuple(part for part in text.split("/") if part not in ("", "."))
    if ".." in parts:
        raise UnsafePathError(text, "climbs out with '..'", errno.EINVAL)
    if not parts:
        raise UnsafePathError(text, "names the workdir itself, not a file", errno.EINVAL)
    return parts


def under(root: Path, rel: RelPath) -> Path:
    """The absolute path of `rel` beneath `root`, for display or for a path handed to wasmtime."""
    return Path(root).joinpath(*split_relative(rel))


# --------------------------------------------------------------------------- walking


def _is_symlink(parent: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _refusal(exc: OSError, here: str, parent: int, name: str) -> OSError:
    """The error to raise for a failed step; Linux says ENOTDIR for O_DIRECTORY on a symlink."""
    if exc.errno in _SYMLINK_ERRNOS or (exc.errno == errno.ENOTDIR and _is_symlink(parent, name)):
        return UnsafePathError(here, _SYMLINK_RULE)
    if exc.errno == errno.ENOTDIR:
        return UnsafePathError(here, "is not a directory", errno.ENOTDIR)
    if exc.errno == errno.ENOENT:
        return FileNotFoundError(errno.ENOENT, f"{here!r}: no such file or directory", here)
    return type(exc)(exc.errno, f"{here!r}: {exc.strerror}", here)


@contextmanager
def _parent(root: Path, parts: tuple[str, ...], *, create: bool) -> Iterator[int]:
    """A descriptor of the directory holding `parts[-1]`, reached component by component."""
    try:
        fd = os.open(root, _ROOT)
    except OSError as exc:
        raise type(exc)(exc.errno, f"the workdir {str(root)!r} cannot be opened: {exc.strerror}", str(root)) from None
    try:
        for index, part in enumerate(parts[:-1]):
            if create:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass  # whatever is there is checked by the O_NOFOLLOW open below
                except OSError as exc:
                    raise _refusal(exc, "/".join(parts[: index + 1]), fd, part) from None
            try:
                child = os.open(part, _DIR, dir_fd=fd)
            except OSError as exc:
                raise _refusal(exc, "/".join(parts[: index + 1]), fd, part) from None
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _open_leaf(fd: int, name: str, flags: int, here: str) -> int:
    try:
        return os.open(name, flags, 0o644, dir_fd=fd)
    except OSError as exc:
        raise _refusal(exc, here, fd, name) from None


def _require_regular(fd: int, here: str) -> os.stat_result:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise NotRegularFile(here)
    return info


# --------------------------------------------------------------------------- reading


def _open_to_read(root: Path, rel: RelPath, max_bytes: int) -> tuple[int, str]:
    """A descriptor of the regular file `rel` beneath `root` (no symlink followed on the way),
    and its name for messages; `FileTooLarge` when it holds more than `max_bytes` now."""
    parts = split_relative(rel)
    here = "/".join(parts)
    with _parent(root, parts, create=False) as parent:
        fd = _open_leaf(parent, parts[-1], _READ, here)
    info = _require_regular(fd, here)
    if info.st_size > max_bytes:
        os.close(fd)
        raise FileTooLarge(here, info.st_size, max_bytes)
    return fd, here


def read_bytes(root: Path, rel: RelPath, *, max_bytes: int) -> bytes:
    """The bytes of the regular file `rel` beneath `root`; `FileTooLarge` past `max_bytes`.

    The limit is required: a guest with a filesystem grant can truncate any workdir file to
    terabytes (sparse: free on disk until someone reads it). It is checked on the open
    descriptor before reading and again by the read itself (at most `max_bytes + 1` bytes),
    since the file can grow between the two."""
    fd, here = _open_to_read(root, rel, max_bytes)
    try:
        data = _read_at_most(fd, max_bytes + 1)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise FileTooLarge(here, len(data), max_bytes, at_least=True)
    return data


def read_lines(root: Path, rel: RelPath, *, max_bytes: int, max_line: int) -> Iterator[bytes | None]:
    """The lines of the regular file `rel` beneath `root`, one at a time (a generator: the file
    is open while it runs); a line longer than `max_line` bytes comes as None, never read whole.
    `FileTooLarge` past `max_bytes` in all (checked on opening, and as it is read)."""
    fd, here = _open_to_read(root, rel, max_bytes)
    with os.fdopen(fd, "rb") as file:
        read = 0

        def next_piece() -> bytes:
            nonlocal read
            piece = file.readline(max_line + 1)
            read += len(piece)
            if read > max_bytes:  # it grew since it was opened
                raise FileTooLarge(here, read, max_bytes, at_least=True)
            return piece

        while line := next_piece():
            if len(line) <= max_line:
                yield line
                continue
            while line and not line.endswith(b"\n"):  # the rest of the long line, a piece at a time
                line = next_piece()
            yield None


def read_text(root: Path, rel: RelPath, *, max_bytes: int, errors: str = "strict") -> str:
    """`read_bytes` decoded as UTF-8."""
    return read_bytes(root, rel, max_bytes=max_bytes).decode("utf-8", errors=errors)


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


# --------------------------------------------------------------------------- writing


def expect_directory(root: Path, rel: RelPath) -> None:
    """`rel` beneath `root` is a directory, or nothing yet (nor its parents, nor the root):
    anything else there, a symlink or one on the way too, is refused (`UnsafePathError`).
    Nothing is created or followed: for a directory made later, when first written to."""
    parts = split_relative(rel)
    try:
        with _parent(root, parts, create=False) as parent:
            try:
                mode = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False).st_mode
            except FileNotFoundError:
                return
    except FileNotFoundError:
        return  # a parent is missing: nothing is there
    here = "/".join(parts)
    if stat.S_ISLNK(mode):
        raise UnsafePathError(here, _SYMLINK_RULE)
    if not stat.S_ISDIR(mode):
        raise UnsafePathError(here, "is not a directory", errno.ENOTDIR)


def make_dirs(root: Path, rel: RelPath) -> None:
    """Create `rel` and its parents beneath `root`; a symlink or a file on the way is refused."""
    parts = split_relative(rel)
    with _parent(root, (*parts, "."), create=True):
        pass


def _replace(root: Path, rel: RelPath, fill: Callable[[int], object]) -> None:
    """Write a fresh temporary file beside `rel` with `fill` (given its descriptor), then rename
    it over `rel`: a reader never sees half a file, and a symlink at `rel` is replaced, never
    written through."""
    parts = split_relative(rel)
    with _parent(root, parts, create=True) as parent:
        tmp = f".{parts[-1][:100]}.{random_hex(6)}.tmp"
        fd = _open_leaf(parent, tmp, _NEW, "/".join(parts))
        try:
            try:
                fill(fd)
            finally:
                os.close(fd)
            os.replace(tmp, parts[-1], src_dir_fd=parent, dst_dir_fd=parent)
        except BaseException:
            unlink_at(parent, tmp)
            raise


def write_bytes(root: Path, rel: RelPath, data: bytes) -> None:
    """Replace the file `rel` with `data` (parents created); a symlink there is replaced.
    Plain `write`s on the descriptor: no file object, whose making costs an `fstat` and a seek."""
    _replace(root, rel, lambda fd: write_all(fd, data))


def write_text(root: Path, rel: RelPath, text: str) -> None:
    """UTF-8; a lone surrogate (JSON from the wire may carry one) becomes `?` instead of failing."""
    write_bytes(root, rel, text.encode("utf-8", errors="replace"))


def copy_into(source: Path, root: Path, rel: RelPath) -> None:
    """Copy the file `source` (outside the workdir, trusted) to `rel` beneath `root`."""

    def fill(sink: int) -> None:
        with open(source, "rb") as origin:
            while chunk := origin.read(_CHUNK):
                write_all(sink, chunk)

    _replace(root, rel, fill)


def _append_fd(root: Path, rel: RelPath) -> int:
    parts = split_relative(rel)
    here = "/".join(parts)
    with _parent(root, parts, create=True) as parent:
        fd = _open_leaf(parent, parts[-1], _APPEND, here)
    _require_regular(fd, here)
    os.set_blocking(fd, True)
    return fd


def open_append(root: Path, rel: RelPath) -> BinaryIO:
    """The regular file `rel` opened for appending (created with its parents); a symlink is refused."""
    return os.fdopen(_append_fd(root, rel), "ab")


def open_append_text(root: Path, rel: RelPath) -> TextIO:
    return os.fdopen(_append_fd(root, rel), "a", encoding="utf-8")


def text_appender(fd: int) -> TextIO:
    """The file open on `fd` (one this module opened for appending, e.g. `lay_down`'s `append`) as
    UTF-8 text; the buffer's size is given, so nothing is asked of the file (no isatty probe)."""
    return os.fdopen(fd, "a", buffering=64 * 1024, encoding="utf-8")


def append_bytes(root: Path, rel: RelPath, data: bytes) -> None:
    with open_append(root, rel) as sink:
        sink.write(data)


def append_text(root: Path, rel: RelPath, text: str) -> None:
    append_bytes(root, rel, text.encode("utf-8", errors="replace"))


def create_new(root: Path, rel: RelPath) -> BinaryIO:
    """A new regular file `rel` (parents created); `FileExistsError` if anything is there, a link too."""
    parts = split_relative(rel)
    with _parent(root, parts, create=True) as parent:
        fd = _open_leaf(parent, parts[-1], _NEW, "/".join(parts))
    return os.fdopen(fd, "wb")


def unlink(root: Path, rel: RelPath) -> None:
    """Remove the file `rel` if present (a symlink there is removed, never followed)."""
    parts = split_relative(rel)
    try:
        with _parent(root, parts, create=False) as parent:
            os.unlink(parts[-1], dir_fd=parent)
    except FileNotFoundError:
        pass


def remove_tree(root: Path, rel: RelPath) -> None:
    """Remove the directory `rel` and everything beneath it, if present. No symlink is followed:
    not on the way to it (refused), not inside it (removed as links), not at `rel` itself (a
    symlink there is refused by `shutil.rmtree`)."""
    parts = split_relative(rel)
    try:
        with _parent(root, parts, create=False) as parent:
            shutil.rmtree(parts[-1], dir_fd=parent)
    except FileNotFoundError:
        pass


def open_directory(root: Path, rel: RelPath) -> int:
    """A descriptor of the directory `rel` (created with its parents; `.` is `root` itself).
    The caller closes it."""
    text = rel.as_posix() if isinstance(rel, PurePath) else rel
    parts = () if all(part in ("", ".") for part in text.split("/")) else split_relative(rel)
    with _parent(root, (*parts, "."), create=True) as fd:
        return os.dup(fd)


def unlink_at(dir_fd: int, name: str) -> None:
    """Remove `name` from the directory `dir_fd` if present (a symlink is removed, not followed)."""
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


def anonymous_file(dir_fd: int, *, unnamed: bool = True) -> int:
    """A new empty read-write file on the file system of the directory `dir_fd`, with no name
    in it: nothing a guest lists or opens by name can reach it. `O_TMPFILE` where the file
    system has it (`unnamed`); otherwise a random name, unlinked at once."""
    if unnamed and hasattr(os, "O_TMPFILE"):
        try:
            return os.open(".", os.O_TMPFILE | os.O_RDWR | _CLOEXEC, 0o600, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                raise
    for _ in range(100):
        name = f".murmurd-{random_hex(12)}.tmp"
        try:
            fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC, 0o600, dir_fd=dir_fd)
        except FileExistsError:
            continue
        unlink_at(dir_fd, name)
        return fd
    raise FileExistsError(errno.EEXIST, "no free scratch name")  # pragma: no cover


def fd_path(fd: int) -> str:
    """A path that opens the very object `fd` is open on, for an API that only takes names
    (wasmtime's preopen and stdio files): what the runtime checked is what gets opened, and a
    symlink swapped in after the check changes nothing. Needs Linux's `/proc`."""
    return f"/proc/self/fd/{fd}"


@dataclass(frozen=True)
class TreePlan:
    """The shape of a tree `lay_down` makes, its names checked and split once (`plan_tree`), so a
    tree laid down for every new session pays for no parsing. Directories come each after its
    parent; `files` are names only, their bytes given to each `lay_down`."""

    dirs: tuple[tuple[str, ...], ...]
    files: tuple[tuple[str, ...], ...]
    append: tuple[str, ...] | None
    # the directories something is made in (opened on the way): derived here, never given
    parents: frozenset[tuple[str, ...]] = field(init=False)

    def __post_init__(self) -> None:
        """However made, a plan holds plain names only, in tuples of its own (a list it was given
        and changed later changes nothing): each part one component, never `..`."""
        dirs, files = tuple(_plain(parts) for parts in self.dirs), tuple(_plain(parts) for parts in self.files)
        kept = _plain(self.append) if self.append is not None else None
        object.__setattr__(self, "dirs", dirs)
        object.__setattr__(self, "files", files)
        object.__setattr__(self, "append", kept)
        parents = {parts[:-1] for parts in (*dirs, *files)} | ({kept[:-1]} if kept is not None else set())
        object.__setattr__(self, "parents", frozenset(parents))


def _plain(parts: Iterable[str]) -> tuple[str, ...]:
    held = tuple(parts)
    if not held or any(not isinstance(part, str) or not part or part in (".", "..") or "/" in part or "\x00" in part
                       for part in held):
        raise UnsafePathError("/".join(map(str, held)), "is not a plain workdir-relative name", errno.EINVAL)
    return held


def plan_tree(dirs: Iterable[str], files: Iterable[str], *, append: str | None = None) -> TreePlan:
    """The plan of a tree of `dirs` and `files` (root-relative names; refused as `split_relative`
    refuses them), with `append` the file kept open for appending, if any."""
    return TreePlan(tuple(split_relative(rel) for rel in dirs), tuple(split_relative(rel) for rel in files),
                    split_relative(append) if append is not None else None)


def lay_down(parent: Path, name: str, tree: TreePlan, contents: Sequence[bytes]) -> tuple[int, int | None]:
    """Create the directory `name` in `parent` (`FileExistsError` if anything is there) and, in one
    pass beneath it, `tree`'s directories and files (`contents[i]` the bytes of `tree.files[i]`).
    The tree is new, made here: every directory is created and opened beneath its parent's
    descriptor, every file created exclusively (`O_EXCL | O_NOFOLLOW`) and written with plain
    `write`s, so nothing planted is followed or written through, and no temporary name is needed
    (no reader has the tree yet). `tree.append` is created empty as well and kept open for
    appending. Returns descriptors of the new directory and of that file (None without it), which
    the caller closes."""
    leaf = split_relative(name)
    if len(leaf) != 1:
        raise UnsafePathError(name, "is not a plain directory name", errno.EINVAL)
    if len(contents) != len(tree.files):
        raise ValueError(f"{len(tree.files)} files planned, {len(contents)} contents given")
    try:
        top = os.open(parent, _ROOT)
    except OSError as exc:
        raise type(exc)(exc.errno, f"{str(parent)!r} cannot be opened: {exc.strerror}", str(parent)) from None
    parents = tree.parents
    opened: dict[tuple[str, ...], int] = {}
    appending: int | None = None
    try:
        os.mkdir(leaf[0], 0o755, dir_fd=top)  # the checked name: `ses_x/` would follow a symlink swapped in
        opened[()] = os.open(leaf[0], _DIR, dir_fd=top)
        for parts in tree.dirs:
            at = opened[parts[:-1]]  # KeyError: a directory named before its parent
            os.mkdir(parts[-1], 0o755, dir_fd=at)
            if parts in parents:  # opened only to make or write something in it
                opened[parts] = os.open(parts[-1], _DIR, dir_fd=at)
        for parts, data in zip(tree.files, contents):
            fd = _open_leaf(opened[parts[:-1]], parts[-1], _NEW, "/".join(parts))
            try:
                write_all(fd, data)
            finally:
                os.close(fd)
        kept = tree.append
        if kept is not None:
            appending = _open_leaf(opened[kept[:-1]], kept[-1], _NEW | os.O_APPEND, "/".join(kept))
        root = opened.pop(())
    except BaseException:
        if appending is not None:
            os.close(appending)
        raise
    finally:
        for fd in opened.values():
            os.close(fd)
        os.close(top)
    return root, appending


def write_all(fd: int, data: bytes) -> None:
    """All of `data` to `fd` with plain `write(2)`s (a pipe or socket may take part of it each time)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
