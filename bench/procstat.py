"""What a server process costs, read from /proc: CPU, threads and resident memory of the
process and its children (murmurd's WASM worker processes do a task's work too)."""

from __future__ import annotations

import os
from pathlib import Path

TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")


def family(pid: int) -> list[int]:
    """`pid` and its child processes (from /proc/PID/task/*/children)."""
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            children += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return [pid, *children]


def _status(pid: int, key: str) -> int:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except (FileNotFoundError, ProcessLookupError):  # ended meanwhile
        return 0
    return next((int(line.split()[1]) for line in lines if line.startswith(key)), 0)


def cpu_ms(pid: int) -> tuple[float, float]:
    """(user, system) CPU so far, in ms, of `pid` and its children (/proc/PID/stat utime,
    stime; a child that ended meanwhile is counted in none)."""
    user = system = 0.0
    for member in family(pid):
        try:
            stat = Path(f"/proc/{member}/stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "; utime is field 14 of the whole line
        user, system = user + int(fields[11]) * TICK_MS, system + int(fields[12]) * TICK_MS
    return user, system


def threads(pid: int) -> int:
    """Threads of `pid` and its children."""
    return sum(_status(member, "Threads:") for member in family(pid))


def rss_kib(pid: int) -> int:
    """Resident memory of `pid` and its children, KiB."""
    return sum(_status(member, "VmRSS:") for member in family(pid))
