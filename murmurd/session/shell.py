"""The one shell runner behind model-visible shell tools and the `murmur:shell/execute` import.

Rules (seed: `murmur:shell/execute`; runtime notes §3 and §5):

- **Allowlist first.** `binary` must be a bare name listed in `capabilities.shell.allow`; a
  name holding `/` or not listed raises `ShellRefused` before anything is spawned.
- **No shell interpretation.** The argument list goes to the executable as it is
  (`shell=False`). Only an allowed interpreter (`sh -c <script>`) interprets anything.
- **Resolution.** The name is resolved against the `PATH` of the filtered *host* environment
  (a guest's own `PATH` override cannot redirect an allowed name to another program), and
  the absolute path found is what runs; `argv[0]` stays the bare name. `binary_path` is that
  path canonicalized, or the bare name when nothing resolved (running it then fails).
- **Environment.** Host variables matching the default baseline (`PATH`, `LANG`, `LC_ALL`,
  `TERM`, `TZ`, `USER`, `LOGNAME`) or a `baseline_env` glob (added to the default, as upstream),
  minus `strip_env` glob matches and credentials (by name or value:
  `murmurd/manifest/credentials.py`). A variable `baseline_env` names literally (no glob) is the
  operator's explicit choice and passes the credential heuristic (`DATABASE_URL`), never
  upstream's built-in credential strips (`UPSTREAM_CREDENTIAL_STRIPS`) nor `strip_env`. Then
  the caller's overrides, filtered like a glob match; then `HOME` = `<workdir>/.capsule-home`. cwd is the workdir, stdin is
  empty, and the command runs in its own process group.
- **Output.** Each of stdout/stderr is cut at 16 KiB (on a UTF-8 character boundary, invalid
  bytes replaced) and `truncated` is set; the full output of both streams, labelled, is then
  written to `logs/shell-<UTC timestamp>.log` and `full_output_path` names it relative to
  the workdir. A stream past `max_log_stream_bytes` (256 MiB) is cut in the log too, with a
  note, so a runaway command cannot fill the disk.
- **Outcomes.** A non-zero exit is data. A command killed by a signal reports `128 + signal`,
  like a shell. A timeout kills the whole process group and reports exit code 124 (as
  coreutils `timeout` does) with `[murmurd] timed out after N s` appended to stderr and
  `timed_out` set. Once the command exits, anything it left behind still holding the output
  pipes gets 2 s; then (and always when the call ends) the group is killed, so no background
  job outlives its call. Only a spawn or I/O failure raises `ShellFailed` (`ShellCanceled`
  when the caller's cancel flag is set: the group is killed within 0.1 s).
- **Never orphaned.** The group is registered with `shell_watchdog` while it runs, so it dies
  with murmurd even when murmurd is SIGKILLed (see that module for why PDEATHSIG is not enough).
- **Confined.** The child is the confinement helper (`murmurd/containment/child.py`), exec'd at
  once (no Python between fork and exec in this threaded process): it sets the rlimits of
  `policy.limits`, joins the command's pids, memory, cpu and io cgroups, enters the namespaces
  (handing murmurd the listeners `policy.egress` implies: the egress relay carries `network.allow`
  out of the network namespace), Landlock (reads and exec of `allowed_paths`' closure only) and
  seccomp as `policy.containment` plans (`containment/child_spec.py`), then execs the command
  (docs/containment.md). `policy.workdir_guard` bounds the workdir (`E-RUN-013`). When the helper
  cannot confine as planned the command does not run (`ShellFailed`). With Landlock, `TMPDIR`
  (and `TMP`, `TEMP`) is `<HOME>/tmp`. What a limit stopped is `resource_limit`.

`run_shell` blocks: call it from a worker thread.
"""

from __future__ import annotations

import codecs
import datetime as dt
import fnmatch
import json
import os
import selectors
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

from murmurd import workdir_fs
from murmurd.containment import resources
from murmurd.containment.cgroup import PidsCgroup
from murmurd.containment.egress_relay import EgressGrant, EgressRelay, Refusal
from murmurd.containment.child_spec import confinement_spec
from murmurd.containment.host import helper_command
from murmurd.containment.plan import ContainmentPlan
from murmurd.manifest.credentials import looks_like_credential
from murmurd.session import rlimits, shell_watchdog
from murmurd.session.rlimits import ShellLimits
from murmurd.session.workdir_guard import WorkdirGuard

