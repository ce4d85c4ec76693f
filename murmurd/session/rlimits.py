"""`capabilities.resources`: the OS limits upstream sets on every shell child (manifest fact
sheet, "Resource limits"), the ones a plain process can set on itself before `exec`.

Implemented as rlimits (soft = hard, but CPU's hard limit one second above its soft one so
SIGXCPU, not SIGKILL, ends the child), set in the child between fork and exec, only for the fields a
manifest declares (murmurd imposes none of upstream's defaults, which would change what existing
capsules may run): `max_open_files` (RLIMIT_NOFILE), `max_file_size_bytes` (RLIMIT_FSIZE),
`cpu_seconds` (RLIMIT_CPU), `memory_bytes` (RLIMIT_AS). A value above murmurd's own hard limit is
clamped to it (an unprivileged process cannot raise it). Core dumps are always off. A child the
kernel kills for a limit reports it: SIGXCPU names `cpu_seconds`, SIGXFSZ `max_file_size_bytes`.

`max_processes` (RLIMIT_NPROC counts the whole uid, not the capsule), the `cgroup_*` fields and
`workdir_max_bytes` need machinery murmurd does not have; validation warns about them.
"""

from __future__ import annotations

import resource
import signal
from collections.abc import Sequence
from typing import Any

# manifest field -> the rlimit it sets
RLIMITS: dict[str, int] = {
    "max_open_files": resource.RLIMIT_NOFILE,
    "max_file_size_bytes": resource.RLIMIT_FSIZE,
    "cpu_seconds": resource.RLIMIT_CPU,
    "memory_bytes": resource.RLIMIT_AS,
}
# the signal a kernel-enforced limit kills with -> the manifest field that set it
LIMIT_SIGNALS: dict[int, str] = {int(signal.SIGXCPU): "cpu_seconds", int(signal.SIGXFSZ): "max_file_size_bytes"}

Limit = tuple[int, int]  # (RLIMIT_*, value)


def declared_limits(resources: Any) -> tuple[Limit, ...]:
    """The rlimits a manifest's `capabilities.resources` block declares (None: no block)."""
    if resources is None:
        return ()
    return tuple((which, int(getattr(resources, name))) for name, which in RLIMITS.items()
                 if getattr(resources, name, None) is not None)


def apply_limits(limits: Sequence[Limit]) -> None:
    """In the child, before exec: each declared limit as soft = hard (clamped to the current hard
    limit), and no core dumps. Must not allocate much or raise: it runs between fork and exec."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for which, value in limits:
        _soft, hard = resource.getrlimit(which)
        # CPU: the kernel sends SIGXCPU at the soft limit and SIGKILL at the hard one; a second of
        # headroom lets SIGXCPU (which names the limit) arrive first.
        wanted_hard = value + 1 if which == resource.RLIMIT_CPU else value
        if hard != resource.RLIM_INFINITY:
            value, wanted_hard = min(value, hard), min(wanted_hard, hard)
        resource.setrlimit(which, (value, wanted_hard))


def limit_that_killed(returncode: int, limits: Sequence[Limit]) -> str | None:
    """The manifest field whose limit killed the child (returncode -SIG), when one was declared."""
    if returncode >= 0:
        return None
    field = LIMIT_SIGNALS.get(-returncode)
    declared = {which for which, _ in limits}
    return field if field is not None and RLIMITS[field] in declared else None
