"""`capabilities.resources`: the OS limits upstream sets on every shell child (manifest fact
sheet, "Resource limits"), with upstream's defaults for every field the manifest leaves out.

| field | default | mechanism |
|---|---|---|
| `max_processes` | 128 | RLIMIT_NPROC: inside the child's user namespace, the value itself (the namespace counts only the command's tasks); without one, the uid's live task count plus the value. The kernel exempts uid 0, so as root `cgroup_pids_max` is what binds |
| `max_open_files` | 1024 | RLIMIT_NOFILE |
| `max_file_size_bytes` | 4 GiB | RLIMIT_FSIZE |
| `cpu_seconds` | 3600 | RLIMIT_CPU (hard = soft + 1 s, so SIGXCPU, which names the limit, comes before SIGKILL) |
| `memory_bytes` | 2 GiB | RLIMIT_AS |
| `cgroup_pids_max` | 256 | `pids.max` of a per-command pids cgroup (`murmurd.containment.cgroup`), where one can be made |
| `cgroup_memory_bytes` | 4 GiB | `memory.max` of the command's cgroup (`murmurd.containment.resources`), where delegated |
| `cgroup_cpu_percent` | 200 | `cpu.max`, percent of one core, where delegated |
| `cgroup_io_bytes_per_sec` | 100 MiB/s | `io.max` on the workdir's disk, where delegated (best-effort) |
| `workdir_max_bytes` | 10 GiB | the workdir's size, checked while commands run and between them (`E-RUN-013`) |

Limits are hard (soft = hard but for CPU) and set in the child before exec by the confinement
helper; a value above murmurd's own hard limit is clamped to it (an unprivileged process cannot
raise it). Core dumps are always off. Attribution (the `shell` event's `resource_limit`), only
when the kernel's evidence names exactly one field: SIGXCPU -> `cpu_seconds`, SIGXFSZ ->
`max_file_size_bytes`, `pids.events` max -> `cgroup_pids_max`, an `oom_kill` of the memory
controller -> `cgroup_memory_bytes`.
"""

from __future__ import annotations

import os
import resource
import signal
from dataclasses import dataclass
from typing import Any

GIB = 1024 ** 3
DEFAULTS: dict[str, int] = {
    "max_processes": 128,
    "max_open_files": 1024,
    "max_file_size_bytes": 4 * GIB,
    "cpu_seconds": 3600,
    "memory_bytes": 2 * GIB,
    "cgroup_pids_max": 256,
    "cgroup_memory_bytes": 4 * GIB,
    "cgroup_cpu_percent": 200,
    "cgroup_io_bytes_per_sec": 100 * 1024 ** 2,
    "workdir_max_bytes": 10 * GIB,
}
# manifest field -> the rlimit it sets
RLIMITS: dict[str, int] = {
    "max_processes": resource.RLIMIT_NPROC,
    "max_open_files": resource.RLIMIT_NOFILE,
    "max_file_size_bytes": resource.RLIMIT_FSIZE,
    "cpu_seconds": resource.RLIMIT_CPU,
    "memory_bytes": resource.RLIMIT_AS,
}
# the signal a kernel-enforced limit kills with -> the manifest field that set it
LIMIT_SIGNALS: dict[int, str] = {int(signal.SIGXCPU): "cpu_seconds", int(signal.SIGXFSZ): "max_file_size_bytes"}

Rlimit = tuple[int, int, int]  # (RLIMIT_*, soft, hard)


@dataclass(frozen=True)
class ShellLimits:
    """The resource limits of every shell child of a capsule (upstream's defaults filled in)."""

    max_processes: int = DEFAULTS["max_processes"]
    max_open_files: int = DEFAULTS["max_open_files"]
    max_file_size_bytes: int = DEFAULTS["max_file_size_bytes"]
    cpu_seconds: int = DEFAULTS["cpu_seconds"]
    memory_bytes: int = DEFAULTS["memory_bytes"]
    cgroup_pids_max: int = DEFAULTS["cgroup_pids_max"]
    cgroup_memory_bytes: int = DEFAULTS["cgroup_memory_bytes"]
    cgroup_cpu_percent: int = DEFAULTS["cgroup_cpu_percent"]
    cgroup_io_bytes_per_sec: int = DEFAULTS["cgroup_io_bytes_per_sec"]
    workdir_max_bytes: int = DEFAULTS["workdir_max_bytes"]

    @classmethod
    def from_resources(cls, resources: Any) -> ShellLimits:
        """From a manifest's `capabilities.resources` (None: not declared, all defaults)."""
        declared = {name: getattr(resources, name, None) for name in DEFAULTS} if resources is not None else {}
        return cls(**{name: int(value) for name, value in declared.items() if value is not None})

    def rlimits(self, in_user_namespace: bool) -> list[Rlimit]:
        """The rlimits to set in the child, clamped to murmurd's own hard limits."""
        nproc = self.max_processes if in_user_namespace else live_tasks_of(os.getuid()) + self.max_processes
        wanted = [(resource.RLIMIT_NPROC, nproc, nproc),
                  (resource.RLIMIT_NOFILE, self.max_open_files, self.max_open_files),
                  (resource.RLIMIT_FSIZE, self.max_file_size_bytes, self.max_file_size_bytes),
                  # SIGXCPU at the soft limit, SIGKILL at the hard one: a second between them
                  (resource.RLIMIT_CPU, self.cpu_seconds, self.cpu_seconds + 1),
                  (resource.RLIMIT_AS, self.memory_bytes, self.memory_bytes)]
        return [_clamped(which, soft, hard) for which, soft, hard in wanted]


def _clamped(which: int, soft: int, hard: int) -> Rlimit:
    _soft, ceiling = resource.getrlimit(which)
    if ceiling != resource.RLIM_INFINITY:
        soft, hard = min(soft, ceiling), min(hard, ceiling)
    return which, soft, hard


def live_tasks_of(uid: int) -> int:
    """How many tasks (threads) run with real uid `uid`: what RLIMIT_NPROC is compared with."""
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status", "rb") as status:
                real_uid, threads = None, 1
                for line in status:
                    if line.startswith(b"Uid:"):
                        real_uid = int(line.split()[1])
                    elif line.startswith(b"Threads:"):
                        threads = int(line.split()[1])
                        break
        except (OSError, ValueError, IndexError):
            continue
        if real_uid == uid:
            total += threads
    return total


def limit_that_killed(returncode: int, pids_limit_hit: bool = False, memory_killed: bool = False) -> str | None:
    """The field whose limit stopped the command, when the kernel's evidence names exactly one:
    a kill by SIGXCPU or SIGXFSZ, a fork refused at the pids cgroup's `pids.max`, a task killed
    by the memory controller."""
    evidence = []
    if memory_killed:
        evidence.append("cgroup_memory_bytes")
    if returncode < 0 and -returncode in LIMIT_SIGNALS:
        evidence.append(LIMIT_SIGNALS[-returncode])
    if pids_limit_hit:
        evidence.append("cgroup_pids_max")
    return evidence[0] if len(evidence) == 1 else None
