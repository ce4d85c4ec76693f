"""Validate a capsule's `murmur.yaml`: collect every problem, then build the typed model.

Validation never stops at the first problem. It runs in four passes over the raw YAML mapping:

1. rules: the semantic checks of runtime-notes §4, each emitting diagnostics with a stable code;
2. resolution: `inference.api_key: ${VAR}` is read from `env`, and `system_prompt_file` /
   `compaction.system_prompt_file` are read (relative to the manifest directory) into the prompt;
3. types: the resolved mapping goes through the pydantic models; each pydantic error becomes a
   diagnostic too, unless a rule already reported that very field;
4. unknown keys: every key the models do not know is a warning, with its path.

The model is returned only when there is no error. Nothing here touches the network or WASM; the
only I/O is reading `murmur.yaml` and the prompt files.
"""

from __future__ import annotations

import copy
import datetime as dt
import difflib
import ipaddress
import os
import re
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Union, get_args, get_origin
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ValidationError

from murmurd.containment import cli_profile
from murmurd.containment.host import probe_host
from murmurd.containment.plan import SETTING_VARIABLE, floor_refusal, plan_containment, setting_from, shell_warnings
from murmurd.containment.seccomp_filter import EXTRA_VARIABLE, extras_from
from murmurd.manifest.capsule import SCORER_TYPES, CapsuleManifest
from murmurd.manifest.credentials import looks_like_credential
from murmurd.manifest.origins import BadOrigin, check_origin
from murmurd.manifest.diagnostics import REDACTED, ROOT, Diagnostic, Report, diagnostic, render_value
from murmurd.manifest.reading import UnreadableFile, YamlRefused, load_yaml, read_text_file
from murmurd.staging.preflight import dialect_of

MANIFEST_FILE = "murmur.yaml"
ARTIFACT_RUNTIMES = ("tool", "wasm", "native", "driver", "hook", "skill")  # native: python-native guide
API_KEY_PATH = "inference.api_key"

_ENV_REF = re.compile(r"\$\{([A-Z][A-Z0-9_]*)\}")
_ENV_REF_LIKE = re.compile(r"\$\{.*\}", re.DOTALL)
# An artifact name becomes a directory (`tools/<name>/`), a log name and a model-visible tool
# name, so it is what every provider accepts as a tool name: no `/`, `.`, spaces or NUL.
ARTIFACT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
_BARE_BINARY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]*")
_HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"(?=.{{1,253}}$){_HOST_LABEL}(?:\.{_HOST_LABEL})*\.?")
_PROMPT_SOURCES = ("system_prompt", "system_prompt_file", "system_prompt_artifact")
_NETWORK_FORMS = "allowed forms are https://host[:port], host, or host:port"


# --------------------------------------------------------------------------- entry points


def load_capsule(
    manifest_dir: Path, env: Mapping[str, str] = os.environ
) -> tuple[CapsuleManifest | None, Report]:
    """Read `<manifest_dir>/murmur.yaml` and validate it.

    A missing file or a YAML error is a diagnostic, never an exception. `manifest_dir` may also be
    the path of the manifest file itself.
    """
    manifest_dir = Path(manifest_dir)
    file = manifest_dir if manifest_dir.is_file() else manifest_dir / MANIFEST_FILE
    raw, problem = _read_yaml(file)
    if problem is not None:
        return None, Report([problem], source=str(file))
    model, report = validate_manifest(raw, file.parent, env)
    report.source = str(file)
    return model, report


FLOOR_CODES = frozenset({"E-CAP-005", "E-RUN-012", "E-CAP-003"})


def load_capsule_for_report(manifest_dir: Path, env: Mapping[str, str] = os.environ) -> CapsuleManifest | None:
    """The manifest as `--explain-scope` reports it: also when its only errors are an unmet
    containment floor (upstream reports then too). None when anything else is wrong."""
    model, report = load_capsule(manifest_dir, env)
    if model is not None or not report.errors or {d.code for d in report.errors} - FLOOR_CODES:
        return model
    manifest_dir = Path(manifest_dir)
    raw, _ = _read_yaml(manifest_dir if manifest_dir.is_file() else manifest_dir / MANIFEST_FILE)
    floor = raw["capabilities"].pop("containment")
    model, _ = validate_manifest(raw, manifest_dir if manifest_dir.is_dir() else manifest_dir.parent, env)
    if model is None:
        return None
    return model.model_copy(update={"capabilities": model.capabilities.model_copy(update={"containment": floor})})


def validate_manifest(
    raw: dict, manifest_dir: Path, env: Mapping[str, str]
) -> tuple[CapsuleManifest | None, Report]:
    """Validate a parsed `murmur.yaml` mapping; return the model (None on any error) and the report."""
    report = Report()
    if not isinstance(raw, dict):
        shown = "null" if raw is None else f"a {type(raw).__name__}"
        report.add(diagnostic("E-MAN-003", ROOT, "the manifest must be a mapping of fields", rendered=shown))
        return None, report
    ctx = _Context(raw, Path(manifest_dir), env)
    found: list[Diagnostic] = []
    for rule in _RULES:
        found.extend(rule(ctx))
    resolved, resolution = _resolve(ctx)
    found.extend(resolution)
    model, type_errors = _build(resolved)
    found.extend(d for d in type_errors if not _covered(d.path, found))
    if model is not None:
        found.extend(_containment(model, env))
    report.extend(found)
    report.extend(unknown_keys(CapsuleManifest, raw))
    return (model if report.ok else None), report


