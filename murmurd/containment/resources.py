"""Aggregate bounds per shell command: `cgroup_memory_bytes`, `cgroup_cpu_percent` and
`cgroup_io_bytes_per_sec` as the kernel's memory, cpu and io controllers.

Where: beside murmurd's own cgroup in each controller it may delegate, found once per process
(`probe`, one group made and removed per controller). cgroup v2: murmurd's cgroup with the
controller in `cgroup.subtree_control` (a single directory per command holds every controller,
the pids group's own when `cgroup.py` made one there); cgroup v1: a writable hierarchy per
controller (`memory`, `cpu`, `blkio`). A controller that is not delegated is not enforced.

| field | v2 | v1 |
|---|---|---|
| `cgroup_memory_bytes` | `memory.max` (and `memory.swap.max` 0, `memory.oom.group` 1) | `memory.limit_in_bytes` (and `memory.memsw.limit_in_bytes`) |
| `cgroup_cpu_percent` | `cpu.max` = `<percent * 1000> 100000` | `cpu.cfs_quota_us` / `cpu.cfs_period_us` |
| `cgroup_io_bytes_per_sec` | `io.max` `rbps`/`wbps` on the workdir's disk | `blkio.throttle.{read,write}_bps_device` |

io is best-effort (upstream too): a workdir on a device the block layer does not know (overlay,
tmpfs) is not throttled. A kill by the memory controller is `memory.events` (v2) or
`memory.oom_control` (v1) `oom_kill`: the `shell` event's `resource_limit` is then
`cgroup_memory_bytes`.
"""

from __future__ import annotations

import functools
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from murmurd.containment.cgroup import PREFIX, PidsCgroup, _mounts, sweep_stale

CPU_PERIOD_US = 100_000
CONTROLLERS = ("memory", "cpu", "io")
_V1_NAMES = {"memory": "memory", "cpu": "cpu", "io": "blkio"}


@dataclass(frozen=True)
class Delegated:
    """Where each controller's per-command groups are made, and which cgroup version it is."""

    roots: dict[str, tuple[Path, int]] = field(default_factory=dict)  # controller -> (root, 1 | 2)
    missing: dict[str, str] = field(default_factory=dict)  # controller -> why not

    def has(self, controller: str) -> bool:
        return controller in self.roots


def _own_paths() -> dict[str, str]:
    """murmurd's cgroup path per v1 controller name, and '' for v2, from /proc/self/cgroup."""
    found: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        _hid, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            found[name] = path
    return found


def _candidates() -> dict[str, tuple[Path, int]]:
    own, mounts = _own_paths(), _mounts()
    found: dict[str, tuple[Path, int]] = {}
    for controller in CONTROLLERS:
        v1 = _V1_NAMES[controller]
        for point, kind, options in mounts:
            if kind == "cgroup" and v1 in options.split(",") and v1 in own:
                found[controller] = (Path(point) / own[v1].lstrip("/"), 1)
        if controller in found or "" not in own:
            continue
        for point, kind, _options in mounts:
            directory = Path(point) / own[""].lstrip("/")
            try:
                enabled = (directory / "cgroup.subtree_control").read_text().split()
            except OSError:
                continue
            if kind == "cgroup2" and controller in enabled:
                found[controller] = (directory, 2)
    return found


@functools.cache
def probe() -> Delegated:
    """Which controllers murmurd can give a command a group of its own in (tried once)."""
    roots, missing = {}, {}
    candidates = _candidates()
    for controller in CONTROLLERS:
        if controller not in candidates:
            missing[controller] = f"no {controller} controller is delegated to murmurd's cgroup (v1 or v2)"
            continue
        root, version = candidates[controller]
        trial = root / f"{PREFIX}{secrets.token_hex(8)}"
        try:
            trial.mkdir()
            trial.rmdir()
            roots[controller] = (root, version)
        except OSError as exc:
            missing[controller] = f"cannot create a {controller} cgroup in {str(root)!r}: {exc.strerror or exc}"
    return Delegated(roots, missing)


def _write(path: Path, text: str) -> None:
    with open(path, "w") as sink:
        sink.write(text)


