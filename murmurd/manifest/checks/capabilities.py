"""`capabilities` (capsule-wide, and narrowed per artifact): network, filesystem scope, shell, env, limits."""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from murmurd.manifest.checks.context import Context, is_number, section
from murmurd.manifest.checks.network import network_rules
from murmurd.manifest.credentials import looks_like_credential
from murmurd.manifest.diagnostics import Diagnostic, diagnostic

_BARE_BINARY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]*")


def rule_capabilities(ctx: Context) -> list[Diagnostic]:
    caps = ctx.section("capabilities")
    found = check_capabilities(caps, "capabilities") if caps is not None else []
    return found



def check_capabilities(caps: dict, prefix: str, *, narrowing: bool = False) -> list[Diagnostic]:
    """Syntax rules of a `capabilities` block.

    `narrowing` marks a per-artifact block, where `shell: {allow: []}` is meaningful (it narrows
    the artifact to no shell) rather than a mistake.
    """
    return (
        network_rules(section(caps, "network"), f"{prefix}.network")
        + _filesystem_rules(section(caps, "filesystem"), f"{prefix}.filesystem")
        + _shell_rules(caps, prefix, narrowing)
        + _env_rules(section(caps, "env"), f"{prefix}.env")
        + _limit_rules(section(caps, "limits"), f"{prefix}.limits")
    )


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
        and is_number(value)
        and value <= 0
    ]