# --------------------------------------------------------------------------- reading


def _read_yaml(file: Path) -> tuple[Any, Diagnostic | None]:
    try:
        text = read_text_file(file)
    except FileNotFoundError:
        return None, diagnostic("E-IO-001", ROOT, f"no {MANIFEST_FILE} at {file}")
    except UnreadableFile as exc:
        return None, diagnostic("E-IO-001", ROOT, str(exc))
    try:
        return load_yaml(text), None
    except yaml.YAMLError as exc:
        return None, diagnostic("E-MAN-002", ROOT, f"{file} is not valid YAML: {_yaml_problem(exc)}")
    except YamlRefused as exc:
        return None, diagnostic("E-MAN-010", ROOT, f"{file} is refused: {exc}")


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    if mark is None:
        return problem
    return f"{problem} at line {mark.line + 1}, column {mark.column + 1}"


# --------------------------------------------------------------------------- helpers


@dataclass(frozen=True)
class _Context:
    raw: dict
    manifest_dir: Path
    env: Mapping[str, str]

    def section(self, *keys: str) -> dict | None:
        return _section(self.raw, *keys)

    def artifacts(self) -> list[tuple[int, dict]]:
        entries = self.raw.get("artifacts")
        if not isinstance(entries, list):
            return []
        return [(i, a) for i, a in enumerate(entries) if isinstance(a, dict)]


def _section(mapping: Any, *keys: str) -> dict | None:
    """`mapping[k1][k2]...` when every step is a mapping, else None."""
    for key in keys:
        if not isinstance(mapping, dict):
            return None
        mapping = mapping.get(key)
    return mapping if isinstance(mapping, dict) else None


def _join(prefix: str, key: Any) -> str:
    return f"{prefix}.{key}" if prefix else str(key)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _covered(path: str, found: Iterable[Diagnostic]) -> bool:
    """A rule already reported this field (or a field containing it)."""
    return any(path == d.path or path.startswith((d.path + ".", d.path + "[")) for d in found)


def _hide_userinfo(url: str) -> str:
    """Never echo credentials embedded in a URL."""
    return re.sub(r"(?<=://)[^/@]*@", "***@", url, count=1)


# --------------------------------------------------------------------------- rules: identity


def _rule_identity(ctx: _Context) -> list[Diagnostic]:
    found = [_version_hint("version", ctx.raw.get("version"))]
    found += [_version_hint(f"artifacts[{i}].version", a.get("version")) for i, a in ctx.artifacts()]
    return [d for d in found if d is not None]


def _version_hint(path: str, value: Any) -> Diagnostic | None:
    if not (_is_number(value) or isinstance(value, (dt.date, dt.datetime))):
        return None
    rule = 'must be a string; quote it (version: "1.0") so YAML does not read it as a number or date'
    return diagnostic("E-MAN-009", path, rule, value if _is_number(value) else str(value))


# --------------------------------------------------------------------------- rules: artifacts


def _rule_artifacts(ctx: _Context) -> list[Diagnostic]:
    found: list[Diagnostic] = []
    seen: dict[str, int] = {}
    for i, art in ctx.artifacts():
        path = f"artifacts[{i}]"
        runtime = art.get("runtime", "tool")
        found += _artifact_runtime(path, runtime)
        name = art.get("name")
        if isinstance(name, str) and name and not ARTIFACT_NAME.fullmatch(name):
            rule = ("must be a plain name: a letter or digit, then letters, digits, '_' or '-', "
                    "at most 64 characters (it names tools/<name>/ and the model's tool)")
            found.append(diagnostic("E-ART-006", f"{path}.name", rule, name))
        if isinstance(name, str):
            if name in seen:
                rule = f"duplicate artifact name; artifacts[{seen[name]}] already declares it"
                found.append(diagnostic("E-ART-002", f"{path}.name", rule, name))
            seen.setdefault(name, i)
        if runtime == "skill" and art.get("capabilities") is not None:
            rule = "a skill runs no code, so it cannot declare capabilities"
            found.append(diagnostic("E-ART-003", f"{path}.capabilities", rule, art["capabilities"]))
        if "on_overflow" in art and runtime != "hook":
            rule = f"on_overflow applies to hooks only; this artifact is runtime {runtime!r}"
            found.append(diagnostic("E-ART-004", f"{path}.on_overflow", rule, art["on_overflow"]))
        if art.get("local_source") is True and not isinstance(art.get("source"), str):
            rule = "local_source: true needs a `source` path to read the artifact from"
            found.append(diagnostic("E-ART-005", f"{path}.source", rule, art.get("source")))
        if isinstance(art.get("source"), str) and _effective_local(art, runtime) and art.get("version") is not None:
            rule = ("is not checked for a local source: the artifact is read from disk every run and never "
                    "pinned in murmur.lock (upstream shows its version as 'local')")
            found.append(diagnostic("W-ART-001", f"{path}.version", rule, art["version"]))
        if isinstance(art.get("source"), str) and not _effective_local(art, runtime):
            rule = (f"artifact {name!r} declares 'source:' but does not declare 'local_source: true' "
                    f"(runtime: {runtime}); only a skill reads its source locally by default")
            found.append(diagnostic("E-ART-007", f"{path}.local_source", rule, art.get("local_source", False)))
        caps = art.get("capabilities")
        if isinstance(caps, dict):
            found += check_capabilities(caps, f"{path}.capabilities", narrowing=True)
    return found


