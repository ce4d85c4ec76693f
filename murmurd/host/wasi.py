"""Per-call WASI configuration: what a guest may see of the host, and where its output goes.

A call starts from nothing: no inherited environment (only the variables the caller passes),
an empty stdin, stdout and stderr appended to a log file the caller names (or discarded), and
at most one preopened directory, mounted as the guest's `.`.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

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
    """Collects a call's stdout/stderr into its log file and keeps the tail of stderr."""

    def __init__(self, log_path: Path | None) -> None:
        self._file: BinaryIO | None = None
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(log_path, "ab")  # noqa: SIM115 - closed in close()
        self._lock = threading.Lock()
        self.stderr_tail = b""

    def _write(self, data: bytes) -> int:
        with self._lock:
            if self._file is not None:
                self._file.write(data)
        return len(data)

    def stdout(self, data: bytes) -> int:
        return self._write(data)

    def stderr(self, data: bytes) -> int:
        self.stderr_tail = (self.stderr_tail + data)[-_TAIL_BYTES:]
        return self._write(data)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def wasi_config(grant: CallGrant, output: CallOutput, program: str) -> WasiConfig:
    config = WasiConfig()
    config.argv = [program]
    config.env = [(key, value) for key, value in grant.env.items()]
    config.stdout_custom = output.stdout
    config.stderr_custom = output.stderr
    if grant.preopen is not None:
        config.preopen_dir(str(grant.preopen), ".")
    return config
