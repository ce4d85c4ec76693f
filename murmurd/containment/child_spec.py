"""What the helper is told to install for one command, from the capsule's plan: the Landlock
ruleset (with the allowlisted binaries' closure), the mount namespace (noexec workdir or the
sealed root) and the compiled seccomp filter. Daemon side; the helper only reads the JSON."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from murmurd.containment import seccomp_filter
from murmurd.containment.closure import closure
from murmurd.containment.plan import ContainmentPlan
from murmurd.containment.sealed import SYSTEM_TREES


def confinement_spec(plan: ContainmentPlan | None, workdir: Path, home: Path, tmp: Path,
                     allowed: Iterable[str]) -> dict:
    """The `landlock`, `mounts` and `seccomp` entries of the helper's spec (None: not installed)."""
    if plan is None:
        return {"landlock": None, "mounts": None, "seccomp": None}
    outside = [] if home.is_relative_to(workdir) else [str(home)]
    read_exec = list(closure(allowed)) if plan.landlock else []
    runtime = [[path, list_dir] for path, list_dir in plan.runtime]
    landlock = None
    if plan.landlock:
        landlock = {"abi": plan.landlock_abi, "workdir": str(workdir), "workdir_exec": plan.workdir_exec,
                    "also_writable": outside + (["/tmp"] if plan.sealed else []), "read_exec": read_exec,
                    "runtime": runtime, "read_only": ([*SYSTEM_TREES, "/etc"] if plan.sealed else []) + list(plan.read_only),
                    "list_only": ["/"] if plan.sealed else []}
    mounts = None
    if plan.mountns and plan.sealed:
        mounts = {"sealed": {"workdir": str(workdir), "tmp": str(tmp), "home": str(home), "also_writable": outside,
                             "workdir_exec": plan.workdir_exec,
                             "extra_paths": read_exec + [path for path, _ in plan.runtime] + list(plan.read_only),
                             "pivot_root_syscall": seccomp_filter.syscall_number("pivot_root")}}
    elif plan.mountns:
        mounts = {"noexec": [str(workdir), *outside]}
    seccomp = seccomp_filter.spec(plan.unix_sockets, plan.seccomp_extra) if plan.seccomp else None
    return {"landlock": landlock, "mounts": mounts, "seccomp": seccomp}