def _effective_local(art: dict, runtime: Any) -> bool:
    """Upstream's default: `local_source` is true for a skill and false otherwise; explicit wins."""
    explicit = art.get("local_source")
    return explicit if isinstance(explicit, bool) else runtime == "skill"


def _artifact_runtime(path: str, runtime: Any) -> list[Diagnostic]:
    if not isinstance(runtime, str) or runtime in ARTIFACT_RUNTIMES:
        return []  # a non-string is a type error, reported by the model pass
    allowed = ", ".join(repr(r) for r in ARTIFACT_RUNTIMES)
    rule = f"unknown runtime; expected one of {allowed}"
    return [diagnostic("E-ART-001", f"{path}.runtime", rule, runtime)]


# --------------------------------------------------------------------------- rules: capabilities


def _rule_capabilities(ctx: _Context) -> list[Diagnostic]:
    caps = ctx.section("capabilities")
    found = check_capabilities(caps, "capabilities") if caps is not None else []
    return found


def _containment(model: CapsuleManifest, env: Mapping[str, str]) -> list[Diagnostic]:
    """The floor against what this host achieves (`E-CAP-005`, `E-RUN-012`, `E-CAP-003`), and the
    `W-SEC` warnings that say what is not enforced on shell children: the same at `validate` and
    at every launch."""
    try:
        setting = setting_from(env)
    except ValueError as exc:
        return [diagnostic("E-CAP-012", SETTING_VARIABLE, f"{exc}; unset it or say auto", env.get(SETTING_VARIABLE))]
    try:
        extras = extras_from(dict(env))
    except ValueError as exc:
        return [diagnostic("E-CAP-012", EXTRA_VARIABLE, f"{exc}; name syscalls only", env.get(EXTRA_VARIABLE))]
    caps = model.capabilities
    support = probe_host()
    shell_allow = list(caps.shell.allow) if caps.shell else []
    runtime = tuple((d.path, d.list_dir) for g in (caps.shell.interpreter_runtime if caps.shell else []) for d in g.dirs)
    plan = plan_containment(support, setting, caps.filesystem.workdir_exec, declared=caps.containment or "advisory",
                            unix_sockets=caps.network.unix_sockets, runtime=runtime, seccomp_extra=extras)
    found: list[Diagnostic] = []
    floor = caps.containment
    refusal = floor_refusal(floor, plan, support, subprocesses=bool(shell_allow)) if floor is not None else None
    if refusal is not None:
        code, reason = refusal
        found.append(diagnostic(code, "capabilities.containment", f"{reason}; refused rather than run with less", floor))
    warnings = shell_warnings(plan, support, shell_allow=shell_allow, network_allow=list(caps.network.allow),
                              declares_workdir_exec=caps.filesystem.workdir_exec)
    for code, path, message in warnings:
        found.append(diagnostic(code, path, message))
    if model.inference is not None and model.inference.transport == "process":
        found.append(diagnostic("W-INF-001", "inference.transport", _process_grant(model, plan, env)))
    return found


def _process_grant(model: CapsuleManifest, plan: Any, env: Mapping[str, str]) -> str:
    """What a process-transport CLI runs with (its profile: murmurd/containment/cli_profile.py), in one line."""
    inference = model.inference
    assert inference is not None
    command = inference.command or "claude"
    prompt_skill = inference.system_prompt_artifact
    tools = [a.name for a in model.artifacts if a.kind == "tool" or (a.kind == "skill" and a.name != prompt_skill)]
    tools += list(model.capabilities.shell.allow) if model.capabilities.shell else []
    if plan.landlock:
        confined = ("Landlock: read and execute only of the CLI's real path, its #! interpreter, their shared-library "
                    "closure and its npm package; read of its own /proc/self, the resolver's files and the TLS trust "
                    f"store; writes beneath the workdir and HOME {env.get('HOME') or '<unset>'!s}")
        confined += ", neither executable" if plan.mountns else ""
        confined += "; the seccomp allowlist" if plan.seccomp else "; no seccomp filter"
    else:
        confined = f"no Landlock: it reads, writes and executes anything murmurd's uid can; HOME {env.get('HOME') or '<unset>'!s}"
    cgroup = "a pids cgroup" if plan.pids_root is not None else "no pids cgroup"
    providers = cli_profile.provider_origins(dialect_of(command), env)
    granted = cli_profile.granted_origins(providers, model.capabilities.network.allow)
    missing = [o for o in providers if o not in granted]
    if plan.netns:
        network = (f"its network is a namespace whose only way out is the egress relay: its provider origin(s) "
                   f"{', '.join(granted) or '<none>'} (capabilities.network.allow) and murmurd's loopback MCP bridge")
        if missing:
            network += f"; its configured provider {', '.join(missing)} is not in network.allow, so it is unreachable"
    else:
        network = "its network is not confined (no network namespace here): it reaches any host murmurd can"
    return (f"spawns {command!r} in the session workdir under the process transport's containment profile "
            f"({confined}; {cgroup}; rlimits but memory_bytes); {network}; its environment keeps only what a CLI "
            f"agent reads; over MCP it reaches: {', '.join(tools) or '<no tools>'}")


