"""Effective grants: what each component runs under, computed before launch (pure logic).

Tools and drivers start from the capsule's ceiling and may only narrow it with their entry's
`capabilities` (an entry outside the ceiling is dropped with a warning; `allow: []` narrows to
nothing). Hooks start from nothing and get exactly what their entry grants. Environment
variables pass only when allowed, never when credential-shaped or matched by `shell.strip_env`.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from murmurd.containment.host import probe_host
from murmurd.containment.plan import CLASSES, ContainmentPlan, floor_refusal, plan_containment, setting_from
from murmurd.containment.seccomp_filter import extras_from
from murmurd.host.egress import EgressPolicy, url_origin
from murmurd.manifest.capsule import (
    ArtifactCapabilities,
    ArtifactRef,
    Capabilities,
    CapsuleManifest,
    DEFAULT_HOOK_DEADLINE_SECONDS,
    Observability,
)
from murmurd.manifest.credentials import looks_like_credential


@dataclass(frozen=True)
class GrantLimits:
    memory_bytes: int
    table_elements: int
    instances: int
    deadline_seconds: int


@dataclass(frozen=True)
class Grant:
    """One component's effective capabilities. `filesystem` is relative to the workdir."""

    network: tuple[str, ...]
    filesystem: str | None
    shell: tuple[str, ...]
    env: tuple[str, ...]  # variable names that pass (values are read at call time)
    limits: GrantLimits

    def to_json(self) -> dict[str, Any]:
        return {
            "network": list(self.network),
            "filesystem": self.filesystem,
            "shell": list(self.shell),
            "env": list(self.env),
            "limits": vars(self.limits).copy(),
        }


@dataclass
class GrantSet:
    capsule: Grant
    components: dict[str, Grant] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "capsule": self.capsule.to_json(),
            "components": {name: g.to_json() for name, g in sorted(self.components.items())},
            "warnings": list(self.warnings),
        }


def env_names(allow: list[str], strip: list[str], host_env: Mapping[str, str]) -> tuple[str, ...]:
    """Host variables that pass: allowed (glob), present, not a credential by name or value, not stripped."""
    names = [
        name
        for name in sorted(host_env)
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in allow)
        and not looks_like_credential(name, host_env[name])
        and not any(fnmatch.fnmatchcase(name, pattern) for pattern in strip)
    ]
    return tuple(names)


def _scope(scope: str | None) -> str | None:
    if scope is None:
        return None
    normal = PurePosixPath(scope).as_posix()
    return "." if normal in ("", ".") else normal.rstrip("/")


def _within(inner: str, outer: str) -> bool:
    if outer == ".":
        return True
    return inner == outer or inner.startswith(outer + "/")


def capsule_grant(caps: Capabilities, host_env: Mapping[str, str]) -> Grant:
    """The ceiling: what the capsule's own `capabilities` block grants."""
    shell = caps.shell
    strip = shell.strip_env if shell else []
    limits = caps.limits
    return Grant(
        network=tuple(caps.network.allow),
        filesystem=_scope(caps.filesystem.scope) or ".",
        shell=tuple(shell.allow) if shell else (),
        env=env_names(caps.env.allow, strip, host_env),
        limits=GrantLimits(limits.memory_bytes, limits.table_elements, limits.instances, limits.deadline_for("capsule")),
    )


def _narrow_list(name: str, field_name: str, ceiling: tuple[str, ...], wanted: list[str] | None, warnings: list[str],
                 within: Callable[[str], bool] | None = None) -> tuple[str, ...]:
    """The entries of `wanted` the ceiling covers (`within`; by default: listed verbatim)."""
    if wanted is None:
        return ceiling
    covered = within or (lambda entry: entry in ceiling)
    kept = []
    for entry in wanted:
        if covered(entry):
            kept.append(entry)
        else:
            warnings.append(f"{name}: {field_name} entry {entry!r} is outside the capsule's grant; dropped")
    return tuple(kept)


