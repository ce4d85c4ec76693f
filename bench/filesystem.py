"""The file system beneath a bench's files, and what creating a file costs on it just now.

murmurd lays down files for every new context (a session workdir, its tool manifests, its trace,
task and result); the reference server writes none. On ext4 without a journal (these machines'
root file system) the inode allocator passes over every inode freed in the last 60 s (360 s
while its table block is dirty), looking each one up in the buffer cache (`find_inode_bit`,
`recently_deleted`): after any process removed 20,000 files, creating one costs about a
millisecond instead of microseconds, and murmurd's CPU per task doubles or triples
(`docs/benchmarks.md`). So a bench says which file system its files were on and what a
file's creation cost there right before it ran: a churned disk is told apart from a slow daemon.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

TMPFS = Path("/dev/shm")


def _mount_of(path: Path) -> tuple[str, str, str]:
    """(device, mount point, type) of the mount holding `path` (the longest mount point above it)."""
    target = str(path.resolve())
    best = ("?", "/", "?")
    for line in Path("/proc/self/mounts").read_text().splitlines():
        device, point, kind = line.split()[:3]
        point = point.replace("\\040", " ")
        if (target == point or target.startswith(point.rstrip("/") + "/")) and len(point) >= len(best[1]):
            best = (device, point, kind)
    return best


def describe(path: Path) -> str:
    """`ext4 (no journal) at /` or `tmpfs at /dev/shm`: what a reader needs to judge file costs."""
    device, point, kind = _mount_of(path)
    if kind == "ext4":
        name = os.path.basename(device)
        journaled = any(entry.startswith(f"{name}-") for entry in _listdir(Path("/proc/fs/jbd2")))
        kind = f"ext4 ({'journaled' if journaled else 'no journal'})"
    return f"{kind} at {point}"


def _listdir(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def create_cost_us(path: Path, count: int = 200) -> float:
    """Median microseconds to create (and close) an empty file in a new directory beneath
    `path`, as murmurd creates a session's files. The files stay (removing them would add to the
    very churn measured); they go with the bench's directory."""
    probe = Path(tempfile.mkdtemp(prefix="fs-probe-", dir=path))
    times = []
    for index in range(count):
        started = time.perf_counter()
        os.close(os.open(probe / str(index), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        times.append((time.perf_counter() - started) * 1e6)
    return statistics.median(times)


def tmpfs_available() -> bool:
    return TMPFS.is_dir() and os.access(TMPFS, os.W_OK) and _mount_of(TMPFS)[2] == "tmpfs"
