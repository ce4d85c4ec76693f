"""The capsule's `murmur.yaml` as typed models (runtime-notes §4).

These models are the *result* of validation: build them through
`murmurd.manifest.validate.validate_manifest` / `load_capsule`, which report every problem as a
diagnostic first. After validation:

- defaults are filled in (limits, inference turn budgets, lifecycle, compaction threshold, ...);
- `inference.api_key` holds the resolved key as a `SecretStr` (`${VAR}` already read from the
  environment); its repr and JSON dump are masked;
- `inference.system_prompt` holds the prompt text whether it came inline or from
  `system_prompt_file` (the file is read once, at load); `system_prompt_file` keeps the path for
  provenance. The same holds for `inference.compaction`.

Unknown keys are dropped from the models (and reported as warnings by the validator).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

ArtifactRuntimeName = Literal["tool", "wasm", "native", "driver", "hook", "skill"]
OnOverflow = Literal["drop", "block"]
TaskAcceptance = Literal["none", "single", "queue"]
AfterTask = Literal["exit", "sleep"]
Conversation = Literal["stateless", "threaded"]

MIB = 1024 * 1024
DEFAULT_MEMORY_BYTES = 512 * MIB
DEFAULT_TABLE_ELEMENTS = 100_000
DEFAULT_INSTANCES = 1000
DEFAULT_DEADLINE_SECONDS = 600
DEFAULT_HOOK_DEADLINE_SECONDS = 30


def default_deadline_seconds(runtime: str) -> int:
    """Per-call deadline when the manifest sets none: 30 s for hooks, 600 s for everything else."""
    return DEFAULT_HOOK_DEADLINE_SECONDS if runtime == "hook" else DEFAULT_DEADLINE_SECONDS


class _Model(BaseModel):
    # strict: YAML already yields typed scalars, so "10" for an integer is a mistake worth naming.
    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)


# --------------------------------------------------------------------------- capabilities


class NetworkCapability(_Model):
    # `https://host[:port]`, `host` or `host:port`.
    allow: list[str] = Field(default_factory=list)
    # murmurd's older spelling of the top-level `network.internal_port` (see `CapsuleManifest`).
    internal_port: int | None = Field(default=None, ge=1, le=65535)
    # May shell children create AF_UNIX sockets? (the seccomp filter refuses them by default)
    unix_sockets: bool = False


class TopNetwork(_Model):
    """The top-level `network:` block as upstream writes it: the A2A port; None means OS-assigned."""

    internal_port: int | None = Field(default=None, ge=1, le=65535)
    # murmurd extension: browser origins (scheme://host[:port]) allowed to call the A2A endpoint,
    # card and streams through CORS (`serve --cors-origin` adds more); none by default.
    cors_origins: list[str] = Field(default_factory=list)


class FilesystemCapability(_Model):
    # Relative to the session workdir, never absolute, never escaping with `..`.
    scope: str | None = None
    # May shell children execute files written in the workdir? (Landlock withholds it by default.)
    workdir_exec: bool = False


class RuntimeDir(_Model):
    """One `interpreter_runtime` directory: read+execute beneath `path`, listing when `list_dir`."""

    path: str
    list_dir: bool  # required, as upstream has it

    @field_validator("path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/") or "\x00" in value:
            raise ValueError("must be an absolute path")
        return value


class InterpreterRuntime(_Model):
    """Extra host directories (an interpreter's standard library) an allowlisted binary needs."""

    binary: str
    dirs: list[RuntimeDir] = Field(min_length=1)


class ShellCapability(_Model):
    # Bare binary names, resolved against PATH by the shell layer.
    allow: list[str] = Field(default_factory=list)
    strip_env: list[str] = Field(default_factory=list)  # glob patterns
    baseline_env: list[str] = Field(default_factory=list)  # glob patterns
    interpreter_runtime: list[InterpreterRuntime] = Field(default_factory=list)

    @model_validator(mode="after")
    def _runtime_binaries_allowed(self) -> ShellCapability:
        for grant in self.interpreter_runtime:
            if grant.binary not in self.allow:
                raise ValueError(f"interpreter_runtime binary {grant.binary!r} is not in shell.allow")
        return self


class EnvCapability(_Model):
    # Host variables a guest may see; credential-shaped names are dropped by the host anyway.
    allow: list[str] = Field(default_factory=list)


class Limits(_Model):
    memory_bytes: int = Field(default=DEFAULT_MEMORY_BYTES, gt=0)
    table_elements: int = Field(default=DEFAULT_TABLE_ELEMENTS, gt=0)
    instances: int = Field(default=DEFAULT_INSTANCES, gt=0)
    # None: the per-runtime default, see `deadline_for`.
    deadline_seconds: int | None = Field(default=None, gt=0)

    def deadline_for(self, runtime: str) -> int:
        return self.deadline_seconds or default_deadline_seconds(runtime)


Containment = Literal["advisory", "scoped", "sealed"]


class Resources(_Model):
    """`capabilities.resources`: OS limits on shell children (None: not declared, upstream's
    default applies: `murmurd.session.rlimits`)."""

    max_processes: int | None = Field(default=None, gt=0)
    max_open_files: int | None = Field(default=None, gt=0)
    max_file_size_bytes: int | None = Field(default=None, gt=0)
    cpu_seconds: int | None = Field(default=None, gt=0)
    memory_bytes: int | None = Field(default=None, gt=0)
    cgroup_memory_bytes: int | None = Field(default=None, gt=0)
    cgroup_pids_max: int | None = Field(default=None, gt=0)
    cgroup_cpu_percent: int | None = Field(default=None, gt=0)
    cgroup_io_bytes_per_sec: int | None = Field(default=None, gt=0)
    workdir_max_bytes: int | None = Field(default=None, gt=0)


class Capabilities(_Model):
    """The capsule-wide grant. Absent blocks grant nothing, except `limits` (defaults)."""

    # The containment floor the host must meet: `scoped` where the kernel gives a network and a
    # mount namespace, Landlock and seccomp; `sealed` (a composed root) when declared and the host
    # can build it (murmurd.containment.plan).
    containment: Containment | None = None
    network: NetworkCapability = Field(default_factory=NetworkCapability)
    filesystem: FilesystemCapability = Field(default_factory=FilesystemCapability)
    # None: no shell at all. Present: `allow` is non-empty (validated).
    shell: ShellCapability | None = None
    env: EnvCapability = Field(default_factory=EnvCapability)
    limits: Limits = Field(default_factory=Limits)
    resources: Resources | None = None


class LimitOverrides(_Model):
    """Per-artifact limits; None means "not declared here"."""

    memory_bytes: int | None = Field(default=None, gt=0)
    table_elements: int | None = Field(default=None, gt=0)
    instances: int | None = Field(default=None, gt=0)
    deadline_seconds: int | None = Field(default=None, gt=0)


class ArtifactCapabilities(_Model):
    """Per-artifact capabilities: narrow the capsule's grant for a tool or driver, and are the
    whole grant (from nothing) for a hook. A block left out is None, so the capability layer can
    tell "not declared" from "declared empty"."""

    network: NetworkCapability | None = None
    filesystem: FilesystemCapability | None = None
    shell: ShellCapability | None = None
    env: EnvCapability | None = None
    limits: LimitOverrides | None = None


# --------------------------------------------------------------------------- artifacts


class ArtifactRef(_Model):
    """One `artifacts[]` entry of the capsule manifest."""

    name: str = Field(min_length=1)
    # None: whatever the source resolves (pinned afterwards by murmur.lock).
    version: str | None = None
    runtime: ArtifactRuntimeName = "tool"
    # With `local_source: true`, `source` is a local path (relative to the manifest directory):
    # a .wasm file, an artifact directory, or a skill.md / directory holding one.
    source: str | None = None
    # None: upstream's default, true for a skill and false for anything else.
    local_source: bool | None = None
    capabilities: ArtifactCapabilities | None = None
    on_overflow: OnOverflow | None = None  # hooks only
    # May `inference.system_prompt_artifact` name it? None: upstream's default (true for a skill).
    prompt_payload: bool | None = None

    @property
    def kind(self) -> Literal["tool", "driver", "hook", "skill"]:
        """The runtime with the older spellings `wasm` and `native` folded into `tool`."""
        return "tool" if self.runtime in ("wasm", "native") else self.runtime

    @property
    def is_local(self) -> bool:
        """Read from `source` on disk, never the registry: an explicit `local_source` wins, else a
        skill with a `source` is local (upstream's default) and anything else is not."""
        if self.source is None:
            return False
        return self.local_source if self.local_source is not None else self.kind == "skill"


# --------------------------------------------------------------------------- inference


class DriverConfig(_Model):
    artifact: str = Field(min_length=1)
    # Handed to the driver verbatim as MURMUR_INFERENCE_DRIVER_CONFIG (JSON).
    config: dict[str, Any] = Field(default_factory=dict)


class Compaction(_Model):
    threshold: float = Field(default=0.98, gt=0, le=1)
    model: str | None = None
    # The prompt text, inline or read from `system_prompt_file`.
    system_prompt: str | None = None
    system_prompt_file: str | None = None
    dump_summaries: bool = False


class ProviderRef(_Model):
    """Upstream's older spelling of `inference.driver.artifact`; folded into `driver` at validation."""

    artifact: str = Field(min_length=1)


class Inference(_Model):
    # `process`: a CLI agent (Claude Code, or codex by the command's name) drives (issue 27).
    transport: Literal["http", "process"] = "http"
    command: str | None = None  # the CLI of transport: process (required there; default claude upstream)
    endpoint: str | None = None
    model: str | None = None
    # Resolved: a `${VAR}` reference is already replaced by the variable's value.
    api_key: SecretStr | None = None
    # Always set after validation (`provider.artifact` is folded in; no driver is an error).
    driver: DriverConfig | None = None
    provider: ProviderRef | None = None
    max_turns: int = Field(default=10, gt=0)
    max_tokens: int = Field(default=8192, gt=0)
    max_task_reopens: int = Field(default=1, ge=0)
    max_session_tokens: int | None = Field(default=None, gt=0)
    # The prompt text, inline or read from `system_prompt_file`.
    system_prompt: str | None = None
    system_prompt_file: str | None = None
    system_prompt_artifact: str | None = None
    compaction: Compaction = Field(default_factory=Compaction)


# --------------------------------------------------------------------------- the rest


class Context(_Model):
    # Enables compaction when set.
    max_tokens: int | None = Field(default=None, gt=0)
    # Fraction of max_tokens a `seed-context` may fill.
    seed_budget: float | None = Field(default=None, gt=0, le=1)


class Lifecycle(_Model):
    task_acceptance: TaskAcceptance = "single"
    after_task: AfterTask = "exit"
    queue_depth: int = Field(default=1, ge=1)
    # None: wait forever.
    input_timeout_secs: int | None = Field(default=None, gt=0)
    conversation: Conversation = "stateless"
    # murmurd extension: tasks of different contexts running at once under `queue` (None: the
    # default bound, murmurd.a2a.core.admission.DEFAULT_QUEUE_BOUND); `single` and `none` run one.
    max_concurrent_tasks: int | None = Field(default=None, ge=1, le=4096)
    # The seed's name for the reopen budget; None: `inference.max_task_reopens` (the older name).
    max_task_reopens: int | None = Field(default=None, ge=0)


# `observability.eval` scorer types the eval hook knows (fact sheet §6); others are skipped.
SCORER_TYPES = ("exit_ok", "max_turns", "max_tokens", "tool_sequence", "llm_judge")
DEFAULT_SCORER_MAX = {"max_turns": 10, "max_tokens": 100_000}


class EvalScorer(_Model):
    type: str = Field(min_length=1)
    name: str | None = Field(default=None, min_length=1)  # None: the type
    max: int | None = Field(default=None, ge=0)  # max_turns (default 10), max_tokens (default 100000)
    expected: list[str] = Field(default_factory=list)  # tool_sequence: tool names, in order

    @property
    def label(self) -> str:
        return self.name or self.type


class EvalConfig(_Model):
    """`observability.eval`: what murmur-hook-eval scores, handed to hooks as MURMUR_EVAL_CONFIG."""

    dataset_id: str | None = None
    scorers: list[EvalScorer] = Field(default_factory=list)


class Observability(_Model):
    otel_endpoint: str | None = None  # OTLP/HTTP base URL
    eval: EvalConfig | None = None


class Trace(_Model):
    include_tool_output: bool = False


class RegistrySelection(_Model):
    """`registry:` in the cwd's `murmur.yaml`: which registry `install` and `publish` use
    (read by `murmurd.registry.config`, as upstream reads it)."""

    default: str | None = None  # local | remote
    remote_url: str | None = None


class CapsuleManifest(_Model):
    name: str = Field(min_length=1)
    version: str = Field(min_length=1)
    artifacts: list[ArtifactRef] = Field(default_factory=list)
    network: TopNetwork = Field(default_factory=TopNetwork)
    capabilities: Capabilities = Field(default_factory=Capabilities)
    # None: a script capsule (capsule.wasm runs itself, no inference loop).
    inference: Inference | None = None
    # None: no context window declared (compaction off, task-start context-window 0).
    context: Context | None = None
    lifecycle: Lifecycle = Field(default_factory=Lifecycle)
    observability: Observability = Field(default_factory=Observability)
    trace: Trace = Field(default_factory=Trace)
    registry: RegistrySelection | None = None

    @property
    def max_task_reopens(self) -> int:
        """How often `reopen-task` may re-run one task: `lifecycle.max_task_reopens` (the seed's
        name) when set, else `inference.max_task_reopens` (upstream v0.2's), default 1."""
        if self.lifecycle.max_task_reopens is not None:
            return self.lifecycle.max_task_reopens
        return self.inference.max_task_reopens if self.inference else 1

    @property
    def internal_port(self) -> int | None:
        """The A2A port: top-level `network.internal_port` (upstream's place), else murmurd's older
        `capabilities.network.internal_port` (validation refuses the two disagreeing)."""
        return self.network.internal_port or self.capabilities.network.internal_port

    def artifact(self, name: str) -> ArtifactRef | None:
        return next((a for a in self.artifacts if a.name == name), None)

    def artifacts_of(self, kind: str) -> list[ArtifactRef]:
        """Artifacts of one kind (`tool` includes the older spelling `wasm`)."""
        return [a for a in self.artifacts if a.kind == kind]

    def deadline_seconds_for(self, artifact: ArtifactRef | None = None) -> int:
        """The per-call deadline for the capsule itself (`None`) or one of its artifacts.

        An artifact's own `capabilities.limits.deadline_seconds` wins; a hook otherwise gets the
        30 s hook default; anything else gets the capsule's limit or the 600 s default.
        """
        if artifact is not None:
            own = artifact.capabilities.limits if artifact.capabilities else None
            if own is not None and own.deadline_seconds is not None:
                return own.deadline_seconds
            if artifact.kind == "hook":
                return DEFAULT_HOOK_DEADLINE_SECONDS
        return self.capabilities.limits.deadline_for("capsule")