def _narrow(
    name: str, ceiling: Grant, ceiling_env_patterns: list[str], own: ArtifactCapabilities | None, warnings: list[str]
) -> Grant:
    if own is None:
        return ceiling
    # A network entry is kept when every origin it lists is one the capsule's grant lists
    # (`http://h:8080` within `h:8080`), not only when it is spelled the same.
    network = _narrow_list(name, "network.allow", ceiling.network, own.network.allow if own.network else None, warnings,
                           EgressPolicy.from_allow(ceiling.network).covers)
    shell = _narrow_list(name, "shell.allow", ceiling.shell, own.shell.allow if own.shell else None, warnings)
    env = ceiling.env
    if own.env is not None:
        env = tuple(n for n in ceiling.env if any(fnmatch.fnmatchcase(n, p) for p in own.env.allow))
        for pattern in own.env.allow:
            if pattern not in ceiling_env_patterns:
                warnings.append(f"{name}: env.allow entry {pattern!r} is outside the capsule's grant; dropped")
    filesystem = ceiling.filesystem
    if own.filesystem is not None:
        wanted = _scope(own.filesystem.scope)
        if wanted is None:
            filesystem = None
        elif ceiling.filesystem is not None and _within(wanted, ceiling.filesystem):
            filesystem = wanted
        else:
            warnings.append(f"{name}: filesystem.scope {wanted!r} is outside the capsule's grant; dropped")
            filesystem = None
    limits = ceiling.limits
    if own.limits is not None:
        values = {}
        for key, ceiling_value in vars(ceiling.limits).items():
            wanted_value = getattr(own.limits, key)
            if wanted_value is not None and wanted_value > ceiling_value:
                warnings.append(f"{name}: limits.{key} {wanted_value} exceeds the capsule's {ceiling_value}; dropped")
                wanted_value = None
            values[key] = wanted_value if wanted_value is not None else ceiling_value
        limits = GrantLimits(**values)
    return Grant(network, filesystem, shell, env, limits)


def _hook_grant(ref: ArtifactRef, ceiling: Grant, host_env: Mapping[str, str]) -> Grant:
    own = ref.capabilities
    if own is None:
        return Grant((), None, (), (), _hook_limits(ceiling, None))
    return Grant(
        network=tuple(own.network.allow) if own.network else (),
        filesystem=_scope(own.filesystem.scope) if own.filesystem else None,
        shell=tuple(own.shell.allow) if own.shell else (),
        env=env_names(own.env.allow, own.shell.strip_env if own.shell else [], host_env) if own.env else (),
        limits=_hook_limits(ceiling, own),
    )


def _hook_limits(ceiling: Grant, own: ArtifactCapabilities | None) -> GrantLimits:
    overrides = own.limits if own is not None else None
    base = GrantLimits(
        ceiling.limits.memory_bytes, ceiling.limits.table_elements, ceiling.limits.instances, DEFAULT_HOOK_DEADLINE_SECONDS
    )
    if overrides is None:
        return base
    return GrantLimits(**{k: getattr(overrides, k) or v for k, v in vars(base).items()})


# Forwarded to every hook whatever its grant says (upstream does the same): where a hook sends
# spans of its own, which formation the capsule runs in, and which eval case (`murmurd eval run`).
HOOK_FORWARDED_ENV = ("MURMUR_OTEL_ENDPOINT", "MURMUR_FORMATION_ID", "MURMUR_CASE_ID")


def hook_env(observability: Observability, host_env: Mapping[str, str]) -> dict[str, str]:
    """The variables every hook sees: the manifest's `observability.otel_endpoint` (else the
    daemon's `MURMUR_OTEL_ENDPOINT`), the daemon's `MURMUR_FORMATION_ID` and `MURMUR_CASE_ID`,
    and with `observability.eval` its block as `MURMUR_EVAL_CONFIG` (JSON) and its
    `dataset_id` as `MURMUR_DATASET_ID`; each only when set."""
    values = {name: host_env.get(name, "") for name in HOOK_FORWARDED_ENV}
    if observability.otel_endpoint:
        values["MURMUR_OTEL_ENDPOINT"] = observability.otel_endpoint
    if observability.eval is not None:
        values["MURMUR_EVAL_CONFIG"] = observability.eval.model_dump_json(exclude_none=True)
        values["MURMUR_DATASET_ID"] = observability.eval.dataset_id or ""
    return {name: value for name, value in values.items() if value}