def workdir_disk(workdir: Path) -> str | None:
    """`MAJ:MIN` of the whole disk holding `workdir`, or None when the block layer has none."""
    try:
        device = os.stat(workdir).st_dev
    except OSError:
        return None
    node = Path(f"/sys/dev/block/{os.major(device)}:{os.minor(device)}")
    if not node.exists():
        return None
    if (node / "partition").exists():
        try:
            return (node.resolve().parent / "dev").read_text().strip()
        except OSError:
            return None
    return f"{os.major(device)}:{os.minor(device)}"


@dataclass(frozen=True)
class ResourceBounds:
    memory_bytes: int
    cpu_percent: int
    io_bytes_per_sec: int


@dataclass
class CommandScope:
    """One command's memory/cpu/io groups. The helper writes its pid to each of `procs_files`."""

    groups: dict[str, tuple[Path, int]] = field(default_factory=dict)  # controller -> (directory, version)
    made: list[Path] = field(default_factory=list)  # directories this scope created (and removes)
    io_device: str | None = None

    @classmethod
    def create(cls, delegated: Delegated, bounds: ResourceBounds, workdir: Path,
               pids_group: Path | None = None) -> CommandScope:
        """Groups for every delegated controller, limits written; OSError when one cannot be set
        (the command must then not run)."""
        scope = cls()
        try:
            for controller, (root, version) in delegated.roots.items():
                scope.groups[controller] = (scope._directory(root, version, pids_group), version)
            scope._limit(bounds, workdir)
        except OSError:
            scope.remove()
            raise
        return scope

    def _directory(self, root: Path, version: int, pids_group: Path | None) -> Path:
        if version == 2:
            if pids_group is not None and pids_group.parent == root:
                return pids_group  # v2: one directory per command; the pids group's is it
            for directory, other in self.groups.values():
                if other == 2:
                    return directory
        sweep_stale(root)
        directory = root / f"{PREFIX}{secrets.token_hex(8)}"
        directory.mkdir()
        self.made.append(directory)
        return directory

    def _limit(self, bounds: ResourceBounds, workdir: Path) -> None:
        if "memory" in self.groups:
            directory, version = self.groups["memory"]
            if version == 2:
                _write(directory / "memory.max", str(bounds.memory_bytes))
                for name, value in (("memory.swap.max", "0"), ("memory.oom.group", "1")):
                    if (directory / name).exists():
                        _write(directory / name, value)
            else:
                _write(directory / "memory.limit_in_bytes", str(bounds.memory_bytes))
                if (directory / "memory.memsw.limit_in_bytes").exists():
                    _write(directory / "memory.memsw.limit_in_bytes", str(bounds.memory_bytes))
        if "cpu" in self.groups:
            directory, version = self.groups["cpu"]
            quota = bounds.cpu_percent * CPU_PERIOD_US // 100
            if version == 2:
                _write(directory / "cpu.max", f"{quota} {CPU_PERIOD_US}")
            else:
                _write(directory / "cpu.cfs_period_us", str(CPU_PERIOD_US))
                _write(directory / "cpu.cfs_quota_us", str(quota))
        if "io" in self.groups:
            self._limit_io(bounds.io_bytes_per_sec, workdir)

    def _limit_io(self, rate: int, workdir: Path) -> None:
        """Best-effort: a device the kernel will not throttle leaves io unbounded (`io_device` None)."""
        device = workdir_disk(workdir)
        if device is None:
            return
        directory, version = self.groups["io"]
        try:
            if version == 2:
                _write(directory / "io.max", f"{device} rbps={rate} wbps={rate}")
            else:
                _write(directory / "blkio.throttle.read_bps_device", f"{device} {rate}")
                _write(directory / "blkio.throttle.write_bps_device", f"{device} {rate}")
        except OSError:
            return
        self.io_device = device

    @property
    def procs_files(self) -> list[str]:
        return sorted({str(directory / "cgroup.procs") for directory in self.made})

    def memory_killed(self) -> bool:
        """Whether the memory controller killed a task of the command (`oom_kill` > 0)."""
        if "memory" not in self.groups:
            return False
        directory, version = self.groups["memory"]
        name = "memory.events" if version == 2 else "memory.oom_control"
        try:
            for line in (directory / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value) > 0
        except (OSError, ValueError):
            pass
        return False

    def remove(self) -> None:
        """Kill what is left in the groups this scope made, then remove them."""
        for directory in self.made:
            group = PidsCgroup(directory)
            group.kill_all()
            group.remove()
        self.made = []