SHELL_INTERPRETERS = frozenset({"bash", "sh", "dash", "zsh", "ksh", "fish"})
DEFAULT_BASELINE_ENV: tuple[str, ...] = ("PATH", "LANG", "LC_ALL", "TERM", "TZ", "USER", "LOGNAME")
# Upstream's built-in strips: removed even when `baseline_env` names the variable itself.
UPSTREAM_CREDENTIAL_STRIPS: tuple[str, ...] = (
    "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GOOGLE_API_KEY", "HUGGING_FACE_HUB_TOKEN", "NEXUS_API_KEY", "GITHUB_TOKEN",
    "GH_TOKEN", "KUBECONFIG", "NPM_TOKEN", "PYPI_TOKEN", "CARGO_REGISTRY_TOKEN", "AWS_*", "DOCKER_*", "*_API_KEY",
)
_GLOB_CHARS = frozenset("*?[")
DEFAULT_TIMEOUT_SECONDS = 300.0
MAX_STREAM_BYTES = 16 * 1024
MAX_LOG_STREAM_BYTES = 256 * 1024 * 1024
TIMEOUT_EXIT_CODE = 124
DISPLAY_LIMIT = 200
HOME_DIR_NAME = ".capsule-home"
TMP_DIR_NAME = "tmp"  # beneath HOME: TMPDIR of a Landlock-confined child
LOGS_DIR_NAME = "logs"

_PIPE_GRACE_SECONDS = 2.0
_POLL_SECONDS = 0.1
_READ_CHUNK = 64 * 1024


class CancelFlag(Protocol):
    """What a caller cancels a running command with: a `threading.Event`, or a host `CallGuard`."""

    def is_set(self) -> bool: ...


class ShellError(Exception):
    """Base of the shell runner's errors."""


class ShellRefused(ShellError):
    """The call is not allowed (allowlist, malformed arguments or environment); nothing ran."""


class ShellFailed(ShellError):
    """The command could not be spawned, or its output could not be collected or logged."""


class ShellCanceled(ShellFailed):
    """The caller canceled the call; the process group was killed."""


class WorkdirExceeded(ShellFailed):
    """`E-RUN-013`: the workdir grew past `workdir_max_bytes`; the session ends (`workdir_guard`)."""


@dataclass(frozen=True)
class ShellPolicy:
    """What a capsule's shell may do. `home` and `logs_dir` default beneath `workdir`."""

    allow: frozenset[str]
    workdir: Path
    strip_env: tuple[str, ...] = ()
    baseline_env: tuple[str, ...] | None = None
    home: Path = field(default=None)  # type: ignore[assignment]  # workdir/.capsule-home
    logs_dir: Path = field(default=None)  # type: ignore[assignment]  # workdir/logs
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    max_stream_bytes: int = MAX_STREAM_BYTES
    max_log_stream_bytes: int = MAX_LOG_STREAM_BYTES
    limits: ShellLimits = ShellLimits()  # `capabilities.resources` (upstream's defaults), set before exec
    # The kernel confinement (network namespace, Landlock, pids cgroup); None: environment and rlimits only.
    containment: ContainmentPlan | None = None
    # What `capabilities.network.allow` lets a child in a network namespace reach (the egress
    # relay, murmurd/containment/egress_relay.py), and who hears each refusal (`egress_denied`).
    egress: EgressGrant | None = None
    on_egress_refused: Callable[[str, Refusal], None] | None = field(default=None, compare=False)
    # The runtime-owned MURMUR_* identity (murmurd/staging/identity.py): set after every filter.
    runtime_env: tuple[tuple[str, str], ...] = ()
    # `workdir_max_bytes`, shared by every shell command of a session (None: not watched).
    workdir_guard: WorkdirGuard | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        workdir = Path(self.workdir)
        object.__setattr__(self, "workdir", workdir)
        object.__setattr__(self, "allow", frozenset(self.allow))
        object.__setattr__(self, "strip_env", tuple(self.strip_env))
        object.__setattr__(self, "runtime_env", tuple(dict(self.runtime_env).items()))
        if self.baseline_env is not None:
            object.__setattr__(self, "baseline_env", tuple(self.baseline_env))
        object.__setattr__(self, "home", Path(self.home) if self.home is not None else workdir / HOME_DIR_NAME)
        object.__setattr__(
            self, "logs_dir", Path(self.logs_dir) if self.logs_dir is not None else workdir / LOGS_DIR_NAME
        )
        if self.timeout_seconds <= 0:
            raise ValueError(f"timeout_seconds must be > 0, got {self.timeout_seconds}")
        if self.max_stream_bytes < 0 or self.max_log_stream_bytes < self.max_stream_bytes:
            raise ValueError("need 0 <= max_stream_bytes <= max_log_stream_bytes")

    @classmethod
    def from_capability(cls, capability: object, workdir: Path, **overrides: object) -> ShellPolicy:
        """From a manifest `ShellCapability` (`allow`, `strip_env`, `baseline_env` lists).

        `baseline_env` adds to the default baseline; an empty list adds nothing."""
        baseline = list(getattr(capability, "baseline_env", None) or ())
        return cls(
            allow=frozenset(getattr(capability, "allow", ())),
            workdir=workdir,
            strip_env=tuple(getattr(capability, "strip_env", None) or ()),
            baseline_env=tuple(baseline) if baseline else None,
            **overrides,  # type: ignore[arg-type]
        )


