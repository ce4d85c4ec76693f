"""What a shell call is: the policy it runs under, the checked invocation, its outcome and errors
(the runner is `murmurd.session.shell`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from murmurd.containment.egress_relay import EgressGrant, Refusal
from murmurd.containment.plan import ContainmentPlan
from murmurd.session.rlimits import ShellLimits
from murmurd.session.workdir_guard import WorkdirGuard

DEFAULT_TIMEOUT_SECONDS = 300.0
MAX_STREAM_BYTES = 16 * 1024
MAX_LOG_STREAM_BYTES = 256 * 1024 * 1024
HOME_DIR_NAME = ".capsule-home"
TMP_DIR_NAME = "tmp"  # beneath HOME: TMPDIR of a Landlock-confined child
LOGS_DIR_NAME = "logs"


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
        workdir = self.workdir if isinstance(self.workdir, Path) else Path(self.workdir)  # one per session: no reparse
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


def beneath_workdir(policy: ShellPolicy, directory: Path) -> tuple[Path, str]:
    """The trusted root `directory` is opened from (the workdir, else its own parent) and its
    path below it: no symlink below the workdir is followed."""
    try:
        return policy.workdir, directory.relative_to(policy.workdir).as_posix()
    except ValueError:
        directory.parent.mkdir(parents=True, exist_ok=True)  # an operator's own path, outside the workdir
        return directory.parent, directory.name
