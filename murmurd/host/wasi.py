"""Per-call WASI configuration: what a guest may see of the host, and where its output goes.

A call starts from nothing: no inherited environment (only the variables the caller passes),
an empty stdin, stdout and stderr appended to a log file the caller names (or discarded), and
at most one preopened directory, mounted as the guest's `.`.

When the grant names a trusted `root` (the session workdir), the preopen and the log lie
beneath it and are reached through `murmurd.workdir_fs`: a symlink a guest planted on the way
(`logs/tool-x.log` -> `../../../etc/x`) is refused, never followed. wasmtime opens files and
directories only by name, so it is handed `/proc/self/fd/<n>` of the descriptor the runtime
checked: what was checked is what wasmtime opens.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from wasmtime import WasiConfig

from murmurd import workdir_fs
from murmurd.host.capped_copy import copy_stretch, read_tail
from murmurd.host.egress import EgressPolicy
from murmurd.host.limits import DEFAULT_LIMITS, Limits
from murmurd.host.scratch import ScratchFiles

_TAIL_BYTES = 4096


@dataclass(frozen=True)
class CallGrant:
    """What one call runs under. The default grants nothing."""

    env: Mapping[str, str] = field(default_factory=dict)
    preopen: Path | None = None
    log_path: Path | None = None
    network: tuple[str, ...] = ()  # `network.allow` entries: the only origins wasi:http reaches
    limits: Limits = DEFAULT_LIMITS
    root: Path | None = None  # trusted: `preopen` and `log_path` lie beneath it, reached without symlinks

    @property
    def egress(self) -> EgressPolicy:
        return EgressPolicy.from_allow(self.network)

    def log_location(self) -> tuple[Path, str] | None:
        """The directory the log is opened from and its path below it (an operator's own path: its parent)."""
        if self.log_path is None:
            return None
        if self.root is not None:
            return self.root, self.log_path.relative_to(self.root).as_posix()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)  # outside any workdir: `murmurd call --log`
        return self.log_path.parent, self.log_path.name

    def open_preopen(self) -> int | None:
        """A descriptor of the preopen (the caller closes it), reached below `root` one
        component at a time with no symlink followed; without a `root` (an operator's own
        directory) the preopen is its own trusted root."""
        if self.preopen is None:
            return None
        if self.root is None:
            return workdir_fs.open_directory(self.preopen, ".")
        return workdir_fs.open_directory(self.root, self.preopen.relative_to(self.root).as_posix())


