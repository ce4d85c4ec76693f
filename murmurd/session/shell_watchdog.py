"""Shell process groups never outlive murmurd, however murmurd ends.

Three layers, because each alone has a hole:

- **Registry.** Every running shell's process group is recorded here while its call runs;
  `kill_running` kills them all (the daemon's shutdown backstop).
- **Watchdog process.** One small Python process per murmurd process (started at the first
  shell call, in its own session so terminal signals miss it) reads `+pgid` / `-pgid` lines
  from a pipe. When murmurd dies in any way, SIGKILL included, the kernel closes the pipe;
  the watchdog reads EOF and SIGKILLs every group still registered, then every process
  still in those commands' pids cgroups (announced with the group: `+pgid procs-file`), which
  holds what left its group with `setsid`. This is what reaches
  grandchildren: `PR_SET_PDEATHSIG` is cleared on fork, so `sh -c 'sleep 300 & wait'` would
  leave `sleep` behind with the parent-death signal alone. A subreaper would not help either:
  it collects orphans only while murmurd lives.
- **Parent-death signal.** The direct child (the confinement helper, `murmurd/containment/child.py`)
  sets `PR_SET_PDEATHSIG(SIGKILL)` before it execs the command, which covers the instant between
  spawn and registration; the helper also announces its own group on the watchdog's pipe
  (`watchdog_fd`) before exec, so no grandchild exists before its group is known. The signal
  fires when the *thread* that forked exits; that thread is the one blocked in `run_prepared`
  until the child is reaped, so it outlives the child on every path except murmurd's own death,
  which is the case it is for.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from typing import IO

# Runs in the watchdog: `-I -S` keeps its start cheap and independent of the environment.
_WATCHDOG_SOURCE = """
import os, signal, sys, time
groups = {}  # pgid -> the cgroup.procs file of its command's pids cgroup, or None
for line in sys.stdin.buffer:
    head, _, procs = line.rstrip(b"\\n").partition(b" ")
    try:
        pgid = int(head[1:])
    except ValueError:
        continue
    if head[:1] == b"+":
        groups[pgid] = procs or groups.get(pgid)
    else:
        groups.pop(pgid, None)
for pgid in groups:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
for procs in filter(None, groups.values()):  # what left the group (setsid) is still in its cgroup
    for _ in range(50):
        try:
            pids = [int(p) for p in open(procs, "rb").read().split()]
        except (OSError, ValueError):
            break
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.01)
"""

_lock = threading.Lock()
_running: set[int] = set()
_watchdog: subprocess.Popen[bytes] | None = None


def watchdog_fd() -> int | None:
    """The descriptor the watchdog reads from, started first when needed, for a child to
    announce its own group on (one `+pid` line) before it execs."""
    with _lock:
        _tell("")
        stdin = _watchdog.stdin if _watchdog is not None else None
        return stdin.fileno() if stdin is not None else None


def register(pgid: int) -> None:
    """A shell's process group is running: the watchdog kills it if murmurd dies."""
    with _lock:
        _running.add(pgid)
        _tell(f"+{pgid}\n")


def unregister(pgid: int) -> None:
    """The group is dead and reaped: forget it (its id may be reused from now on)."""
    with _lock:
        _running.discard(pgid)
        _tell(f"-{pgid}\n")


def running() -> frozenset[int]:
    """The process groups of the shell calls running now."""
    with _lock:
        return frozenset(_running)


def kill_running() -> int:
    """SIGKILL every running shell's process group (shutdown); how many were signalled."""
    killed = 0
    for pgid in running():
        try:
            os.killpg(pgid, signal.SIGKILL)
            killed += 1
        except (ProcessLookupError, PermissionError):
            pass
    return killed


def watchdog_pid() -> int | None:
    """The watchdog's pid while it runs (for tests and diagnostics)."""
    with _lock:
        return _watchdog.pid if _watchdog is not None and _watchdog.poll() is None else None


def _tell(line: str) -> None:
    """Send one line to the watchdog, (re)starting it first when needed. Holds `_lock`."""
    global _watchdog
    if _watchdog is None or _watchdog.poll() is not None:
        _watchdog = _start_watchdog()
        if _watchdog is None:
            return
        # A fresh watchdog learns every group still running, not just this change.
        line = "".join(f"+{pgid}\n" for pgid in _running) + (line if line.startswith("-") else "")
    stdin: IO[bytes] | None = _watchdog.stdin
    if stdin is None or not line:
        return
    try:
        stdin.write(line.encode())
        stdin.flush()
    except (BrokenPipeError, OSError):
        pass  # it died; the next line restarts it


def _start_watchdog() -> subprocess.Popen[bytes] | None:
    try:
        return subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _WATCHDOG_SOURCE],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=True,
            start_new_session=True,
        )
    except OSError:
        return None
