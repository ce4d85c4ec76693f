"""Per-call WASI configuration: what a guest may see of the host, and where its output goes.

A call starts from nothing: no inherited environment (only the variables the caller passes),
an empty stdin, stdout and stderr appended to a log file the caller names (or discarded), and
at most one preopened directory, mounted as the guest's `.`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from wasmtime import WasiConfig

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


class CallOutput:
    """Where a call's stdout and stderr go, and the tail of its stderr once it is over.

    wasmtime writes the guest's streams to files itself (no Python callback runs on wasmtime's
    I/O threads, which would otherwise be called back during interpreter shutdown). After the
    call, `collect` appends them to the caller's log (stdout, then stderr) and keeps the last
    bytes of stderr, which tell a failed allocation from any other trap.
    """

    def __init__(self, log_path: Path | None) -> None:
        self.log_path = log_path
        directory = None
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            directory = log_path.parent
        self._stderr = self._scratch(directory, ".stderr-")
        self._stdout = self._scratch(directory, ".stdout-") if log_path is not None else None
        self.stderr_tail = b""
        self._collected = False

    @staticmethod
    def _scratch(directory: Path | None, prefix: str) -> Path:
        fd, name = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=directory)
        os.close(fd)
        return Path(name)

    def configure(self, config: WasiConfig) -> None:
        config.stderr_file = str(self._stderr)
        if self._stdout is not None:
            config.stdout_file = str(self._stdout)

    def collect(self) -> None:
        """Call once the store is gone (its files closed). Idempotent."""
        if self._collected:
            return
        self._collected = True
        stdout = _read_and_remove(self._stdout)
        stderr = _read_and_remove(self._stderr)
        self.stderr_tail = stderr[-_TAIL_BYTES:]
        if self.log_path is not None and (stdout or stderr):
            with open(self.log_path, "ab") as log:
                log.write(stdout)
                log.write(stderr)


def _read_and_remove(path: Path | None) -> bytes:
    if path is None:
        return b""
    try:
        return path.read_bytes()
    except OSError:
        return b""
    finally:
        path.unlink(missing_ok=True)


def wasi_config(grant: CallGrant, output: CallOutput, program: str) -> WasiConfig:
    config = WasiConfig()
    config.argv = [program]
    config.env = [(key, value) for key, value in grant.env.items()]
    output.configure(config)
    if grant.preopen is not None:
        config.preopen_dir(str(grant.preopen), ".")
    return config
