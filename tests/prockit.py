"""Helpers for tests about process lifetimes: pid files a command writes, and /proc polling."""

from __future__ import annotations

import time
from pathlib import Path


def alive(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie awaiting its reaper counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def read_pid(path: Path, timeout: float = 30) -> int:
    """The pid a command wrote to `path` (waiting for it, bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = path.read_text().strip() if path.exists() else ""
        if text.isdigit():
            return int(text)
        time.sleep(0.05)
    raise AssertionError(f"no pid was written to {path} within {timeout} s")


def wait_gone(pids: list[int], timeout: float = 10) -> float:
    """Seconds until every pid is dead; AssertionError naming the survivors after `timeout`."""
    started = time.monotonic()
    while any(alive(pid) for pid in pids):
        if time.monotonic() - started > timeout:
            survivors = [pid for pid in pids if alive(pid)]
            raise AssertionError(f"processes {survivors} still run {timeout} s later")
        time.sleep(0.05)
    return time.monotonic() - started