@dataclass(frozen=True)
class ShellInvocation:
    """A checked call, ready to run: what a decision-point `on-shell` event describes."""

    binary: str
    binary_path: str  # canonical absolute path, or the bare name when nothing resolved
    executable: str | None  # the path that is executed; None when nothing resolved
    argv: list[str]  # exactly what the executable receives, argv[0] (the bare name) included
    env: dict[str, str]
    # every allowlisted name resolved the same way: what Landlock lets the command read and execute
    allowed_paths: tuple[str, ...] = ()


@dataclass
class ShellOutcome:
    """What a shell call produced. `stdout`/`stderr` are the (possibly cut) texts."""

    exit_code: int
    stdout: str
    stderr: str
    truncated: bool
    full_output_path: str | None  # relative to the workdir; only when truncated
    binary_path: str
    argv: list[str]
    duration_ms: int
    stdout_bytes: int  # full size of each stream, not the cut size
    stderr_bytes: int
    timed_out: bool = False
    resource_limit: str | None = None  # the `capabilities.resources` field whose limit killed it


# --------------------------------------------------------------------------- commands


def split_command(binary: str, command: str) -> tuple[list[str], str | None]:
    """The argument list for a model's `{"command": ...}` and the `-c` script, if any.

    A shell interpreter gets `["-c", command]` (the script is `command`); any other binary
    gets `command` split by POSIX word rules with no expansion at all. Unbalanced quotes
    raise `ShellRefused`."""
    if not isinstance(command, str):
        raise ShellRefused(f"shell command must be a string, got {type(command).__name__}")
    if binary in SHELL_INTERPRETERS:
        return ["-c", command], command
    try:
        return shlex.split(command, comments=False, posix=True), None
    except ValueError as exc:
        raise ShellRefused(f"cannot split the command for {binary!r}: {exc}") from None


def display_command(args: Sequence[str], script: str | None = None) -> str:
    """The trace/event display string: the `-c` script, else the quoted argument list; at most
    200 characters (a cut value ends with `…`). Never decide policy on it."""
    text = script if script is not None else shlex.join(args)
    if len(text) > DISPLAY_LIMIT:
        return text[: DISPLAY_LIMIT - 1] + "…"
    return text


def format_shell_result(command: str, outcome: ShellOutcome) -> str:
    """The text the model sees for a shell tool call."""
    lines = [
        f"$ {command}",
        f"Exit code: {outcome.exit_code}",
        "Stdout:",
        _strip_one_newline(outcome.stdout),
        "Stderr:",
        _strip_one_newline(outcome.stderr),
    ]
    if outcome.truncated:
        where = outcome.full_output_path or "the shell log"
        lines.append(f"[Output was cut; the full output is in {where}]")
    return "\n".join(lines)


# --------------------------------------------------------------------------- environment


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def _admissible(policy: ShellPolicy, name: str, value: str) -> bool:
    return name != "HOME" and not looks_like_credential(name, value) and not _matches(name, policy.strip_env)


def _check_env_name(name: object, value: object) -> tuple[str, str]:
    if not isinstance(name, str) or not name or "=" in name or "\x00" in name:
        raise ShellRefused(f"environment variable name {name!r} is not valid")
    if not isinstance(value, str) or "\x00" in value:
        raise ShellRefused(f"environment variable {name!r} must have a string value without NUL bytes")
    return name, value