def _rule_network(ctx: _Context) -> list[Diagnostic]:
    """The top-level `network:` block (upstream's place for the A2A port)."""
    network = ctx.section("network")
    if network is None:
        return []
    found = _network_rules({"internal_port": network.get("internal_port")}, "network")
    top = network.get("internal_port")
    older = (_section(ctx.raw, "capabilities", "network") or {}).get("internal_port")
    if isinstance(top, int) and isinstance(older, int) and top != older:
        rule = (f"disagrees with capabilities.network.internal_port ({older}); set the port once, "
                "at the top level as upstream does")
        found.append(diagnostic("E-CAP-009", "network.internal_port", rule, top))
    origins = network.get("cors_origins")
    if isinstance(origins, list):
        for i, origin in enumerate(origins):
            if isinstance(origin, str):
                try:
                    check_origin(origin)
                except BadOrigin as exc:
                    found.append(diagnostic("E-CAP-011", f"network.cors_origins[{i}]", str(exc), origin[:200]))
    return found


def _rule_lifecycle(ctx: _Context) -> list[Diagnostic]:
    """The reopen budget's two names (the seed's `lifecycle.max_task_reopens`, upstream v0.2's
    `inference.max_task_reopens`) must not disagree; a concurrency bound applies to `queue` only."""
    lifecycle = ctx.section("lifecycle") or {}
    found: list[Diagnostic] = []
    seed = lifecycle.get("max_task_reopens")
    older = (ctx.section("inference") or {}).get("max_task_reopens")
    if isinstance(seed, int) and isinstance(older, int) and seed != older:
        rule = f"disagrees with inference.max_task_reopens ({older}); set the budget once, under lifecycle"
        found.append(diagnostic("E-LIF-001", "lifecycle.max_task_reopens", rule, seed))
    bound = lifecycle.get("max_concurrent_tasks")
    acceptance = lifecycle.get("task_acceptance", "single")
    if isinstance(bound, int) and bound > 1 and acceptance != "queue":
        rule = f"applies to task_acceptance: queue; with {acceptance} one task runs at a time"
        found.append(diagnostic("W-LIF-001", "lifecycle.max_concurrent_tasks", rule, bound))
    return found


def check_capabilities(caps: dict, prefix: str, *, narrowing: bool = False) -> list[Diagnostic]:
    """Syntax rules of a `capabilities` block.

    `narrowing` marks a per-artifact block, where `shell: {allow: []}` is meaningful (it narrows
    the artifact to no shell) rather than a mistake.
    """
    return (
        _network_rules(_section(caps, "network"), f"{prefix}.network")
        + _filesystem_rules(_section(caps, "filesystem"), f"{prefix}.filesystem")
        + _shell_rules(caps, prefix, narrowing)
        + _env_rules(_section(caps, "env"), f"{prefix}.env")
        + _limit_rules(_section(caps, "limits"), f"{prefix}.limits")
    )


def _network_rules(network: dict | None, prefix: str) -> list[Diagnostic]:
    if network is None:
        return []
    found: list[Diagnostic] = []
    allow = network.get("allow")
    if isinstance(allow, list):
        for i, entry in enumerate(allow):
            problem = network_entry_problem(entry) if isinstance(entry, str) else None
            if problem is not None:
                found.append(diagnostic("E-CAP-001", f"{prefix}.allow[{i}]", problem, _hide_userinfo(entry)))
    port = network.get("internal_port")
    if _is_number(port) and not (isinstance(port, int) and 1 <= port <= 65535):
        rule = "must be a TCP port from 1 to 65535 (leave it out for an OS-assigned port)"
        found.append(diagnostic("E-CAP-008", f"{prefix}.internal_port", rule, port))
    return found


def network_entry_problem(entry: str) -> str | None:
    """Why a `network.allow` entry is malformed, or None when it is one of the allowed forms."""
    if not entry or entry != entry.strip():
        return f"must be a non-empty host without surrounding spaces; {_NETWORK_FORMS}"
    if "?" in entry:
        return f"must not contain a query; {_NETWORK_FORMS}"
    if "#" in entry:
        return f"must not contain a fragment; {_NETWORK_FORMS}"
    if "://" in entry:
        return _url_entry_problem(entry)
    if "/" in entry:
        return f"must not contain a path; {_NETWORK_FORMS}"
    if "@" in entry:
        return f"must not contain credentials; {_NETWORK_FORMS}"
    host, port = _split_host_port(entry)
    return _host_port_problem(host, port)


