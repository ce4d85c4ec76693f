"""Spawning the CLI under its own containment profile, and ending its whole process tree.

The CLI runs through the shell children's helper (`murmurd.session.shell_spawn.spawn_confined`): it
sets the capsule's rlimits, joins a pids cgroup, enters the network and mount namespaces,
Landlock and seccomp as this host's plan says, registers the group with the shell watchdog (so it
dies with murmurd) and execs the CLI in its own session, cwd the session workdir. What it may
touch is the process transport's profile (`murmurd/containment/cli_profile.py`), derived from
the CLI as a shell child's grants are derived from `shell.allow`:

- read + execute of the CLI's real path and, for a `#!` script, its interpreter (env -> node),
  with their ELF closures; its npm package directory and the packages it depends on; read of
  its own `/proc/self`, the resolver's files and the TLS trust store;
- its HOME (the operator's: where the CLI keeps its login and state, unless that HOME holds
  murmurd's own cache, stores or the workdir: then the capsule's `.capsule-home`; `cli_home`)
  writable beside the workdir, TMPDIR `<workdir>/.capsule-home/tmp`, neither executable (the workdir's noexec mount);
- the network namespace with the egress relay as its only way out: the provider origins of the
  CLI's configuration that `capabilities.network.allow` lists, and the session's MCP bridge;
- no address-space rlimit (`memory_bytes`): see `cli_policy`.

The environment is murmurd's, narrowed to what a CLI agent reads (`cli_environment`): the
shell baseline, HOME, the CLIs' own variables (`ANTHROPIC_*`, `CLAUDE_*`, `CODEX_*`,
`OPENAI_*`, ...), locale, TLS and proxy settings. Any other variable, credential-shaped or not,
stays in murmurd.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import os
import resource
import select
import signal
import subprocess
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

from murmurd import workdir_fs
from murmurd.paths import cache_dir
from murmurd.containment import cli_profile
from murmurd.containment.cgroup import PidsCgroup
from murmurd.containment.egress_relay import EgressRelay
from murmurd.session import shell_watchdog
from murmurd.session.shell_env import DEFAULT_BASELINE_ENV
from murmurd.session.shell_model import HOME_DIR_NAME, TMP_DIR_NAME, ShellFailed, ShellInvocation, ShellPolicy
from murmurd.session.shell_spawn import egress_relay, spawn_confined

# What a CLI agent reads beyond the shell baseline: its own settings and credentials, where it
# keeps state, and how it reaches its provider.
CLI_ENV_PATTERNS: tuple[str, ...] = (
    "HOME", "ANTHROPIC_*", "CLAUDE_*", "CLAUDECODE", "DISABLE_*", "IS_SANDBOX", "MCP_TIMEOUT", "MCP_TOOL_TIMEOUT",
    "MAX_MCP_OUTPUT_TOKENS", "CODEX_*", "OPENAI_*", "RUST_LOG", "XDG_CONFIG_HOME", "XDG_DATA_HOME",
    "XDG_STATE_HOME", "XDG_CACHE_HOME", "SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS",
    "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "no_proxy", "LC_*", "COLORTERM",
)
RUN_SECONDS = 600.0  # upstream's one wall-clock limit over the reader and the bridge


def cli_environment(host_env: Mapping[str, str], tmpdir: Path, home: Path | None = None) -> dict[str, str]:
    """The CLI's environment: the host's, narrowed to `DEFAULT_BASELINE_ENV` and `CLI_ENV_PATTERNS`;
    HOME is `home` when given (the policy's)."""
    patterns = (*DEFAULT_BASELINE_ENV, *CLI_ENV_PATTERNS)
    env = {name: value for name, value in host_env.items()
           if "\x00" not in value and any(fnmatch.fnmatchcase(name, p) for p in patterns)}
    if home is not None:
        env["HOME"] = str(home)
    for name in ("TMPDIR", "TMP", "TEMP"):
        env[name] = str(tmpdir)
    return env


def cli_home(host_env: Mapping[str, str], workdir: Path) -> str:
    """The HOME the CLI may write: the operator's (its login and state) only when it holds none of
    murmurd's own state: the compiled-component cache (native code the daemon loads), the stores
    and registry under `~/.murmur`, the session workdir (and so the capsule and its task store).
    Otherwise, or with no usable HOME, the capsule's own `.capsule-home`, as a shell child's."""
    home = host_env.get("HOME") or ""
    if not (os.path.isabs(home) and os.path.isdir(home)):
        return str(workdir / HOME_DIR_NAME)
    real = Path(os.path.realpath(home))
    guarded = [Path(os.path.realpath(cache_dir())), Path(os.path.realpath(workdir))]
    if (real / ".murmur").exists():
        guarded.append(real / ".murmur")
    if any(path == real or path.is_relative_to(real) for path in guarded):
        return str(workdir / HOME_DIR_NAME)
    return home


def cli_policy(shell: ShellPolicy, host_env: Mapping[str, str], executable: str | None = None,
               dialect: str = "claude", bridge_url: str | None = None,
               network_allow: tuple[str, ...] | list[str] = ()) -> ShellPolicy:
    """The capsule's shell policy, adapted for the CLI at `executable` (see the module docstring):
    its profile in place of the shell children's grants, its egress the granted provider origins
    and the bridge at `bridge_url`."""
    home = cli_home(host_env, shell.workdir)
    plan = shell.containment
    # No address-space limit: a JIT runtime (Claude Code's JavaScriptCore) reserves far more
    # address space than it uses, and dies at start under RLIMIT_AS (2 GiB by default).
    limits = dataclasses.replace(shell.limits, memory_bytes=resource.RLIM_INFINITY)
    env = cli_environment(host_env, shell.workdir / HOME_DIR_NAME / TMP_DIR_NAME, Path(home))
    if plan is not None and executable is not None:
        plan = cli_profile.cli_plan(plan, cli_profile.cli_profile(executable, env))
    origins = cli_profile.granted_origins(cli_profile.provider_origins(dialect, env), network_allow)
    return dataclasses.replace(shell, home=Path(home), timeout_seconds=RUN_SECONDS, limits=limits, containment=plan,
                               egress=cli_profile.cli_grant(origins, bridge_url))


class CliProcess:
    """One spawned CLI: its pipes, and the teardown that leaves no process of its tree behind."""

    def __init__(self, proc: subprocess.Popen[bytes], group: PidsCgroup | None,
                 relay: EgressRelay | None = None, *, stop: tuple[int, int] | None = None) -> None:
        """`stop`: a pipe made before the CLI was spawned (then nothing here can fail), which
        this object owns; else one is made here."""
        self.proc = proc
        self.group = group
        self.relay = relay
        self._kill_lock = threading.Lock()  # a tool's end and the reader's end both kill: one at a time
        self._killed = False
        self._stdin_lock = threading.Lock()  # held by `feed_stdin` while it writes; `kill` closes stdin after it
        self._stop_read, self._stop_write = stop or os.pipe()  # written by `kill`: a blocked `feed_stdin` returns
        shell_watchdog.register(proc.pid)

    @classmethod
    def start(cls, policy: ShellPolicy, argv: list[str], env: dict[str, str], *, piped_stdin: bool) -> CliProcess:
        """Spawn `argv` (argv[0] the resolved executable), blocking: call it off the event loop."""
        try:  # never through a symlink a tool could have planted in the workdir
            workdir_fs.make_dirs(policy.workdir, f"{HOME_DIR_NAME}/{TMP_DIR_NAME}")
        except OSError as exc:
            raise ShellFailed(f"cannot create the CLI's TMPDIR: {exc}") from None
        group = None
        plan = policy.containment
        if plan is not None and plan.pids_root is not None:
            try:
                group = PidsCgroup.create(plan.pids_root, policy.limits.cgroup_pids_max)
            except OSError as exc:
                raise ShellFailed(f"cannot create the CLI's pids cgroup: {exc.strerror or exc}") from None
        name = os.path.basename(argv[0])
        profile = cli_profile.cli_profile(argv[0], env)
        invocation = ShellInvocation(name, os.path.realpath(argv[0]), argv[0], [name, *argv[1:]], env,
                                     profile.executables)
        relay = stop = None
        try:
            stop = os.pipe()  # before the spawn: once the CLI runs, nothing may fail before it is owned
            relay = egress_relay(policy, name)
            proc = spawn_confined(policy, invocation, group, relay=relay,
                                  stdin=subprocess.PIPE if piped_stdin else subprocess.DEVNULL)
        except BaseException:
            for fd in stop or ():
                os.close(fd)
            if relay is not None:
                relay.stop()
            if group is not None:
                group.kill_all()
                group.remove()
            raise
        return cls(proc, group, relay, stop=stop)

    def feed_stdin(self, data: bytes) -> None:
        """Write `data` to the CLI's stdin and close it (blocking: call it off the event loop).
        Returns early when the CLI closes its end, exits, or is killed: a child that left the
        CLI's process group (`setsid`) with stdin inherited and unread would otherwise hold this
        write until the run's timeout, and the kill's close of stdin behind it for good (with no
        pids cgroup to end that child)."""
        with self._stdin_lock:
            pipe, self.proc.stdin = self.proc.stdin, None
            if pipe is None:
                return
            try:
                with _exit_watch(self.proc.pid) as exited:
                    _write_until_stopped(pipe.fileno(), data, (self._stop_read, *exited))
            finally:
                with contextlib.suppress(OSError):
                    pipe.close()

    def kill(self) -> None:
        """SIGKILL the CLI's process group and its cgroup (a wrapper's children with it: codex's
        npm wrapper on Node 20 spawns the native binary as a child), then reap it. Blocking. A
        second call (a tool that ended the task and the reader's own end both kill) waits for the
        first and does nothing more: a reaped process's group id is never signalled."""
        with self._kill_lock:
            if self._killed:
                return
            self._killed = True
            self._kill()

    def _kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.group is not None:
            self.group.kill_all()
        os.write(self._stop_write, b"\0")  # a feed of stdin still blocked returns (and closes stdin)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL not delivered
            pass
        shell_watchdog.unregister(self.proc.pid)
        if self.relay is not None:
            self.relay.stop()  # the CLI's connections end with it
            self.relay = None
        with self._stdin_lock:  # a feed has returned (stdin closed) or never took stdin: none will now
            pipes = (self.proc.stdin, self.proc.stdout, self.proc.stderr)
            self.proc.stdin = self.proc.stdout = self.proc.stderr = None
            for pipe in pipes:
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()
            os.close(self._stop_read)
            os.close(self._stop_write)
        if self.group is not None:
            self.group.remove()
            self.group = None


@contextlib.contextmanager
def _exit_watch(pid: int) -> Iterator[tuple[int, ...]]:
    """A descriptor readable once process `pid` has exited (none where pidfds are not to be had)."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # an old kernel, or the process is reaped already
        yield ()
        return
    try:
        yield (fd,)
    finally:
        os.close(fd)


def _write_until_stopped(fd: int, data: bytes, stops: tuple[int, ...]) -> None:
    """`data` to the pipe `fd`, until it is all written, the reader has closed its end, or one
    of `stops` is readable."""
    os.set_blocking(fd, False)
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    for stop in stops:
        poller.register(stop, select.POLLIN)
    left = memoryview(data)
    while left:
        ready = dict(poller.poll())
        if any(stop in ready for stop in stops) or ready.get(fd, 0) & (select.POLLERR | select.POLLHUP):
            return
        try:
            left = left[os.write(fd, left):]
        except BlockingIOError:
            continue
        except OSError:  # BrokenPipeError: the CLI exited; its stream says why
            return
