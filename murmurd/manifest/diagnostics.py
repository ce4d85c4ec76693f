"""Validation diagnostics: one finding per `Diagnostic`, collected in a `Report`.

Every code murmurd can report about a manifest lives in `CODES`, with its severity and a short
description. The table is the reference documentation for operators (`murmurd validate` output
cites these codes) and the single place a new rule registers its code: constructing a
`Diagnostic` with a code missing from the table is a programming error.

A diagnostic's `value` is the offending value, already rendered for display. The value of an
`api_key` is never rendered: see `REDACTED` and `render_value`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Severity = Literal["error", "warning"]

# Shown in place of a secret value.
REDACTED = "<redacted>"

# Path of a finding about the document as a whole (unreadable file, not a mapping, ...).
ROOT = "$"


@dataclass(frozen=True)
class CodeInfo:
    severity: Severity
    summary: str


CODES: dict[str, CodeInfo] = {
    # -- the document and generic field rules ------------------------------------------------
    # Upstream's codes keep upstream's meanings (docs/reference/diagnostics.md); murmurd's own
    # findings take codes upstream does not use.
    "E-IO-001": CodeInfo("error", "murmur.yaml is missing or cannot be read"),
    "E-MAN-001": CodeInfo("error", "a required field is missing (or empty)"),
    "E-MAN-002": CodeInfo("error", "murmur.yaml is not valid YAML"),
    "E-MAN-003": CodeInfo("error", "a field (or the document's top level) has the wrong type"),
    "E-MAN-006": CodeInfo("error", "a number is outside its allowed range"),
    "E-MAN-007": CodeInfo("error", "a field is not one of its allowed values"),
    "E-MAN-008": CodeInfo("error", "observability.otel_endpoint is not an http(s) URL"),
    "E-MAN-009": CodeInfo("error", "a version is not a string (YAML read it as a number or date)"),
    "E-MAN-010": CodeInfo("error", "murmur.yaml is past a reading limit (nesting depth, a number's length) or holds a YAML alias"),
    "W-MAN-001": CodeInfo("warning", "unknown key; it is ignored"),
    "W-MAN-002": CodeInfo("warning", "a field upstream murmur documents that murmurd does not implement; it is ignored"),
    # -- artifacts[] ---------------------------------------------------------------------------
    "E-ART-001": CodeInfo("error", "unknown artifact runtime"),
    "E-ART-002": CodeInfo("error", "two artifacts share a name"),
    "E-ART-003": CodeInfo("error", "a skill artifact declares capabilities (skills run no code)"),
    "E-ART-004": CodeInfo("error", "on_overflow is declared on an artifact that is not a hook"),
    "E-ART-005": CodeInfo("error", "local_source is true but no source path is given"),
    "E-ART-007": CodeInfo("error", "source is declared but local_source is (or defaults to) false"),
    "W-ART-001": CodeInfo("warning", "a version on a local-source artifact is not checked (upstream shows it as 'local')"),
    "E-ART-006": CodeInfo("error", "an artifact name is not a plain name (letters, digits, '_', '-'; at most 64)"),
    # -- capabilities (capsule-wide and per-artifact) ----------------------------------------
    "E-CAP-001": CodeInfo("error", "malformed network.allow entry"),
    "E-CAP-002": CodeInfo("error", "filesystem.scope is not relative to the workdir, or escapes it with '..'"),
    "E-CAP-003": CodeInfo("error", "capabilities.containment (or --containment) asks for a class murmurd cannot achieve on this host"),
    "E-CAP-005": CodeInfo("error", "a containment floor needs a network namespace this host cannot create"),
    "E-CAP-013": CodeInfo("error", "shell.allow entry is not a bare binary name (a path, spaces, a glob)"),
    "E-CAP-014": CodeInfo("error", "shell block present with an empty allow list"),
    "E-CAP-007": CodeInfo("error", "a resource limit is zero or negative"),
    "E-CAP-008": CodeInfo("error", "network.internal_port is not a TCP port (1-65535)"),
    "E-CAP-009": CodeInfo("error", "network.internal_port and capabilities.network.internal_port disagree"),
    "E-CAP-011": CodeInfo("error", "a network.cors_origins entry is not an origin (scheme://host[:port]); '*' is refused"),
    "E-CAP-012": CodeInfo("error", "MURMURD_SHELL_CONFINEMENT is not auto or none, or MURMURD_SECCOMP_ALLOW names an unknown syscall"),
    "E-RUN-012": CodeInfo("error", "a containment floor needs a cgroup for shell children and none can be delegated"),
    "W-CAP-001": CodeInfo("warning", "env.allow names a credential-shaped variable; it is dropped"),
    # -- shell containment on this host (docs/containment.md) --------------------------------------
    "W-SEC-001": CodeInfo("warning", "shell children get neither a network namespace nor Landlock: environment and rlimits only"),
    "W-SEC-002": CodeInfo("warning", "shell children's filesystem writes and execution are not confined (no Landlock)"),
    "W-SEC-003": CodeInfo("warning", "bash is allowed with a network allowlist and no network confinement"),
    "W-SEC-005": CodeInfo("warning", "shell children are confined (netns, Landlock, seccomp); what holds and the unix_sockets exception"),
    "W-SEC-009": CodeInfo("warning", "an interpreter_runtime grant widens the shell children's read+execute scope"),
    "W-SEC-008": CodeInfo("warning", "a capability block that is inert where it is declared (any block on a native tool "
                                      "but limits.deadline_seconds)"),
    "W-SEC-010": CodeInfo("warning", "no pids cgroup: cgroup_pids_max (and, as root, max_processes) is not enforced"),
    "W-SEC-011": CodeInfo("warning", "filesystem.workdir_exec: true; the achieved class is advisory"),
    "W-SEC-013": CodeInfo("warning", "shell children's network is not confined (no network namespace)"),
    "W-SEC-014": CodeInfo("warning", "network.allow is not extended to shell children: they get no network at all"),
    # -- inference -----------------------------------------------------------------------------
    "E-INF-001": CodeInfo("error", "inference.endpoint has no scheme"),
    "E-INF-002": CodeInfo("error", "inference.endpoint is plain http to a non-loopback host"),
    "E-INF-003": CodeInfo("error", "inference.endpoint is not a usable http(s) URL"),
    "E-INF-004": CodeInfo("error", "api_key names an environment variable that is unset"),
    "E-INF-005": CodeInfo("error", "api_key looks like ${VAR} but VAR is not UPPER_SNAKE"),
    "E-INF-006": CodeInfo("error", "more than one system prompt source"),
    "E-INF-007": CodeInfo("error", "a system_prompt_file is missing or unreadable"),
    "E-INF-008": CodeInfo("error", "driver.artifact is not a declared runtime: driver artifact"),
    "E-INF-009": CodeInfo("error", "compaction.threshold is outside (0, 1]"),
    "E-LIF-001": CodeInfo("error", "lifecycle.max_task_reopens and inference.max_task_reopens disagree"),
    "W-LIF-001": CodeInfo("warning", "lifecycle.max_concurrent_tasks with a task_acceptance other than queue; one task runs at a time"),
    "E-INF-010": CodeInfo("error", "an inference block names no driver (driver.artifact or provider.artifact)"),
    "E-INF-011": CodeInfo("error", "a field is not valid with inference.transport: process (driver, endpoint, api_key, max_tokens)"),
    "E-INF-012": CodeInfo("error", "system_prompt_artifact names an artifact that is not a prompt payload"),
    "W-INF-001": CodeInfo("warning", "inference.transport: process: what the CLI agent runs with (network, HOME, its tools)"),
    # -- launch certainties `murmurd validate` checks beyond the manifest (staging/launch_checks.py) --
    "E-REG-001": CodeInfo("error", "a named artifact is neither in the registry nor bundled with murmurd"),
    "E-INF-013": CodeInfo("error", "a bundled HTTP driver's inference.endpoint origin is not in network.allow"),
    "E-INF-014": CodeInfo("error", "no inference block and no capsule.wasm: nothing would run a task"),
    "E-INF-015": CodeInfo("error", "a bundled HTTP driver with no inference.model"),
    # -- a hook artifact's own contract (checked at staging) -----------------------------------
    "E-HOOK-001": CodeInfo("error", "unknown hook binding"),
    "E-HOOK-002": CodeInfo("error", "unknown hook commit_policy"),
    "E-HOOK-003": CodeInfo("error", "unknown hook execution_mode"),
    "E-HOOK-004": CodeInfo("error", "the binding's handler cannot commit the declared policy"),
    "E-HOOK-005": CodeInfo("error", "an async hook declares a commit_policy other than none"),
    "E-HOOK-006": CodeInfo("error", "an on-stage hook is declared async"),
    "E-HOOK-007": CodeInfo("error", "a commit_policy: deny hook no decision point consults (no on-shell/on-tool-call binding)"),
    "W-EVAL-001": CodeInfo("warning", "observability.eval: an unknown scorer type; it is skipped"),
    "W-EVAL-002": CodeInfo("warning", "observability.eval: llm_judge is parsed but scores nothing"),
    "W-EVAL-003": CodeInfo("warning", "observability.eval without scorers; the eval hook writes nothing"),
    "W-EVAL-004": CodeInfo("warning", "observability.eval without the murmur-hook-eval hook; nothing is scored"),
    "W-EVAL-005": CodeInfo("warning", "observability.eval: two scorers share a name"),
    "W-HOOK-001": CodeInfo("warning", "hook contract fields on an artifact that is not a hook"),
    "W-HOOK-002": CodeInfo("warning", "a hook given as a bare .wasm with no manifest: every event, blocking, commits nothing"),
}


@dataclass(frozen=True)
class Diagnostic:
    """One finding. `message` names the field path, the value and the rule."""

    code: str
    severity: Severity
    path: str
    value: str | None
    message: str

    def __post_init__(self) -> None:
        info = CODES.get(self.code)
        if info is None:
            raise ValueError(f"diagnostic code {self.code!r} is not in diagnostics.CODES")
        if info.severity != self.severity:
            raise ValueError(f"diagnostic code {self.code!r} is a {info.severity}")

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_text(self) -> str:
        return f"{self.severity} {self.code} {self.message}"


_NO_VALUE: Any = object()


def diagnostic(
    code: str, path: str, rule: str, value: Any = _NO_VALUE, *, rendered: str | None = None
) -> Diagnostic:
    """Build a diagnostic whose message reads `<path>: <rule> (got <value>)`.

    Pass the raw `value` to have it rendered, or an already-rendered string as `rendered`
    (for example `REDACTED`). Omit both when there is no value (a missing field).
    """
    shown = rendered if rendered is not None else (None if value is _NO_VALUE else render_value(value))
    where = path or ROOT
    message = f"{where}: {rule}" if shown is None else f"{where}: {rule} (got {shown})"
    return Diagnostic(code, CODES[code].severity, where, shown, message)


_MAX_SHOWN = 120


def render_value(value: Any) -> str:
    """A short display form of a manifest value.

    Scalars are shown as written; mappings show only their keys and lists of mappings only their
    length, so a secret nested in a structure of the wrong shape is never echoed.
    """
    if isinstance(value, str):
        text = repr(value)
    elif value is None:
        text = "null"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, (int, float)):
        text = repr(value)
    elif isinstance(value, dict):
        keys = ", ".join(str(k) for k in value)
        text = f"{{mapping with keys: {keys}}}" if keys else "{}"
    elif isinstance(value, (list, tuple)):
        if all(isinstance(v, (str, int, float, bool)) or v is None for v in value):
            text = json.dumps(list(value), default=str)
        else:
            text = f"[list of {len(value)} items]"
    else:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


@dataclass
class Report:
    """Every finding of one validation run, in the order they were found."""

    diagnostics: list[Diagnostic] = field(default_factory=list)
    source: str | None = None

    def add(self, diag: Diagnostic) -> None:
        self.diagnostics.append(diag)

    def extend(self, diags: list[Diagnostic]) -> None:
        self.diagnostics.extend(diags)

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]

    @property
    def warnings(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "warning"]

    @property
    def ok(self) -> bool:
        """True when there is no error; warnings do not stop a capsule."""
        return not self.errors

    def codes(self) -> list[str]:
        return [d.code for d in self.diagnostics]

    def summary(self) -> str:
        e, w = len(self.errors), len(self.warnings)
        return f"{e} error{'s' if e != 1 else ''}, {w} warning{'s' if w != 1 else ''}"

    def to_json(self, *, indent: int | None = 2) -> str:
        payload = {
            "source": self.source,
            "ok": self.ok,
            "errors": len(self.errors),
            "warnings": len(self.warnings),
            "diagnostics": [d.to_dict() for d in self.errors + self.warnings],
        }
        return json.dumps(payload, indent=indent)

    def to_text(self) -> str:
        """Errors first, then warnings, one per line, then a summary line."""
        head = f"{self.source}: " if self.source else ""
        lines = [f"{head}{d.to_text()}" for d in self.errors + self.warnings]
        verdict = "ok" if self.ok else "invalid"
        lines.append(f"{head}{verdict}: {self.summary()}")
        return "\n".join(lines)