def _url_entry_problem(entry: str) -> str | None:
    parts = urlsplit(entry)
    if parts.scheme.lower() not in ("http", "https"):
        return f"scheme {parts.scheme!r} is not allowed, only http and https; {_NETWORK_FORMS}"
    if "@" in parts.netloc:
        return f"must not contain credentials; {_NETWORK_FORMS}"
    if parts.path not in ("", "/"):
        return f"must not contain a path; {_NETWORK_FORMS}"
    host, port = _split_host_port(parts.netloc)
    return _host_port_problem(host, port)


def _split_host_port(entry: str) -> tuple[str, str | None]:
    if entry.startswith("["):
        match = re.fullmatch(r"\[([^\]]*)\](?::(.*))?", entry)
        return (match.group(1), match.group(2)) if match else (entry, None)
    if entry.count(":") > 1:
        return entry, None  # a bare IPv6 address
    host, sep, port = entry.partition(":")
    return host, (port if sep else None)


def _host_port_problem(host: str, port: str | None) -> str | None:
    if not _valid_host(host):
        return f"{host!r} is not a valid host name or IP address; {_NETWORK_FORMS}"
    if port is not None and not (port.isdigit() and 1 <= int(port) <= 65535):
        return f"port {port!r} is not a number from 1 to 65535; {_NETWORK_FORMS}"
    return None