def _named_outright(policy: ShellPolicy, name: str) -> bool:
    """`baseline_env` names the variable itself (no glob), and upstream strips nothing of it."""
    return (name in (policy.baseline_env or ()) and not _GLOB_CHARS.intersection(name)
            and not _matches(name, UPSTREAM_CREDENTIAL_STRIPS) and not _matches(name, policy.strip_env))


def _host_environment(policy: ShellPolicy, host_env: Mapping[str, str]) -> dict[str, str]:
    """The default baseline plus `baseline_env` (upstream adds, never replaces)."""
    patterns = (*DEFAULT_BASELINE_ENV, *(policy.baseline_env or ()))
    return {
        name: value
        for name, value in host_env.items()
        if _matches(name, patterns) and "\x00" not in value and name != "HOME"
        and (_named_outright(policy, name) or _admissible(policy, name, value))
    }


def child_environment(
    policy: ShellPolicy,
    env_overrides: Iterable[tuple[str, str]] = (),
    host_env: Mapping[str, str] = os.environ,
) -> dict[str, str]:
    """The complete environment a shell command runs with (see the module docstring)."""
    env = _host_environment(policy, host_env)
    for pair in env_overrides:
        name, value = _check_env_name(*pair)
        if _admissible(policy, name, value):
            env[name] = value
    env.update(policy.runtime_env)
    env["HOME"] = str(policy.home)
    if policy.containment is not None and policy.containment.landlock:
        # Landlock allows writes beneath the workdir only: temporary files go beneath HOME.
        for name in ("TMPDIR", "TMP", "TEMP"):
            env[name] = str(policy.home / TMP_DIR_NAME)
    return env


# --------------------------------------------------------------------------- running


def prepare_shell(
    policy: ShellPolicy,
    binary: str,
    args: Sequence[str],
    env_overrides: Iterable[tuple[str, str]] = (),
    host_env: Mapping[str, str] = os.environ,
) -> ShellInvocation:
    """Check a call against the policy and resolve it, spawning nothing. `ShellRefused` if not allowed."""
    if not isinstance(binary, str) or not binary:
        raise ShellRefused("shell: no binary named")
    if "/" in binary:
        raise ShellRefused(
            f"shell: {binary!r} is a path; name an allowed binary by its bare name "
            f"(capabilities.shell.allow: {sorted(policy.allow)})"
        )
    if binary not in policy.allow or binary in (".", ".."):
        raise ShellRefused(
            f"shell: {binary!r} is not in capabilities.shell.allow ({sorted(policy.allow)})"
        )
    arg_list = list(args)
    for arg in arg_list:
        if not isinstance(arg, str) or "\x00" in arg:
            raise ShellRefused(f"shell: argument {arg!r} must be a string without NUL bytes")
    search_path = _host_environment(policy, host_env).get("PATH") or host_env.get("PATH") or os.defpath
    # Only absolute PATH entries: a relative one would resolve against murmurd's own cwd.
    search_path = os.pathsep.join(entry for entry in search_path.split(os.pathsep) if os.path.isabs(entry))
    env = child_environment(policy, env_overrides, host_env)
    found = shutil.which(binary, path=search_path)
    if found is None:
        return ShellInvocation(binary, binary, None, [binary, *arg_list], env)
    executable = os.path.abspath(found)
    allowed = tuple(os.path.abspath(p) for p in (shutil.which(name, path=search_path) for name in sorted(policy.allow))
                    if p is not None)
    return ShellInvocation(binary, os.path.realpath(executable), executable, [binary, *arg_list], env, allowed)


def run_shell(
    policy: ShellPolicy,
    binary: str,
    args: Sequence[str],
    env_overrides: Iterable[tuple[str, str]] = (),
    host_env: Mapping[str, str] = os.environ,
    cancel: CancelFlag | None = None,
) -> ShellOutcome:
    """Check, then run one shell command to completion (blocking)."""
    return run_prepared(policy, prepare_shell(policy, binary, args, env_overrides, host_env), cancel)


