"""A pids cgroup per shell command: `cgroup_pids_max` as the kernel's `pids.max`.

Why: RLIMIT_NPROC (`max_processes`) does not bind uid 0, which the kernel exempts, and murmurd
often runs as root (containers, CI). A cgroup counts every task of the command's tree whatever
its uid, and it also finds descendants that left the process group (`setsid`), which are killed
with it. Works on cgroup v1 (a writable `pids` hierarchy) and v2 (murmurd's own cgroup with
`pids` in `cgroup.subtree_control`). Nothing here is global: each command gets a fresh
`murmurd-shell-<hex>` directory beside murmurd's own cgroup, removed when the command ends.
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from dataclasses import dataclass
from pathlib import Path

PREFIX = "murmurd-shell-"
STALE_SECONDS = 60.0
_KILL_ROUNDS = 50
_RMDIR_ROUNDS = 40


def _mounts() -> list[tuple[str, str, str]]:
    """(mount point, fs type, super options) of every cgroup mount, from /proc/self/mountinfo."""
    found = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            found.append((fields[4].replace("\\040", " "), tail[0], tail[2]))
    return found


def own_pids_directory() -> Path | None:
    """The directory of murmurd's own cgroup in which a `pids` child can be made, or None."""
    try:
        memberships = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    mounts = _mounts()
    for line in memberships:
        _hid, controllers, path = line.split(":", 2)
        if "pids" in controllers.split(","):  # v1
            for point, kind, options in mounts:
                if kind == "cgroup" and "pids" in options.split(","):
                    return Path(point) / path.lstrip("/")
    for line in memberships:
        _hid, controllers, path = line.split(":", 2)
        if controllers == "":  # v2: children get pids only if it is enabled for them
            for point, kind, _options in mounts:
                directory = Path(point) / path.lstrip("/")
                if kind == "cgroup2" and _enabled_for_children(directory):
                    return directory
    return None


def _enabled_for_children(directory: Path) -> bool:
    try:
        return "pids" in (directory / "cgroup.subtree_control").read_text().split()
    except OSError:
        return False


def probe() -> tuple[Path | None, str | None]:
    """Where per-command pids cgroups can be made (one made and removed to be sure), or why not."""
    root = own_pids_directory()
    if root is None:
        return None, "no pids cgroup controller is mounted for murmurd's cgroup (v1) or enabled below it (v2)"
    try:
        group = PidsCgroup.create(root, 1)
    except OSError as exc:
        return None, f"cannot create a pids cgroup in {str(root)!r}: {exc.strerror or exc}"
    group.remove()
    return root, None


def sweep_stale(root: Path) -> None:
    """Remove the empty command groups a murmurd killed before its own cleanup left behind. Only
    groups older than a minute: a fresh one may not have its command yet. The kernel refuses to
    remove a group that still has tasks, so a running command's group is never touched."""
    now = time.time()
    try:
        entries = [e for e in os.scandir(root) if e.name.startswith(PREFIX) and e.is_dir(follow_symlinks=False)]
    except OSError:
        return
    for entry in entries:
        try:
            if now - entry.stat(follow_symlinks=False).st_mtime > STALE_SECONDS:
                os.rmdir(entry.path)
        except OSError:
            continue


@dataclass
class PidsCgroup:
    """One command's cgroup. `procs_file` is what the child writes its pid to before exec."""

    path: Path

    @classmethod
    def create(cls, root: Path, pids_max: int) -> PidsCgroup:
        sweep_stale(root)
        path = root / f"{PREFIX}{secrets.token_hex(8)}"
        path.mkdir()
        group = cls(path)
        try:
            (path / "pids.max").write_text(str(pids_max))
        except OSError:
            group.remove()
            raise
        return group

    @property
    def procs_file(self) -> str:
        return str(self.path / "cgroup.procs")

    def limit_hit(self) -> bool:
        """Whether a fork was refused because the tree reached `pids.max` (`pids.events` max)."""
        try:
            for line in (self.path / "pids.events").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "max":
                    return int(value) > 0
        except (OSError, ValueError):
            pass
        return False

    def kill_all(self) -> None:
        """SIGKILL every task still in the group (those that escaped the process group too)."""
        for _ in range(_KILL_ROUNDS):
            try:
                pids = [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
            except (OSError, ValueError):
                return
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.01)

    def remove(self) -> None:
        """Remove the (empty) group; retried briefly while killed tasks are still being reaped."""
        for _ in range(_RMDIR_ROUNDS):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.025)
