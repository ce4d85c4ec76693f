"""Spawning the CLI under the shell containment, and ending its whole process tree.

The CLI runs as a `shell.allow` child does (`murmurd.session.shell.spawn_confined`): the
confinement helper sets the capsule's rlimits, joins a pids cgroup, enters Landlock as this
host's plan says, registers the group with the shell watchdog (so it dies with murmurd) and
execs the CLI in its own session, cwd the session workdir. Two things differ, because a CLI
agent needs them (docs/decisions.md, issue 27):

- no network namespace: the CLI must reach its provider and the session's loopback MCP server;
- its HOME (the operator's: where the CLI keeps its login and state) is writable beside the
  workdir, and TMPDIR is `<workdir>/.capsule-home/tmp`;
- no address-space rlimit (`memory_bytes`): see `cli_policy`.

The environment is murmurd's, narrowed to what a CLI agent reads (`cli_environment`): the
shell baseline, HOME, the CLIs' own variables (`ANTHROPIC_*`, `CLAUDE_*`, `CODEX_*`,
`OPENAI_*`, ...), locale, TLS and proxy settings. Any other variable, credential-shaped or not,
stays in murmurd.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import resource
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path

from murmurd import workdir_fs
from murmurd.containment.cgroup import PidsCgroup
from murmurd.session import shell_watchdog
from murmurd.session.shell import (
    DEFAULT_BASELINE_ENV,
    HOME_DIR_NAME,
    TMP_DIR_NAME,
    ShellFailed,
    ShellInvocation,
    ShellPolicy,
    spawn_confined,
)

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


def cli_policy(shell: ShellPolicy, host_env: Mapping[str, str]) -> ShellPolicy:
    """The capsule's shell policy, adapted for a CLI agent (see the module docstring)."""
    home = host_env.get("HOME") or ""
    if not (os.path.isabs(home) and os.path.isdir(home)):  # none to keep: the capsule's own, as a shell child's
        home = str(shell.workdir / HOME_DIR_NAME)
    plan = shell.containment
    # No address-space limit: a JIT runtime (Claude Code's JavaScriptCore) reserves far more
    # address space than it uses, and dies at start under RLIMIT_AS (2 GiB by default).
    limits = dataclasses.replace(shell.limits, memory_bytes=resource.RLIM_INFINITY)
    return dataclasses.replace(shell, home=Path(home), timeout_seconds=RUN_SECONDS, limits=limits,
                               containment=dataclasses.replace(plan, netns=False) if plan is not None else None)


class CliProcess:
    """One spawned CLI: its pipes, and the teardown that leaves no process of its tree behind."""

    def __init__(self, proc: subprocess.Popen[bytes], group: PidsCgroup | None) -> None:
        self.proc = proc
        self.group = group
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
        invocation = ShellInvocation(name, os.path.realpath(argv[0]), argv[0], [name, *argv[1:]], env)
        try:
            proc = spawn_confined(policy, invocation, group,
                                  stdin=subprocess.PIPE if piped_stdin else subprocess.DEVNULL)
        except BaseException:
            if group is not None:
                group.kill_all()
                group.remove()
            raise
        return cls(proc, group)

    def kill(self) -> None:
        """SIGKILL the CLI's process group and its cgroup (a wrapper's children with it: codex's
        npm wrapper on Node 20 spawns the native binary as a child), then reap it. Blocking."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.group is not None:
            self.group.kill_all()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL not delivered
            pass
        shell_watchdog.unregister(self.proc.pid)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass
        if self.group is not None:
            self.group.remove()
            self.group = None