def run_prepared(
    policy: ShellPolicy, invocation: ShellInvocation, cancel: CancelFlag | None = None,
    stdin_data: bytes | None = None,
) -> ShellOutcome:
    """Run an invocation `prepare_shell` produced under the same policy. `stdin_data` (a native
    tool's JSON request) is written to the command's stdin, which is then closed; None: empty."""
    if invocation.executable is None:
        raise ShellFailed(f"shell: {invocation.binary!r} is allowed but was not found on PATH")
    root, home = _beneath_workdir(policy, policy.home)
    try:
        workdir_fs.make_dirs(root, home)
        if policy.containment is not None and policy.containment.landlock:
            workdir_fs.make_dirs(root, f"{home}/{TMP_DIR_NAME}")
    except OSError as exc:
        raise ShellFailed(f"shell: cannot create HOME {str(policy.home)!r}: {exc}") from None

    if cancel is not None and cancel.is_set():
        raise ShellCanceled(f"shell: {invocation.binary!r} was canceled before it started")
    guard = policy.workdir_guard
    if guard is None:
        return _run_bounded(policy, invocation, cancel, stdin_data)
    if guard.breach is not None:
        raise WorkdirExceeded(guard.breach)
    watch = guard.watch(cancel)  # set by the caller's cancel, or by a walk that finds the bound passed
    try:
        outcome = _run_bounded(policy, invocation, watch, stdin_data)
    except ShellCanceled:
        if watch.breached():
            raise WorkdirExceeded(guard.breach or "E-RUN-013") from None
        raise
    finally:
        watch.stop()
    if guard.check_if_due():
        raise WorkdirExceeded(guard.breach or "E-RUN-013")
    return outcome


def _run_bounded(policy: ShellPolicy, invocation: ShellInvocation, cancel: CancelFlag | None,
                 stdin_data: bytes | None = None) -> ShellOutcome:
    group = _pids_cgroup(policy)
    scope: resources.CommandScope | None = None
    try:
        scope = _resource_scope(policy, group)
        return _run_in_group(policy, invocation, cancel, group, scope, stdin_data)
    finally:
        if group is not None:
            group.kill_all()
            group.remove()
        if scope is not None:
            scope.remove()


def _pids_cgroup(policy: ShellPolicy) -> PidsCgroup | None:
    plan = policy.containment
    if plan is None or plan.pids_root is None:
        return None
    try:
        return PidsCgroup.create(plan.pids_root, policy.limits.cgroup_pids_max)
    except OSError as exc:
        raise ShellFailed(f"shell: cannot create the command's pids cgroup: {exc.strerror or exc}") from None


def _resource_scope(policy: ShellPolicy, group: PidsCgroup | None) -> resources.CommandScope | None:
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
        _kill_group(proc)
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


def _run_in_group(
    policy: ShellPolicy, invocation: ShellInvocation, cancel: CancelFlag | None, group: PidsCgroup | None,
    scope: resources.CommandScope | None = None, stdin_data: bytes | None = None,
) -> ShellOutcome:
    out = _Collector(policy)
    err = _Collector(policy)
    started = time.monotonic()
    relay = egress_relay(policy, invocation.binary)
    try:
        proc = spawn_confined(policy, invocation, group, scope, relay,
                              stdin=subprocess.DEVNULL if stdin_data is None else subprocess.PIPE)
    except BaseException:
        if relay is not None:
            relay.stop()
        raise
    shell_watchdog.register(proc.pid)
    if stdin_data is not None:
        _feed_stdin(proc, stdin_data)

    try:
        timed_out = _pump(proc, invocation.binary, out, err, started + policy.timeout_seconds, cancel)
        _end_group(proc)
        duration_ms = int((time.monotonic() - started) * 1000)
        returncode = proc.returncode
        assert returncode is not None
        exit_code = TIMEOUT_EXIT_CODE if timed_out else (128 - returncode if returncode < 0 else returncode)
        truncated = out.total > policy.max_stream_bytes or err.total > policy.max_stream_bytes
        full_output_path = _write_log(policy, invocation, exit_code, out, err) if truncated else None
        stderr_text = err.text(policy.max_stream_bytes)
        if timed_out:
            if stderr_text and not stderr_text.endswith("\n"):
                stderr_text += "\n"
            stderr_text += f"[murmurd] timed out after {policy.timeout_seconds:g} s; the process group was killed"
        pids_hit = group is not None and group.limit_hit()
        memory_killed = scope is not None and scope.memory_killed()
        return ShellOutcome(
            exit_code=exit_code,
            stdout=out.text(policy.max_stream_bytes),
            stderr=stderr_text,
            truncated=truncated,
            full_output_path=full_output_path,
            binary_path=invocation.binary_path,
            argv=list(invocation.argv),
            duration_ms=duration_ms,
            stdout_bytes=out.total,
            stderr_bytes=err.total,
            timed_out=timed_out,
            resource_limit=rlimits.limit_that_killed(0 if timed_out else returncode, pids_hit, memory_killed),
        )
    except OSError as exc:
        raise ShellFailed(f"shell: I/O failure running {invocation.binary!r}: {exc}") from None
    finally:
        _end_group(proc)  # a no-op unless an error or cancel left it running
        shell_watchdog.unregister(proc.pid)
        if relay is not None:
            relay.stop()  # the command's connections end with it
        out.close()
        err.close()