class CallOutput:
    """Where a call's stdout and stderr go, and the tail of its stderr once it is over.

    wasmtime writes the guest's streams to files itself (no Python callback runs on wasmtime's
    I/O threads, which would otherwise be called back during interpreter shutdown). The files
    are unnamed (`workdir_fs.anonymous_file`: borrowed from the host's `ScratchFiles`, in the
    temporary directory, when it passes them; else made beside the log) and reach wasmtime as `/proc/self/fd/<n>`, so no guest
    can open, truncate or swap them by name. After the call,
    `collect` appends what they hold to the caller's log (stdout, then stderr), at most
    `capped_copy.LOG_BYTES_PER_STREAM` of each, and keeps the last bytes of stderr, which tell a
    failed allocation from any other trap. A store that outlives one call (a hook's) calls
    `drain` after each call instead, and `collect` once the store is closed.
    """

    def __init__(self, grant: CallGrant, scratch: ScratchFiles | None = None) -> None:
        """Raises `OSError` (`UnsafePathError` for a symlink) when the log's directory is refused.

        With `scratch`, the call borrows its files (stderr, and stdout when it has a log) from
        the scratch files of the temporary directory, and they go back at `collect`, but only
        after `store_closed` said the store that wrote to them is gone; else they are closed.
        None of them is beneath a session's workdir, so a kept one holds nothing of a session
        that closed. Without `scratch` (a hook's long-lived store) the files are new, made
        beside the log, and closed at `collect`."""
        self.location = location = grant.log_location()
        self._scratch = scratch
        self._store_closed = False
        self._stdout: int | None = None
        self._stderr = -1
        self.stderr_tail = b""
        self.log_refused: OSError | None = None  # why the streams could not be appended to the log
        self._offsets: dict[int, int] = {}  # descriptor -> bytes already copied
        self._collected = False
        root, rel = location if location is not None else (None, "")
        log_dir = rel.rpartition("/")[0]
        if scratch is not None:  # the log's directory is made with the log, when there is something to append
            dir_fd = -1
            if root is not None and log_dir:
                workdir_fs.expect_directory(root, log_dir)  # refused now, before the guest runs
        elif root is not None:
            dir_fd = workdir_fs.open_directory(root, log_dir or ".")  # refused: a symlink
        else:
            dir_fd = workdir_fs.open_directory(Path(tempfile.gettempdir()), ".")
        try:
            if scratch is not None:
                self._device = _TEMP_KEY
                self._stderr = _borrow(scratch)
                if location is not None:
                    self._stdout = _borrow(scratch)
                return
            self._device = os.fstat(dir_fd).st_dev
            self._stderr = workdir_fs.anonymous_file(dir_fd)
            if location is not None:
                self._stdout = workdir_fs.anonymous_file(dir_fd)
        except OSError:
            self._release()
            raise
        finally:
            if dir_fd >= 0:
                os.close(dir_fd)

    def store_closed(self) -> None:
        """The store these files were given to is closed: none of its handles to them is left."""
        self._store_closed = True

    def configure(self, config: WasiConfig) -> None:
        """Point the guest's stderr (and stdout, when logged) at the unnamed files; wasmtime
        opens them here, through the runtime's own descriptors."""
        config.stderr_file = workdir_fs.fd_path(self._stderr)
        if self._stdout is not None:
            config.stdout_file = workdir_fs.fd_path(self._stdout)

    def drain(self) -> None:
        """Append what the guest wrote since the last drain to the log (stdout, then stderr, each
        capped), and keep the tail of that stretch of stderr. For a store that outlives one call."""
        try:
            if self.location is None:  # stderr alone, kept for its tail
                start, end = self._new_stretch(self._stderr)
                self.stderr_tail = read_tail(self._stderr, start, end, _TAIL_BYTES) if end > start else b""
                return
            stretches = [(label, fd, *self._new_stretch(fd))
                         for label, fd in (("stdout", self._stdout), ("stderr", self._stderr)) if fd is not None]
            _label, fd, start, end = stretches[-1]
            self.stderr_tail = read_tail(fd, start, end, _TAIL_BYTES)
            if any(end > start for _l, _f, start, end in stretches):
                with workdir_fs.open_append(*self.location) as sink:
                    for label, fd, start, end in stretches:
                        copy_stretch(fd, start, end, sink.fileno(), label)
        except OSError as exc:
            self.log_refused = exc

    def _new_stretch(self, fd: int) -> tuple[int, int]:
        """The byte range of `fd` written since the last drain (its size taken once, now);
        the next drain starts at its end."""
        end = os.fstat(fd).st_size
        start = min(self._offsets.get(fd, 0), end)
        self._offsets[fd] = end
        return start, end

    def collect(self) -> None:
        """Call once the store is gone (its files closed). Idempotent."""
        if self._collected:
            return
        self._collected = True
        try:
            self.drain()
        finally:
            self._release()

    def _release(self) -> None:
        """Back to the scratch files when no store can write to them any more, else closed."""
        for fd in (self._stdout, self._stderr):
            if fd is None or fd < 0:
                continue
            if self._scratch is not None and self._store_closed and self._device == _TEMP_KEY:
                self._scratch.give_back(self._device, fd, self._offsets.get(fd))
            else:
                os.close(fd)
        self._stdout, self._stderr = None, -1


_TEMP_KEY = -1  # the scratch files of the temporary directory, which every call borrows from (no st_dev is negative)


def _borrow(scratch: ScratchFiles) -> int:
    """A scratch file of the temporary directory: a kept one, else a new one."""
    kept = scratch.take(_TEMP_KEY)
    return kept if kept is not None else _temp_file()


def _temp_file() -> int:
    temp = workdir_fs.open_directory(Path(tempfile.gettempdir()), ".")
    try:
        return workdir_fs.anonymous_file(temp)
    finally:
        os.close(temp)


def wasi_config(grant: CallGrant, output: CallOutput, program: str) -> WasiConfig:
    config = WasiConfig()
    config.argv = [program]
    if grant.env:  # a fresh WasiConfig has no environment at all; setting none costs a call
        config.env = [(key, value) for key, value in grant.env.items()]
    output.configure(config)
    preopen = grant.open_preopen()
    if preopen is not None:
        try:
            config.preopen_dir(workdir_fs.fd_path(preopen), ".")  # wasmtime opens it here
        finally:
            os.close(preopen)
    return config
