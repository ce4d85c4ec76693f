"""Which confinement a capsule's shell children get on this host, the class that achieves, and the
`W-SEC` warnings that say exactly what is not enforced. Pure: the host facts come in as
`HostSupport`.

Classes (upstream's names, murmurd's mechanisms; docs/containment.md):

- `scoped` needs both a network namespace (no network but loopback) and Landlock (writes only
  beneath the workdir, no execution of workdir files), and `workdir_exec` false;
- anything less is `advisory`; `sealed` (a composed root filesystem) is never achieved.

The operator may turn the kernel mechanisms off with `MURMURD_SHELL_CONFINEMENT=none` (e.g. a
shell tool that must reach the host network); rlimits and the pids cgroup still apply.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from murmurd.containment.host import HostSupport

SETTING_VARIABLE = "MURMURD_SHELL_CONFINEMENT"
SETTINGS = ("auto", "none")
CLASSES = ("advisory", "scoped", "sealed")  # weakest first

Warning = tuple[str, str, str]  # (code, manifest path, message)


@dataclass(frozen=True)
class ContainmentPlan:
    """What every shell child of one capsule runs under (beyond environment and rlimits)."""

    netns: bool = False
    landlock_abi: int = 0  # 0: no Landlock
    workdir_exec: bool = True  # whether files written in the workdir may be executed
    pids_root: Path | None = None  # where per-command pids cgroups are made; None: none
    achieved: str = "advisory"
    mechanism: str = "none"
    why_not: tuple[str, ...] = field(default=())  # why each missing mechanism is missing

    @property
    def landlock(self) -> bool:
        return self.landlock_abi > 0


def setting_from(env: Mapping[str, str]) -> str:
    """The operator's `MURMURD_SHELL_CONFINEMENT` (default `auto`); ValueError when unknown."""
    value = env.get(SETTING_VARIABLE, "auto").strip().lower() or "auto"
    if value not in SETTINGS:
        raise ValueError(f"{SETTING_VARIABLE}={value!r} is not one of {', '.join(SETTINGS)}")
    return value


def plan_containment(support: HostSupport, setting: str, workdir_exec: bool = False) -> ContainmentPlan:
    """The plan for a capsule on this host under the operator's setting."""
    kernel = setting == "auto"
    netns = kernel and support.netns
    abi = support.landlock_abi if kernel else 0
    why: list[str] = []
    if not kernel:
        why.append(f"the operator set {SETTING_VARIABLE}=none")
    else:
        if not netns:
            why.append(f"no network namespace: {support.netns_error}")
        if not abi:
            why.append(f"no Landlock: {support.landlock_error}")
    mechanism = "+".join(name for name, on in (("netns", netns), ("landlock", abi > 0)) if on) or "none"
    achieved = "scoped" if netns and abi and not workdir_exec else "advisory"
    return ContainmentPlan(netns=netns, landlock_abi=abi, workdir_exec=workdir_exec or not abi,
                           pids_root=support.pids_root, achieved=achieved, mechanism=mechanism, why_not=tuple(why))


def shortfall(floor: str, plan: ContainmentPlan) -> str | None:
    """Why `plan` does not meet a containment floor, or None when it does."""
    if CLASSES.index(floor) <= CLASSES.index(plan.achieved):
        return None
    if floor == "sealed":
        return (f"the floor is 'sealed' but murmurd achieves {plan.achieved!r}: it never builds a composed root "
                "filesystem (mount namespace + pivot_root) for shell children")
    because = "; ".join(plan.why_not) or "filesystem.workdir_exec is true"
    return f"the floor is {floor!r} but murmurd achieves {plan.achieved!r} here ({because})"


def shell_warnings(
    plan: ContainmentPlan, support: HostSupport, *, shell_allow: list[str], network_allow: list[str],
    declares_workdir_exec: bool,
) -> list[Warning]:
    """Every `W-SEC` warning for a capsule whose shell allowlist is `shell_allow` (none when empty)."""
    if not shell_allow:
        return []
    found: list[Warning] = []
    reasons = "; ".join(plan.why_not)
    if not plan.netns and not plan.landlock:
        found.append(("W-SEC-001", "capabilities.shell.allow",
                      f"shell children are confined by their environment and rlimits only ({reasons}): they can "
                      "write, and execute, anything murmurd's uid can, and reach any host murmurd's network reaches"))
        if "bash" in shell_allow and network_allow:
            found.append(("W-SEC-003", "capabilities.shell.allow",
                          "bash is allowed and network.allow is not empty, with no network confinement: any bash "
                          "script can reach any host, not only the allowlisted ones"))
    elif plan.netns and not plan.landlock:
        found.append(("W-SEC-002", "capabilities.shell.allow",
                      f"filesystem writes and execution are not confined ({reasons}): shell children can write, and "
                      "execute, anything murmurd's uid can; their network is confined (a namespace with loopback only)"))
    elif plan.landlock and not plan.netns:
        found.append(("W-SEC-013", "capabilities.shell.allow",
                      f"the network is not confined ({reasons}): shell children reach any host murmurd can, not only "
                      "network.allow; writes are confined to the workdir (Landlock)"))
    else:
        exec_rule = ("files written in the workdir may be executed (workdir_exec)" if plan.workdir_exec
                     else "no file in the workdir may be executed")
        found.append(("W-SEC-005", "capabilities.shell.allow",
                      "shell children run in a network namespace with loopback only and under Landlock (writes only "
                      f"beneath the workdir and to /dev/null; {exec_rule}; signals and abstract unix sockets scoped to "
                      "the command). Not enforced: reading files outside the workdir, AF_UNIX sockets by path "
                      "(unix_sockets is not gated: no seccomp filter), syscall filtering"))
    # With a network namespace, network.allow reaches shell children through the egress relay
    # (murmurd/containment/egress_relay.py): no W-SEC-014.
    if declares_workdir_exec:
        found.append(("W-SEC-011", "capabilities.filesystem.workdir_exec",
                      "workdir_exec: true lets shell children execute files written in the workdir; "
                      "the achieved class is advisory"))
    if plan.pids_root is None:
        text = f"cgroup_pids_max is not enforced ({support.pids_error})"
        if support.root_uid:
            text += ("; murmurd runs as uid 0, which the kernel exempts from RLIMIT_NPROC, so max_processes is not "
                     "enforced either: a fork bomb is bounded only by the command's timeout")
        found.append(("W-SEC-010", "capabilities.resources", text))
    return found