def compute_grants(manifest: CapsuleManifest, host_env: Mapping[str, str]) -> GrantSet:
    """Every component's effective grant, plus the warnings narrowing produced."""
    ceiling = capsule_grant(manifest.capabilities, host_env)
    grants = GrantSet(capsule=ceiling)
    for ref in manifest.artifacts:
        if ref.kind == "skill":
            continue
        if ref.kind == "hook":
            grants.components[ref.name] = _hook_grant(ref, ceiling, host_env)
        else:
            grants.components[ref.name] = _narrow(
                ref.name, ceiling, manifest.capabilities.env.allow, ref.capabilities, grants.warnings
            )
    return grants


def network_allows(url: str, allow: tuple[str, ...] | list[str]) -> bool:
    """Whether `url`'s origin (scheme, host, port) is one a `network.allow` entry lists
    (`murmurd.host.egress` has the forms); a path on `url` does not matter."""
    return EgressPolicy.from_allow(allow).allows(url_origin(url))


CONTAINMENT_CLASSES = CLASSES  # weakest first


def containment_plan(manifest: CapsuleManifest, env: Mapping[str, str]) -> ContainmentPlan:
    """What this host enforces on the capsule's shell children under the operator's
    `MURMURD_SHELL_CONFINEMENT` and `MURMURD_SECCOMP_ALLOW` (validated before staging: an unknown
    value is an error there). The composed root of `sealed` is built when the manifest declares it."""
    caps = manifest.capabilities
    runtime = tuple((d.path, d.list_dir) for grant in (caps.shell.interpreter_runtime if caps.shell else [])
                    for d in grant.dirs)
    return plan_containment(probe_host(), setting_from(env), caps.filesystem.workdir_exec,
                            declared=caps.containment or "advisory", unix_sockets=caps.network.unix_sockets,
                            runtime=runtime, seccomp_extra=extras_from(dict(env)))


def containment_floor(manifest: CapsuleManifest, flag: str | None = None) -> str:
    """The strongest of the manifest's `capabilities.containment` and `--containment` (a flag
    can only raise the floor); `advisory` when neither says anything."""
    declared = [c for c in (manifest.capabilities.containment, flag) if c is not None]
    return max(declared, key=CONTAINMENT_CLASSES.index, default="advisory")


def effective_grants(
    manifest: CapsuleManifest, grants: GrantSet, floor: str | None = None, env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """`session_start.effective_grants` in upstream's shape (what `mur run --explain-scope --json`
    prints), then murmurd's additions: `limits`, per-`components` grants and staging `warnings`.

    The containment is this host's (`containment_plan`), `enforcement_tier` the mechanisms the
    session really installs (`landlock+seccomp`, `mountns+pivot_root+landlock+seccomp`, or the
    parts of an advisory plan such as `netns+landlock`, `none`). `workdir_exec` reports whether
    workdir files can be executed; `unix_sockets` whether shell children may create AF_UNIX
    sockets (true unless the seccomp filter refuses them)."""
    caps = manifest.capabilities
    plan = containment_plan(manifest, os.environ if env is None else env)
    declared = floor or containment_floor(manifest)
    refusal = floor_refusal(declared, plan, probe_host(), subprocesses=bool(caps.shell and caps.shell.allow))
    reason = refusal[1] if refusal is not None else None
    head: dict[str, Any] = {
        "declared_containment": declared,
        "achieved_containment": plan.achieved,
        "floor_met": reason is None,
    }
    if reason is not None:
        head["shortfall_reason"] = reason
    return {
        **head,
        "enforcement_tier": plan.mechanism,
        "filesystem_scope": caps.filesystem.scope,
        "workdir_exec": plan.workdir_exec,
        "network_allow": list(caps.network.allow),
        "unix_sockets": plan.unix_sockets or not plan.seccomp,
        "shell_allow": list(caps.shell.allow) if caps.shell else [],
        "spawn_allow": [],
        "env_allow": list(caps.env.allow),
        "interpreter_runtime_grants": [grant.model_dump() for grant in
                                       (caps.shell.interpreter_runtime if caps.shell else [])],
        "staged_runtime_grants": [],
        "limits": vars(grants.capsule.limits).copy(),
        "components": {name: g.to_json() for name, g in sorted(grants.components.items())},
        "warnings": list(grants.warnings),
    }
