"""What this host lets murmurd enforce on shell children, found by trying it.

`probe_host` runs `child.py --probe` in a throwaway process (Landlock ABI, an unprivileged
user + network namespace with `lo` up, a private mount namespace with a noexec bind, a tmpfs
root pivoted into, the real seccomp filter installed and refusing AF_NETLINK) and makes and
removes one pids cgroup. The answer is a
fact about the kernel, so it is computed once per process (`functools.cache`); the operator's
choice (`MURMURD_SHELL_CONFINEMENT`) is applied on top of it per capsule, never cached.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from murmurd.containment import cgroup, seccomp_filter

CHILD_SCRIPT = str(Path(__file__).with_name("child.py"))
PROBE_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class HostSupport:
    """What the kernel allows; each `*_error` says why a mechanism is missing."""

    landlock_abi: int
    netns: bool
    pids_root: Path | None
    root_uid: bool
    landlock_error: str | None = None
    netns_error: str | None = None
    pids_error: str | None = None
    seccomp: bool = False  # the default-deny filter installs and refuses AF_NETLINK
    seccomp_error: str | None = None
    mountns: bool = False  # a private mount namespace with a noexec bind of the workdir
    mountns_error: str | None = None
    sealed: bool = False  # a composed tmpfs root can be pivoted into
    sealed_error: str | None = None


def helper_command() -> list[str]:
    """How the helper is started: this interpreter, isolated, without site-packages."""
    return [sys.executable, "-I", "-S", CHILD_SCRIPT]


@functools.cache
def probe_host() -> HostSupport:
    """Try each mechanism once (see the module docstring)."""
    pids_root, pids_error = cgroup.probe()
    extra, compile_error = _probe_inputs()
    found: dict = {}
    try:
        done = subprocess.run([*helper_command(), "--probe", json.dumps(extra)], capture_output=True, timeout=PROBE_TIMEOUT_SECONDS,
                              env={}, stdin=subprocess.DEVNULL, check=False)
        found = json.loads(done.stdout.decode() or "{}")
        if done.returncode != 0 and not found:
            found = {"netns_error": f"the probe failed: {done.stderr.decode(errors='replace')[-300:]}"}
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        found = {"netns_error": f"the probe could not run: {exc}", "landlock_error": f"the probe could not run: {exc}"}
    abi = int(found.get("landlock_abi") or 0)
    return HostSupport(
        landlock_abi=abi,
        netns=bool(found.get("netns")),
        pids_root=pids_root,
        root_uid=os.getuid() == 0,
        landlock_error=None if abi else found.get("landlock_error", "Landlock is not available"),
        netns_error=None if found.get("netns") else found.get("netns_error", "network namespaces are not available"),
        pids_error=pids_error,
        seccomp=bool(found.get("seccomp")),
        seccomp_error=None if found.get("seccomp") else compile_error or found.get("seccomp_error", "not probed"),
        mountns=bool(found.get("mountns")),
        mountns_error=None if found.get("mountns") else found.get("mountns_error", "no network namespace to build it in"),
        sealed=bool(found.get("sealed")),
        sealed_error=None if found.get("sealed") else found.get("sealed_error", "no private mount namespace"),
    )


def _probe_inputs() -> tuple[dict, str | None]:
    """The real seccomp filter and the `pivot_root` number for the probe, or why not."""
    try:
        return {"seccomp": seccomp_filter.spec(unix_sockets=False),
                "pivot_root_syscall": seccomp_filter.syscall_number("pivot_root")}, None
    except seccomp_filter.SeccompUnavailable as exc:
        return {}, str(exc)
