"""Which confinement a capsule's shell children get on this host, the class that achieves, and the
`W-SEC` warnings that say exactly what is not enforced. Pure: the host facts come in as
`HostSupport`.

Classes (upstream's tiers, murmurd's mechanisms; docs/containment.md):

- `scoped` (upstream's Full tier, mechanism `landlock+seccomp`) needs a network namespace
  (loopback only), Landlock (reads and execution only of the allowlisted binaries' closures and
  the `interpreter_runtime` grants, writes only beneath the workdir), the seccomp allowlist and a
  private mount namespace (the workdir `noexec`: the loader trick), and `workdir_exec` false;
- `sealed` (`mountns+pivot_root+landlock+seccomp`) is all of that inside a composed root, applied
  only when the capsule declares `sealed` and the host can build one;
- anything less is `advisory`, its mechanism the parts really installed (`netns+landlock`, ...).

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
    seccomp: bool = False  # the default-deny syscall allowlist is installed
    mountns: bool = False  # a private mount namespace: the workdir noexec (or the sealed root)
    sealed: bool = False  # the composed root (pivot_root) is built
    unix_sockets: bool = False  # `capabilities.network.unix_sockets`: AF_UNIX allowed by the filter
    seccomp_extra: tuple[str, ...] = ()  # the operator's `MURMURD_SECCOMP_ALLOW`
    runtime: tuple[tuple[str, bool], ...] = ()  # `interpreter_runtime` (path, list_dir) grants
    read_only: tuple[str, ...] = ()  # read (and list) only: the process transport's profile (session/process/profile.py)

    @property
    def landlock(self) -> bool:
        return self.landlock_abi > 0


def setting_from(env: Mapping[str, str]) -> str:
    """The operator's `MURMURD_SHELL_CONFINEMENT` (default `auto`); ValueError when unknown."""
    value = env.get(SETTING_VARIABLE, "auto").strip().lower() or "auto"
    if value not in SETTINGS:
        raise ValueError(f"{SETTING_VARIABLE}={value!r} is not one of {', '.join(SETTINGS)}")
    return value


def plan_containment(support: HostSupport, setting: str, workdir_exec: bool = False, *, declared: str = "advisory",
                     unix_sockets: bool = False, runtime: tuple[tuple[str, bool], ...] = (),
                     seccomp_extra: tuple[str, ...] = ()) -> ContainmentPlan:
    """The plan for a capsule on this host under the operator's setting. `declared` is the floor
    (only a `sealed` floor gets the composed root, as upstream applies it)."""
    kernel = setting == "auto"
    netns = kernel and support.netns
    abi = support.landlock_abi if kernel else 0
    seccomp = kernel and support.seccomp
    mountns = netns and support.mountns
    why: list[str] = []
    if not kernel:
        why.append(f"the operator set {SETTING_VARIABLE}=none")
    else:
        if not netns:
            why.append(f"no network namespace: {support.netns_error}")
        if not abi:
            why.append(f"no Landlock: {support.landlock_error}")
        if not support.seccomp:
            why.append(f"no seccomp filter: {support.seccomp_error}")
        if netns and not support.mountns:
            why.append(f"no private mount namespace (workdir files could be mapped executable): {support.mountns_error}")
    full = bool(netns and abi and seccomp and mountns)
    sealed = full and declared == "sealed" and support.sealed
    if full and declared == "sealed" and not support.sealed:
        why.append(f"no composed root: {support.sealed_error}")
    if sealed:
        mechanism = "mountns+pivot_root+landlock+seccomp"
    elif full:
        mechanism = "landlock+seccomp"
    else:
        parts = (("netns", netns), ("mountns", mountns), ("landlock", abi > 0), ("seccomp", seccomp))
        mechanism = "+".join(name for name, on in parts if on) or "none"
        if mechanism == "landlock+seccomp":  # never mistaken for the Full tier's name
            mechanism += " (no netns)"
    achieved = "advisory" if workdir_exec or not full else "sealed" if sealed else "scoped"
    return ContainmentPlan(netns=netns, landlock_abi=abi, workdir_exec=workdir_exec or not abi,
                           pids_root=support.pids_root, achieved=achieved, mechanism=mechanism, why_not=tuple(why),
                           seccomp=seccomp, mountns=mountns and (sealed or not workdir_exec), sealed=sealed,
                           unix_sockets=unix_sockets, seccomp_extra=seccomp_extra, runtime=runtime)


