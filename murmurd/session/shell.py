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

The environment and HOME are `shell_env.py`'s, the output capture and log `shell_output.py`'s, the
confined spawn `shell_spawn.py`'s; the policy, invocation and outcome types `shell_model.py`'s.
"""

from __future__ import annotations

import os
import selectors
import shlex
import shutil
import subprocess
import threading
import time
from collections.abc import Iterable, Mapping, Sequence

from murmurd.containment import resources
from murmurd.containment.cgroup import PidsCgroup
from murmurd.session import rlimits, shell_watchdog
from murmurd.session.shell_env import child_environment, host_environment, make_home
from murmurd.session.shell_model import (
    CancelFlag,
    ShellCanceled,
    ShellFailed,
    ShellInvocation,
    ShellOutcome,
    ShellPolicy,
    ShellRefused,
    WorkdirExceeded,
)
from murmurd.session.shell_output import READ_CHUNK, StreamCollector, write_log
from murmurd.session.shell_spawn import egress_relay, kill_group, pids_cgroup, resource_scope, spawn_confined

SHELL_INTERPRETERS = frozenset({"bash", "sh", "dash", "zsh", "ksh", "fish"})
TIMEOUT_EXIT_CODE = 124
DISPLAY_LIMIT = 200

_PIPE_GRACE_SECONDS = 2.0
_POLL_SECONDS = 0.1


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
    search_path = host_environment(policy, host_env).get("PATH") or host_env.get("PATH") or os.defpath
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
    make_home(policy)

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
    group = pids_cgroup(policy)
    scope: resources.CommandScope | None = None
    try:
        scope = resource_scope(policy, group)
        return _run_in_group(policy, invocation, cancel, group, scope, stdin_data)
    finally:
        if group is not None:
            group.kill_all()
            group.remove()
        if scope is not None:
            scope.remove()


def _run_in_group(
    policy: ShellPolicy, invocation: ShellInvocation, cancel: CancelFlag | None, group: PidsCgroup | None,
    scope: resources.CommandScope | None = None, stdin_data: bytes | None = None,
) -> ShellOutcome:
    out = StreamCollector(policy)
    err = StreamCollector(policy)
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
        full_output_path = write_log(policy, invocation, exit_code, out, err) if truncated else None
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
    out: StreamCollector,
    err: StreamCollector,
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
                kill_group(proc)
                raise ShellCanceled(f"shell: {binary!r} was canceled")
            if not timed_out and now >= deadline:
                timed_out = True
                kill_group(proc)
                stop_reading_at = now + _PIPE_GRACE_SECONDS
            if exited_at is None and _has_exited(proc):
                exited_at = now
            if exited_at is not None and stop_reading_at is None and now - exited_at >= _PIPE_GRACE_SECONDS:
                # The command is done; something it left behind still holds the pipes.
                kill_group(proc)
                stop_reading_at = now + _PIPE_GRACE_SECONDS
            if stop_reading_at is not None and now >= stop_reading_at:
                break
            wait = _POLL_SECONDS
            if not timed_out:
                wait = min(wait, max(deadline - now, 0.0))
            for key, _ in selector.select(timeout=wait):
                data = os.read(key.fd, READ_CHUNK)
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
            kill_group(proc)
            raise ShellCanceled(f"shell: {binary!r} was canceled")
        if not timed_out and time.monotonic() >= deadline:
            timed_out = True
            kill_group(proc)
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
        kill_group(proc)
        proc.wait()