def _valid_host(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return bool(_HOSTNAME.fullmatch(host))


def _filesystem_rules(filesystem: dict | None, prefix: str) -> list[Diagnostic]:
    scope = filesystem.get("scope") if filesystem is not None else None
    if not isinstance(scope, str):
        return []
    path = f"{prefix}.scope"
    if scope.startswith(("/", "\\", "~")) or re.match(r"[A-Za-z]:[\\/]", scope):
        rule = "must be a path relative to the session workdir, not absolute"
        return [diagnostic("E-CAP-002", path, rule, scope)]
    if ".." in PurePosixPath(scope.replace("\\", "/")).parts:
        rule = "must not contain '..'; the scope stays inside the session workdir"
        return [diagnostic("E-CAP-002", path, rule, scope)]
    return []


def _shell_rules(caps: dict, prefix: str, narrowing: bool) -> list[Diagnostic]:
    if "shell" not in caps:
        return []
    shell = caps["shell"]
    if shell is not None and not isinstance(shell, dict):
        return []  # a type error, reported by the model pass
    path = f"{prefix}.shell.allow"
    allow = (shell or {}).get("allow")
    if narrowing and allow == []:
        return []
    if allow is None or allow == []:
        rule = (
            "the shell block is present, so allow must list at least one binary "
            "(remove the block for no shell)"
        )
        return [diagnostic("E-CAP-014", path, rule, allow if allow is not None else [])]
    if not isinstance(allow, list):
        return []
    found: list[Diagnostic] = []
    for i, entry in enumerate(allow):
        if not isinstance(entry, str):
            continue
        if "/" in entry or "\\" in entry:
            rule = "must be a bare binary name resolved on PATH, not a path"
            found.append(diagnostic("E-CAP-013", f"{path}[{i}]", rule, entry))
        elif not _BARE_BINARY.fullmatch(entry):
            rule = "must be a bare binary name (letters, digits, '.', '_', '+', '-'; no spaces or arguments)"
            found.append(diagnostic("E-CAP-013", f"{path}[{i}]", rule, entry))
    return found


def _env_rules(env: dict | None, prefix: str) -> list[Diagnostic]:
    allow = env.get("allow") if env is not None else None
    if not isinstance(allow, list):
        return []
    rule = "looks like a credential; credential-shaped variables are never passed to a guest"
    return [
        diagnostic("W-CAP-001", f"{prefix}.allow[{i}]", rule, name)
        for i, name in enumerate(allow)
        if isinstance(name, str) and looks_like_credential(name)
    ]


def _limit_rules(limits: dict | None, prefix: str) -> list[Diagnostic]:
    if limits is None:
        return []
    return [
        diagnostic("E-CAP-007", f"{prefix}.{key}", "must be a positive integer", value)
        for key, value in limits.items()
        if key in ("memory_bytes", "table_elements", "instances", "deadline_seconds")
        and _is_number(value)
        and value <= 0
    ]


# --------------------------------------------------------------------------- rules: inference


def _rule_inference(ctx: _Context) -> list[Diagnostic]:
    inference = ctx.section("inference")
    if inference is None:
        return []
    if inference.get("transport") == "process":
        return (_process_rules(inference) + _single_source(inference, "inference", _PROMPT_SOURCES)
                + _prompt_artifact_rules(ctx, inference))
    found = _endpoint_rules(inference.get("endpoint"))
    found += _single_source(inference, "inference", _PROMPT_SOURCES)
    found += _driver_rules(ctx, inference)
    found += _prompt_artifact_rules(ctx, inference)
    compaction = _section(inference, "compaction")
    if compaction is not None:
        found += _single_source(compaction, "inference.compaction", _PROMPT_SOURCES[:2])
        threshold = compaction.get("threshold")
        if _is_number(threshold) and not 0 < threshold <= 1:
            rule = "must be a fraction of context.max_tokens in (0, 1]"
            found.append(diagnostic("E-INF-009", "inference.compaction.threshold", rule, threshold))
    return found


def _process_rules(inference: dict) -> list[Diagnostic]:
    """`transport: process` (upstream's parser): a CLI agent drives, so the fields of a WASM
    driver's request are refused, each by name; `command` is required."""
    found: list[Diagnostic] = []
    rule = "is not valid with transport: process (the CLI agent talks to its own provider)"
    if "driver" in inference or "provider" in inference:
        found.append(diagnostic("E-INF-011", "inference.driver.artifact", rule))
    for key in ("endpoint", "api_key"):
        value = inference.get(key)
        if value is not None and not (isinstance(value, str) and not value.strip()):
            found.append(diagnostic("E-INF-011", f"inference.{key}", rule,
                                    rendered=REDACTED if key == "api_key" else None))
    if "max_tokens" in inference:
        found.append(diagnostic("E-INF-011", "inference.max_tokens",
                                "is not valid with transport: process (no driver payload is built)"))
    command = inference.get("command")
    if not isinstance(command, str) or not command.strip():
        found.append(diagnostic("E-MAN-001", "inference.command",
                                "is required with transport: process (the CLI agent to spawn: claude, codex)"))
    return found


def _endpoint_rules(endpoint: Any) -> list[Diagnostic]:
    if not isinstance(endpoint, str):
        return []
    problem = endpoint_problem(endpoint)
    if problem is None:
        return []
    code, rule = problem
    return [diagnostic(code, "inference.endpoint", rule, _hide_userinfo(endpoint))]


def endpoint_problem(endpoint: str) -> tuple[str, str] | None:
    """(code, rule) when `endpoint` is not https:// or http:// to a loopback host."""
    allowed = "use https://host (plain http:// only to localhost, 127.0.0.0/8 or ::1)"
    if "://" not in endpoint:
        return "E-INF-001", f"has no scheme; {allowed}"
    parts = urlsplit(endpoint)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        return "E-INF-003", f"scheme {parts.scheme!r} is not allowed; {allowed}"
    try:
        host, _ = parts.hostname, parts.port
    except ValueError:
        return "E-INF-003", f"has an invalid port; {allowed}"
    if not host:
        return "E-INF-003", f"names no host; {allowed}"
    if scheme == "http" and not is_loopback_host(host):
        return "E-INF-002", (
            "plain http:// is allowed only to a loopback host (localhost, 127.0.0.0/8, ::1); "
            "use https://"
        )
    return None


def is_loopback_host(host: str) -> bool:
    """`localhost`, any address in 127.0.0.0/8, or `::1`."""
    host = host.strip("[]").rstrip(".").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _single_source(section: dict, prefix: str, keys: tuple[str, ...]) -> list[Diagnostic]:
    present = [k for k in keys if section.get(k) is not None]
    if len(present) < 2:
        return []
    rule = f"at most one of {', '.join(keys)} may be set; this manifest sets {', '.join(present)}"
    return [diagnostic("E-INF-006", f"{prefix}.{present[1]}", rule, present)]


def driver_name(inference: dict) -> tuple[Any, str]:
    """The driver artifact's name and the path it came from: `driver.artifact` wins over its older
    spelling `provider.artifact`, as upstream reads them."""
    name = (_section(inference, "driver") or {}).get("artifact")
    if name is None and (_section(inference, "provider") or {}).get("artifact") is not None:
        return _section(inference, "provider")["artifact"], "inference.provider.artifact"  # type: ignore[index]
    return name, "inference.driver.artifact"


def _driver_rules(ctx: _Context, inference: dict) -> list[Diagnostic]:
    name, path = driver_name(inference)
    if name is None and "driver" not in inference and "provider" not in inference:
        rule = ("an inference block needs a driver: declare a runtime: driver artifact and name it in "
                "inference.driver.artifact (or remove the block for a script capsule)")
        return [diagnostic("E-INF-010", "inference.driver.artifact", rule)]
    if not isinstance(name, str) or not name:
        return []
    declared = [a for _, a in ctx.artifacts() if a.get("name") == name]
    if any(a.get("runtime") == "driver" for a in declared):
        return []
    if declared:
        runtime = declared[0].get("runtime", "tool")
        rule = f"must name a runtime: driver artifact; {name!r} is declared with runtime {runtime!r}"
    else:
        rule = "must name an artifact declared in artifacts[] with runtime: driver; none has this name"
    return [diagnostic("E-INF-008", path, rule, name)]


def _prompt_artifact_rules(ctx: _Context, inference: dict) -> list[Diagnostic]:
    name = inference.get("system_prompt_artifact")
    declared = [a for _, a in ctx.artifacts() if a.get("name") == name] if isinstance(name, str) else []
    if not declared:
        return []
    art = declared[0]
    payload = art.get("prompt_payload")
    allowed = payload if isinstance(payload, bool) else art.get("runtime") == "skill"
    if allowed:
        return []
    rule = ("names an artifact that is not a prompt payload; set prompt_payload: true on it "
            "(the default only for a skill)")
    return [diagnostic("E-INF-012", "inference.system_prompt_artifact", rule, name)]


# --------------------------------------------------------------------------- rules: observability


def _rule_observability(ctx: _Context) -> list[Diagnostic]:
    endpoint = (ctx.section("observability") or {}).get("otel_endpoint")
    if not isinstance(endpoint, str):
        return []
    parts = urlsplit(endpoint)
    if parts.scheme.lower() in ("http", "https") and parts.netloc:
        return []
    rule = "must be an OTLP/HTTP base URL starting with http:// or https://"
    return [diagnostic("E-MAN-008", "observability.otel_endpoint", rule, _hide_userinfo(endpoint))]


EVAL_HOOK = "murmur-hook-eval"


def _rule_eval(ctx: _Context) -> list[Diagnostic]:
    """`observability.eval`: types and ranges are the models'; here what would make it score
    nothing or less than the author expects (warnings: upstream's hook notes them and goes on)."""
    block = ctx.section("observability", "eval")
    if block is None:
        return []
    scorers = block.get("scorers")
    found: list[Diagnostic] = []
    if scorers is None or scorers == []:
        found.append(diagnostic("W-EVAL-003", "observability.eval.scorers", "no scorers: the eval hook writes nothing",
                                rendered=render_value(scorers)))
    names: dict[str, int] = {}
    for i, scorer in enumerate(scorers if isinstance(scorers, list) else []):
        if not isinstance(scorer, dict):
            continue
        kind, path = scorer.get("type"), f"observability.eval.scorers[{i}]"
        if isinstance(kind, str) and kind and kind not in SCORER_TYPES:
            rule = f"unknown scorer type, skipped; one of {', '.join(SCORER_TYPES)}"
            found.append(diagnostic("W-EVAL-001", f"{path}.type", rule, kind))
        elif kind == "llm_judge":
            found.append(diagnostic("W-EVAL-002", f"{path}.type", "llm_judge is parsed but scores nothing (upstream's too)",
                                    kind))
        label = scorer.get("name") if isinstance(scorer.get("name"), str) else kind
        if isinstance(label, str) and label in names:
            rule = f"the same name as scorers[{names[label]}]; dataset_run keeps one score per name"
            found.append(diagnostic("W-EVAL-005", f"{path}.name", rule, label))
        elif isinstance(label, str):
            names[label] = i
    hooks = [a.get("name") for _i, a in ctx.artifacts() if a.get("runtime") == "hook"]
    if EVAL_HOOK not in hooks:
        rule = f"no {EVAL_HOOK} hook among the artifacts: nothing scores the session or writes eval.jsonl"
        found.append(diagnostic("W-EVAL-004", "observability.eval", rule, rendered="{...}"))
    return found


_RULES = (_rule_identity, _rule_artifacts, _rule_capabilities, _rule_network, _rule_inference, _rule_lifecycle,
          _rule_observability, _rule_eval)


# --------------------------------------------------------------------------- resolution


def _resolve(ctx: _Context) -> tuple[dict, list[Diagnostic]]:
    """A copy of the raw mapping with the api key and prompt files resolved."""
    resolved = copy.deepcopy(ctx.raw)
    inference = _section(resolved, "inference")
    if inference is None:
        return resolved, []
    name, path = driver_name(inference)
    if path == "inference.provider.artifact":
        inference["driver"] = {**(_section(inference, "driver") or {}), "artifact": name}
    found = _resolve_api_key(inference, ctx.env)
    found += _resolve_prompt_file(inference, "inference", ctx.manifest_dir)
    compaction = _section(inference, "compaction")
    if compaction is not None:
        found += _resolve_prompt_file(compaction, "inference.compaction", ctx.manifest_dir)
    return resolved, found


def _resolve_api_key(inference: dict, env: Mapping[str, str]) -> list[Diagnostic]:
    key = inference.get("api_key")
    if not isinstance(key, str):
        return []
    match = _ENV_REF.fullmatch(key)
    if match:
        value = env.get(match.group(1))
        if value:
            inference["api_key"] = value
            return []
        inference["api_key"] = None
        rule = f"environment variable {match.group(1)} is unset or empty; export it before launch"
        return [diagnostic("E-INF-004", API_KEY_PATH, rule, rendered=repr(key))]
    if _ENV_REF_LIKE.fullmatch(key):
        inference["api_key"] = None
        rule = "an environment reference must be ${UPPER_SNAKE_NAME}"
        return [diagnostic("E-INF-005", API_KEY_PATH, rule, rendered=repr(key))]
    return []  # a literal key


def _resolve_prompt_file(section: dict, prefix: str, manifest_dir: Path) -> list[Diagnostic]:
    name = section.get("system_prompt_file")
    if not isinstance(name, str):
        return []
    file = manifest_dir / name
    try:
        text = read_text_file(file)
    except (UnreadableFile, OSError) as exc:
        reason = exc.reason if isinstance(exc, UnreadableFile) else exc.strerror
        rule = f"cannot read {file} ({reason}); the path is relative to the manifest directory"
        return [diagnostic("E-INF-007", f"{prefix}.system_prompt_file", rule, name)]
    if section.get("system_prompt") is None:
        section["system_prompt"] = text
    return []


# --------------------------------------------------------------------------- the model pass


def _build(resolved: dict) -> tuple[CapsuleManifest | None, list[Diagnostic]]:
    try:
        return CapsuleManifest.model_validate(resolved), []
    except ValidationError as exc:
        return None, [_from_pydantic(err) for err in exc.errors()]


_RANGE_ERRORS = frozenset({"greater_than", "greater_than_equal", "less_than", "less_than_equal"})
_TYPE_RULES = {
    "model_type": "must be a mapping",
    "dict_type": "must be a mapping",
    "list_type": "must be a list",
    "string_type": "must be a string",
    "int_type": "must be an integer",
    "float_type": "must be a number",
    "bool_type": "must be true or false",
}


def _from_pydantic(err: Any) -> Diagnostic:
    path = render_loc(err["loc"])
    kind = err["type"]
    if kind == "missing":
        return diagnostic("E-MAN-001", path, "is required")
    code, rule = _classify(kind, str(err["msg"]))
    shown = REDACTED if _may_hold_secret(path) else render_value(err.get("input"))
    return diagnostic(code, path, rule, rendered=shown)


def _classify(kind: str, msg: str) -> tuple[str, str]:
    if kind == "string_too_short":
        return "E-MAN-001", "must not be empty"
    rule = _TYPE_RULES.get(kind) or msg.replace("Input should be", "must be", 1)
    if kind == "literal_error":
        return "E-MAN-007", rule
    if kind in _RANGE_ERRORS:
        return "E-MAN-006", rule
    return "E-MAN-003", rule


def _may_hold_secret(path: str) -> bool:
    """The api key itself, anything inside it, or a block that contains it (`inference`)."""
    return path in (ROOT, "inference") or path == API_KEY_PATH or path.startswith(API_KEY_PATH + "[")


def render_loc(loc: Iterable[Any]) -> str:
    """('artifacts', 2, 'capabilities') -> 'artifacts[2].capabilities'."""
    path = ""
    for part in loc:
        path = f"{path}[{part}]" if isinstance(part, int) else _join(path, part)
    return path or ROOT


# --------------------------------------------------------------------------- unknown keys

# Fields upstream murmur documents (shared/spec/upstream-manifest-cli.md) that murmurd does not
# implement: each gets a W-MAN-002 warning naming what it does upstream, in `validate` and at
# launch. A block murmurd does not model (`capabilities.spawn`) is one warning for the whole block.
UPSTREAM_UNIMPLEMENTED: dict[str, str] = {
    "mur_version": "pins the mur release the capsule was written for (upstream warns when it differs)",
    "capabilities.spawn": "lets a capsule component spawn native subprocesses; murmurd has no spawn interface",
    "capabilities.shell.staged_runtime": "binds a pinned host tree into a sealed root; murmurd never builds one",
    "artifacts[].capabilities.containment": "is inert on an artifact upstream too (capsule-wide only)",
    "artifacts[].capabilities.resources": "is inert on an artifact (capabilities.resources is capsule-wide)",
    "artifacts[].capabilities.spawn": "lets a component spawn native subprocesses; murmurd has no spawn interface",
}


def unknown_keys(model: type[BaseModel], raw: dict, prefix: str = "") -> list[Diagnostic]:
    """A warning for every key of `raw` (recursively) that `model` does not declare."""
    found: list[Diagnostic] = []
    fields = model.model_fields
    for key, value in raw.items():
        path = _join(prefix, key)
        field = fields.get(key) if isinstance(key, str) else None
        upstream = upstream_field(path)
        if upstream is not None:  # upstream's field, known or not to the models: named, never W-MAN-001
            found.append(diagnostic("W-MAN-002", path, f"{upstream}; murmurd ignores it", rendered=render_value(value)))
            if field is None:
                continue
        if field is None:
            found.append(_unknown_key(path, key, prefix, list(fields)))
            continue
        nested, many = _nested_model(field.annotation)
        if nested is None:
            continue
        if many and isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, dict):
                    found += unknown_keys(nested, item, f"{path}[{i}]")
        elif not many and isinstance(value, dict):
            found += unknown_keys(nested, value, path)
    return found