def _feed_stdin(proc: subprocess.Popen[bytes], data: bytes) -> None:
    """Write `data` to the command's stdin from a thread (a command that never reads cannot block
    the call past its deadline: the group's kill breaks the pipe), then close it."""
    def feed() -> None:
        assert proc.stdin is not None
        try:
            proc.stdin.write(data)
        except OSError:
            pass  # it exited, or closed its stdin, without reading it all
        finally:
            try:
                proc.stdin.close()
            except OSError:
                pass

    threading.Thread(target=feed, name="murmurd-stdin", daemon=True).start()


def _pump(
    proc: subprocess.Popen[bytes],
    binary: str,
    out: _Collector,
    err: _Collector,
    deadline: float,
    cancel: CancelFlag | None,
) -> bool:
    """Collect both pipes until they close; enforce the deadline. True when it timed out."""
    assert proc.stdout is not None and proc.stderr is not None
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ, out)
    selector.register(proc.stderr, selectors.EVENT_READ, err)
    timed_out = False
    exited_at: float | None = None
    stop_reading_at: float | None = None
    try:
        while selector.get_map():
            now = time.monotonic()
            if cancel is not None and cancel.is_set():
                _kill_group(proc)
                raise ShellCanceled(f"shell: {binary!r} was canceled")
            if not timed_out and now >= deadline:
                timed_out = True
                _kill_group(proc)
                stop_reading_at = now + _PIPE_GRACE_SECONDS
            if exited_at is None and _has_exited(proc):
                exited_at = now
            if exited_at is not None and stop_reading_at is None and now - exited_at >= _PIPE_GRACE_SECONDS:
                # The command is done; something it left behind still holds the pipes.
                _kill_group(proc)
                stop_reading_at = now + _PIPE_GRACE_SECONDS
            if stop_reading_at is not None and now >= stop_reading_at:
                break
            wait = _POLL_SECONDS
            if not timed_out:
                wait = min(wait, max(deadline - now, 0.0))
            for key, _ in selector.select(timeout=wait):
                data = os.read(key.fd, _READ_CHUNK)
                if data:
                    key.data.feed(data)
                else:
                    selector.unregister(key.fileobj)
    finally:
        selector.close()
        proc.stdout.close()
        proc.stderr.close()
    # Pipes closed (or abandoned); the process may still run with them closed.
    pause = 0.001
    while not _has_exited(proc):
        if cancel is not None and cancel.is_set():
            _kill_group(proc)
            raise ShellCanceled(f"shell: {binary!r} was canceled")
        if not timed_out and time.monotonic() >= deadline:
            timed_out = True
            _kill_group(proc)
        time.sleep(pause)
        pause = min(pause * 2, _POLL_SECONDS)
    return timed_out


