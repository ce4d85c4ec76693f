"""Per-call WASI configuration: what a guest may see of the host, and where its output goes.

A call starts from nothing: no inherited environment (only the variables the caller passes),
an empty stdin, stdout and stderr appended to a log file the caller names (or discarded), and
at most one preopened directory, mounted as the guest's `.`.

When the grant names a trusted `root` (the session workdir), the preopen and the log lie
beneath it and are reached through `murmurd.workdir_fs`: a symlink a guest planted on the way
(`logs/tool-x.log` -> `../../../etc/x`) is refused, never followed.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from wasmtime import WasiConfig

from murmurd import workdir_fs
from murmurd.host.limits import DEFAULT_LIMITS, Limits

_TAIL_BYTES = 4096


@dataclass(frozen=True)
class CallGrant:
    """What one call runs under. The default grants nothing."""

    env: Mapping[str, str] = field(default_factory=dict)
    preopen: Path | None = None
    log_path: Path | None = None
    network: bool = False  # wasi:http reaches the network only when true
    limits: Limits = DEFAULT_LIMITS
    root: Path | None = None  # trusted: `preopen` and `log_path` lie beneath it, reached without symlinks

    def log_location(self) -> tuple[Path, str] | None:
        """The directory the log is opened from and its path below it (an operator's own path: its parent)."""
        if self.log_path is None:
            return None
        if self.root is not None:
            return self.root, self.log_path.relative_to(self.root).as_posix()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)  # outside any workdir: `murmurd call --log`
        return self.log_path.parent, self.log_path.name

    def checked_preopen(self) -> Path | None:
        """The preopen, after checking no component below `root` is a symlink (wasmtime opens it by name)."""
        if self.preopen is None or self.root is None:
            return self.preopen
        rel = self.preopen.relative_to(self.root).as_posix()
        return self.root if rel == "." else workdir_fs.check_directory(self.root, rel)


class CallOutput:
    """Where a call's stdout and stderr go, and the tail of its stderr once it is over.

    wasmtime writes the guest's streams to files itself (no Python callback runs on wasmtime's
    I/O threads, which would otherwise be called back during interpreter shutdown). The scratch
    files live beside the log; the runtime keeps its own descriptors to them, so a guest that
    swaps one for a symlink during the call changes nothing the runtime reads. After the call,
    `collect` appends them to the caller's log (stdout, then stderr) and keeps the last bytes of
    stderr, which tell a failed allocation from any other trap. A store that outlives one call
    (a hook's) calls `drain` after each call instead, and `collect` once the store is closed.
    """

    def __init__(self, grant: CallGrant) -> None:
        """Raises `OSError` (`UnsafePathError` for a symlink) when the log's directory is refused."""
        self.location = grant.log_location()
        if self.location is not None:
            root, rel = self.location
            parent = rel.rpartition("/")[0] or "."
            directory = root if parent == "." else workdir_fs.under(root, parent)
        else:
            root, parent = Path(tempfile.gettempdir()), "."
            directory = root
        self._dir_fd = workdir_fs.open_directory(root, parent)
        self._stderr = self._scratch(directory, ".stderr-")
        self._stdout = self._scratch(directory, ".stdout-") if self.location is not None else None
        self.stderr_tail = b""
        self.log_refused: OSError | None = None  # why the streams could not be appended to the log
        self._offsets: dict[int, int] = {}  # descriptor -> bytes already read
        self._collected = False

    def _scratch(self, directory: Path, prefix: str) -> tuple[int, str, Path]:
        fd, name = workdir_fs.new_scratch(self._dir_fd, prefix)
        return fd, name, directory / name

    def configure(self, config: WasiConfig) -> None:
        config.stderr_file = str(self._stderr[2])
        if self._stdout is not None:
            config.stdout_file = str(self._stdout[2])

    def drain(self) -> None:
        """Append what the guest wrote since the last drain to the log (stdout, then stderr), and
        keep the tail of that stretch of stderr. For a store that outlives one call (a hook's)."""
        stdout = self._read_new(self._stdout)
        stderr = self._read_new(self._stderr)
        self.stderr_tail = stderr[-_TAIL_BYTES:]
        if self.location is not None and (stdout or stderr):
            try:
                workdir_fs.append_bytes(*self.location, stdout + stderr)
            except OSError as exc:
                self.log_refused = exc

    def unlink_scratch(self) -> None:
        """Remove the scratch files' names once wasmtime holds them open; the runtime keeps
        reading through its own descriptors. For a long-lived store: no name is left behind."""
        for scratch in (self._stdout, self._stderr):
            if scratch is not None:
                workdir_fs.unlink_at(self._dir_fd, scratch[1])

    def collect(self) -> None:
        """Call once the store is gone (its files closed). Idempotent."""
        if self._collected:
            return
        self._collected = True
        try:
            self.drain()
        finally:
            for scratch in (self._stdout, self._stderr):
                self._release(scratch)
            os.close(self._dir_fd)

    def _read_new(self, scratch: tuple[int, str, Path] | None) -> bytes:
        """The bytes appended to a scratch file since the last read, through the runtime's own descriptor."""
        if scratch is None:
            return b""
        fd = scratch[0]
        chunks: list[bytes] = []
        try:
            while chunk := os.pread(fd, 1 << 16, self._offsets.get(fd, 0)):
                chunks.append(chunk)
                self._offsets[fd] = self._offsets.get(fd, 0) + len(chunk)
        except OSError:
            pass
        return b"".join(chunks)

    def _release(self, scratch: tuple[int, str, Path] | None) -> None:
        if scratch is None:
            return
        fd, name, _path = scratch
        os.close(fd)
        try:
            workdir_fs.unlink_at(self._dir_fd, name)  # a link the guest put there is removed, not followed
        except OSError:
            pass


def wasi_config(grant: CallGrant, output: CallOutput, program: str) -> WasiConfig:
    config = WasiConfig()
    config.argv = [program]
    config.env = [(key, value) for key, value in grant.env.items()]
    output.configure(config)
    preopen = grant.checked_preopen()
    if preopen is not None:
        config.preopen_dir(str(preopen), ".")
    return config