def upstream_field(path: str) -> str | None:
    """What an upstream-documented field murmurd does not implement does upstream, or None."""
    return UPSTREAM_UNIMPLEMENTED.get(re.sub(r"\[\d+\]", "[]", path))


def _unknown_key(path: str, key: Any, prefix: str, known: list[str]) -> Diagnostic:
    where = prefix or "the manifest"
    rule = f"unknown key in {where}, ignored; known keys: {', '.join(known)}"
    close = difflib.get_close_matches(str(key), known, n=1)
    if close:
        rule += f"; did you mean {close[0]!r}?"
    return diagnostic("W-MAN-001", path, rule, rendered=repr(str(key)))


def _nested_model(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The model inside `M`, `M | None` or `list[M]`, and whether it is a list."""
    origin = get_origin(annotation)
    if origin is list:
        inner, _ = _nested_model(get_args(annotation)[0])
        return inner, True
    if origin in (Union, types.UnionType):
        for arg in get_args(annotation):
            inner, many = _nested_model(arg)
            if inner is not None:
                return inner, many
        return None, False
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    return None, False


__all__ = [
    "check_capabilities",
    "endpoint_problem",
    "is_loopback_host",
    "load_capsule",
    "network_entry_problem",
    "render_loc",
    "unknown_keys",
    "validate_manifest",
]