def _has_exited(proc: subprocess.Popen[bytes]) -> bool:
    """Whether the command has exited, *without* reaping it: while it is an unreaped zombie
    its process-group id cannot be reused, so killing the group afterwards is safe."""
    if proc.returncode is not None:
        return True
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _end_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill whatever is left in the command's process group, then reap the command.

    A call's processes end with the call: a background job the command started (even one
    that closed its output) does not outlive it."""
    if proc.returncode is None:
        _kill_group(proc)
        proc.wait()


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class _Collector:
    """One output stream: the first bytes in memory, the rest spilled to an unnamed file."""

    def __init__(self, policy: ShellPolicy) -> None:
        self._policy = policy
        self._keep = policy.max_stream_bytes
        self._head = bytearray()
        self._spool: IO[bytes] | None = None
        self._spooled = 0
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        if self._spool is None:
            if self.total <= self._keep:
                self._head += data
                return
            self._spool = _spool_file(self._policy)
            self._spool.write(self._head)
            self._spooled = len(self._head)
            self._head += data[: self._keep - len(self._head)]
        room = self._policy.max_log_stream_bytes - self._spooled
        if room > 0:
            piece = data[:room]
            self._spool.write(piece)
            self._spooled += len(piece)

    def text(self, limit: int) -> str:
        """The first `limit` bytes as text, never ending in a split UTF-8 character."""
        head = bytes(self._head[:limit])
        if self.total <= limit:
            return head.decode("utf-8", errors="replace")
        return codecs.getincrementaldecoder("utf-8")(errors="replace").decode(head, final=False)

    def copy_to(self, sink: IO[bytes]) -> int:
        """Write everything kept to `sink`; the number of bytes not kept."""
        if self._spool is None:
            sink.write(self._head)
            return 0
        self._spool.flush()
        self._spool.seek(0)
        shutil.copyfileobj(self._spool, sink, _READ_CHUNK)
        return self.total - self._spooled

    def close(self) -> None:
        if self._spool is not None:
            self._spool.close()
            self._spool = None


def _beneath_workdir(policy: ShellPolicy, directory: Path) -> tuple[Path, str]:
    """The trusted root `directory` is opened from (the workdir, else its own parent) and its
    path below it: no symlink below the workdir is followed."""
    try:
        return policy.workdir, directory.relative_to(policy.workdir).as_posix()
    except ValueError:
        directory.parent.mkdir(parents=True, exist_ok=True)  # an operator's own path, outside the workdir
        return directory.parent, directory.name


def _logs_location(policy: ShellPolicy) -> tuple[Path, str]:
    return _beneath_workdir(policy, policy.logs_dir)


def _spool_file(policy: ShellPolicy) -> IO[bytes]:
    """A nameless spool in the logs directory, opened through a descriptor of that directory (a
    symlink on the way is refused, and none planted later is followed)."""
    root, logs = _logs_location(policy)
    try:
        dir_fd = workdir_fs.open_directory(root, logs)
        try:
            return os.fdopen(workdir_fs.anonymous_file(dir_fd), "w+b")
        finally:
            os.close(dir_fd)
    except OSError as exc:
        raise ShellFailed(f"shell: cannot write the shell log: {exc}") from None


def _new_log(policy: ShellPolicy, root: Path, logs: str) -> tuple[IO[bytes], str]:
    """A fresh `shell-<stamp>.log` (never an existing file, never through a symlink)."""
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    for attempt in range(100):
        name = f"shell-{stamp}.log" if attempt == 0 else f"shell-{stamp}-{attempt}.log"
        try:
            return workdir_fs.create_new(root, f"{logs}/{name}"), name
        except FileExistsError:
            continue
        except OSError as exc:
            raise ShellFailed(f"shell: cannot write the shell log: {exc}") from None
    raise ShellFailed(f"shell: cannot find a free log name in {str(policy.logs_dir)!r}")  # pragma: no cover


def _write_log(
    policy: ShellPolicy, invocation: ShellInvocation, exit_code: int, out: _Collector, err: _Collector
) -> str:
    root, logs = _logs_location(policy)
    handle, name = _new_log(policy, root, logs)
    with handle as sink:
        header = [
            f"$ {shlex.join(invocation.argv)}",
            f"binary: {invocation.binary_path}",
            f"exit code: {exit_code}",
        ]
        sink.write(("\n".join(header) + "\n").encode("utf-8", errors="replace"))
        for label, stream in (("stdout", out), ("stderr", err)):
            sink.write(f"==> {label} ({stream.total} bytes) <==\n".encode())
            dropped = stream.copy_to(sink)
            sink.write(b"\n")
            if dropped:
                sink.write(
                    f"[murmurd: {dropped} more {label} bytes not kept; the log keeps "
                    f"{policy.max_log_stream_bytes} bytes per stream]\n".encode()
                )
    path = policy.logs_dir / name
    try:
        return path.relative_to(policy.workdir).as_posix()
    except ValueError:
        return str(path)


def _strip_one_newline(text: str) -> str:
    return text[:-1] if text.endswith("\n") else text
