"""A shell child started confined: its pids and resource cgroups, the egress relay out of its
network namespace, and the confinement helper (`murmurd/containment/child.py`) that confines
itself and execs the command (docs/containment.md)."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess

from murmurd.containment import resources
from murmurd.containment.cgroup import PidsCgroup
from murmurd.containment.child_spec import confinement_spec
from murmurd.containment.egress_relay import EgressRelay
from murmurd.containment.host import helper_command
from murmurd.session import shell_watchdog
from murmurd.session.shell_model import TMP_DIR_NAME, ShellFailed, ShellInvocation, ShellPolicy


def pids_cgroup(policy: ShellPolicy) -> PidsCgroup | None:
    plan = policy.containment
    if plan is None or plan.pids_root is None:
        return None
    try:
        return PidsCgroup.create(plan.pids_root, policy.limits.cgroup_pids_max)
    except OSError as exc:
        raise ShellFailed(f"shell: cannot create the command's pids cgroup: {exc.strerror or exc}") from None


def resource_scope(policy: ShellPolicy, group: PidsCgroup | None) -> resources.CommandScope | None:
    """The command's memory/cpu/io cgroups, where murmurd's kernel confinement runs and the host
    delegates the controllers (`murmurd.containment.resources`)."""
    if policy.containment is None or not resources.probe().roots:
        return None
    limits = policy.limits
    bounds = resources.ResourceBounds(limits.cgroup_memory_bytes, limits.cgroup_cpu_percent,
                                      limits.cgroup_io_bytes_per_sec)
    try:
        return resources.CommandScope.create(resources.probe(), bounds, policy.workdir,
                                             group.path if group is not None else None)
    except OSError as exc:
        raise ShellFailed(f"shell: cannot create the command's resource cgroups: {exc.strerror or exc}") from None


def egress_relay(policy: ShellPolicy, binary: str) -> EgressRelay | None:
    """The relay carrying the command's allowlisted connections out of its network namespace."""
    if policy.egress is None or not policy.egress or policy.containment is None or not policy.containment.netns:
        return None
    problem = policy.egress.problem()
    if problem is not None:
        raise ShellFailed(f"shell: {binary!r} was not run: {problem}")
    report = policy.on_egress_refused
    return EgressRelay(policy.egress, (lambda refusal: report(binary, refusal)) if report is not None else None)


def spawn_confined(
    policy: ShellPolicy, invocation: ShellInvocation, group: PidsCgroup | None = None,
    scope: resources.CommandScope | None = None, relay: EgressRelay | None = None,
    *, stdin: int = subprocess.DEVNULL,
) -> subprocess.Popen[bytes]:
    """Start the confinement helper (`murmurd/containment/child.py`), which confines itself as
    the policy says, announces its group to the watchdog and execs the command. No Python runs
    between fork and exec here. Raises `ShellFailed` when the helper cannot confine. `stdin` is
    empty but for a process-transport CLI that reads its task from a pipe."""
    assert invocation.executable is not None
    plan = policy.containment
    watchdog = shell_watchdog.watchdog_fd()
    error_read, error_write = os.pipe2(os.O_CLOEXEC)
    spec = {
        "parent": os.getpid(),
        "watchdog_fd": watchdog,
        "error_fd": error_write,
        "cgroup_procs": group.procs_file if group is not None else None,
        "cgroup_join": scope.procs_files if scope is not None else [],
        "egress": relay.child_spec() if relay is not None else None,
        "netns": bool(plan and plan.netns),
        "rlimits": policy.limits.rlimits(in_user_namespace=bool(plan and plan.netns)),
        **confinement_spec(plan, policy.workdir, policy.home, policy.home / TMP_DIR_NAME,
                           invocation.allowed_paths or (invocation.executable,)),
        "executable": invocation.executable,
        "env_count": len(invocation.env),
    }
    # The command's environment travels as arguments, not as the helper's environment: the
    # helper's own dynamic loader runs before any confinement, and `LD_PRELOAD`,
    # `LD_DEBUG_OUTPUT` and the like from a caller's environment would act there unconfined.
    env_entries = [f"{name}={value}" for name, value in invocation.env.items()]
    fds = (error_write,) if watchdog is None else (error_write, watchdog)
    if relay is not None:
        fds = (*fds, relay.child_fd)
    try:
        try:
            proc = subprocess.Popen(
                [*helper_command(), json.dumps(spec), *env_entries, *invocation.argv],
                cwd=policy.workdir,
                env={},
                stdin=stdin,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                shell=False,
                close_fds=True,
                pass_fds=fds,
                start_new_session=True,
            )
        finally:
            os.close(error_write)
        refusal = _read_refusal(error_read, policy.timeout_seconds)
    except OSError as exc:
        raise ShellFailed(f"shell: cannot start {invocation.binary!r}: {exc.strerror or exc}") from None
    finally:
        os.close(error_read)
    outcome = "was not run"
    if refusal is None and relay is not None:
        try:
            relay.start()  # the helper sent its listeners before it exec'd
        except OSError as exc:
            refusal, outcome = str(exc), "was killed as it started"
    if refusal is not None:
        kill_group(proc)
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        if proc.stderr is not None:
            proc.stderr.close()
        raise ShellFailed(f"shell: {invocation.binary!r} {outcome}: the confinement could not be set up: {refusal}")
    return proc


def _read_refusal(fd: int, timeout: float) -> str | None:
    """The helper's error, or None once the pipe closes (its `execve` succeeded)."""
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        if not selector.select(timeout):
            return f"the confinement helper did not exec within {timeout:g} s"
    data = os.read(fd, 4096)
    return data.decode("utf-8", errors="replace") if data else None


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