def shortfall(floor: str, plan: ContainmentPlan) -> str | None:
    """Why `plan` does not meet a containment floor, or None when it does."""
    if CLASSES.index(floor) <= CLASSES.index(plan.achieved):
        return None
    because = "; ".join(plan.why_not)
    if not because and floor == "sealed" and not plan.workdir_exec:
        because = "the composed root is built only for a capsule whose manifest declares containment: sealed"
    return f"the floor is {floor!r} but murmurd achieves {plan.achieved!r} here ({because or 'filesystem.workdir_exec is true'})"


def floor_refusal(floor: str, plan: ContainmentPlan, support: HostSupport,
                  subprocesses: bool = True) -> tuple[str, str] | None:
    """(code, reason) when a capsule with this floor must not launch here, else None. The code
    names what is missing: `E-CAP-005` no network namespace, `E-RUN-012` no cgroup for a capsule
    with a subprocess tree, `E-CAP-003` any other shortfall (`sealed` unavailable included)."""
    if floor == "advisory":
        return None
    if not support.netns:
        return "E-CAP-005", (f"the floor is {floor!r} but no network namespace can be created here "
                             f"({support.netns_error}); shell children would reach the host network")
    if subprocesses and plan.pids_root is None:
        return "E-RUN-012", (f"the floor is {floor!r} but no cgroup can be delegated for the shell children "
                             f"({support.pids_error}); their process count would be unbounded")
    reason = shortfall(floor, plan)
    return ("E-CAP-003", reason) if reason is not None else None


def shell_warnings(
    plan: ContainmentPlan, support: HostSupport, *, shell_allow: list[str], network_allow: list[str],
    declares_workdir_exec: bool, native_tools: str | None = None,
) -> list[Warning]:
    """Every `W-SEC` warning for a capsule whose shell allowlist is `shell_allow`, or that runs
    native tools (`native_tools`: the manifest path naming them), which run under the same
    containment as shell children; none when it has neither."""
    if not shell_allow and native_tools is None:
        return []
    found = _subprocess_warnings(plan, support, shell_allow, network_allow, declares_workdir_exec)
    if shell_allow or native_tools is None:
        return found
    # no shell.allow to blame: the warnings name the native tools instead
    return [(code, native_tools if path == "capabilities.shell.allow" else path, text) for code, path, text in found]


def _subprocess_warnings(plan: ContainmentPlan, support: HostSupport, shell_allow: list[str],
                         network_allow: list[str], declares_workdir_exec: bool) -> list[Warning]:
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
        found.append(("W-SEC-005", "capabilities.shell.allow", _enforced(plan)))
    # With a network namespace, network.allow reaches shell children through the egress relay
    # (murmurd/containment/egress_relay.py): no W-SEC-014.
    for path, list_dir in plan.runtime:
        rights = "read, execute and list" if list_dir else "read and execute"
        found.append(("W-SEC-009", "capabilities.shell.interpreter_runtime",
                      f"shell children may {rights} everything beneath {path} (an interpreter_runtime grant)"))
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


def _enforced(plan: ContainmentPlan) -> str:
    """W-SEC-005: what holds on a host with a namespace and Landlock, and the `unix_sockets` exception."""
    exec_rule = ("files written in the workdir may be executed (workdir_exec)" if plan.workdir_exec
                 else "no file in the workdir may be executed or mapped executable")
    text = ("shell children run in a network namespace with loopback only and under Landlock: they read and execute "
            "only the allowlisted binaries, their ELF interpreter and shared-library closure and the "
            "interpreter_runtime grants, write only beneath the workdir (devices: /dev/null, /dev/zero, /dev/urandom); "
            f"{exec_rule}; signals and abstract unix sockets scoped to the command")
    if plan.sealed:
        text += "; inside a composed root (mount namespace + pivot_root): the rest of the host is absent"
    if plan.seccomp:
        sockets = ("AF_UNIX sockets are allowed (network.unix_sockets: true), host daemon sockets included"
                   if plan.unix_sockets else "AF_UNIX sockets refused (network.unix_sockets: false)")
        text += (f". seccomp: a default-deny syscall allowlist; {sockets}; AF_NETLINK and AF_PACKET refused; "
                 "memfd_create and execveat refused")
    else:
        text += ". Not enforced: syscall filtering, AF_UNIX sockets by path (no seccomp filter)"
    return text
