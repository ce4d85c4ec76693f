"""The hook contract: which `hook-output` arm each handler commits, checked at staging.

The seed's table ("What each handler can commit") is the source of truth:

| Handler                            | Committed arm     |
|------------------------------------|-------------------|
| on-stage                           | write-manifests   |
| on-inference                       | artifact          |
| on-compaction                      | replace-context   |
| on-task-end                        | reopen-task       |
| on-task-start                      | seed-context      |
| on-shell, on-tool-call             | deny (decision point only) |
| on-session-start, on-session-end   | none              |

A hook artifact declares in its *own* `murmur.yaml` a `binding` (one handler), an
`execution_mode` (`blocking` default | `async`) and a `commit_policy` (`none` default). Every
binding admits `none`; a hook with no binding receives every event and admits any
policy but `deny` (E-HOOK-007: only the on-shell/on-tool-call decision point honours it). `async` requires `commit_policy: none`, and `on-stage` is never async.

`COMMITTED_ARM` doubles as the dispatch table: the runtime commits `COMMITTED_ARM[handler]` and
treats any other non-`none` arm as a loud but non-fatal fault.
"""

from __future__ import annotations

from typing import Literal

from murmurd.manifest.artifact import ArtifactManifest
from murmurd.manifest.diagnostics import CODES, Diagnostic, render_value

HookBinding = Literal[
    "on-stage",
    "on-session-start",
    "on-task-start",
    "on-inference",
    "on-tool-call",
    "on-shell",
    "on-compaction",
    "on-task-end",
    "on-session-end",
]
CommitPolicy = Literal[
    "none",
    "write-manifests",
    "artifact",
    "replace-context",
    "reopen-task",
    "seed-context",
    "deny",
]
ExecutionMode = Literal["blocking", "async"]

# Handler -> the one arm the runtime commits for it (None: only `none`, which is always silent).
COMMITTED_ARM: dict[str, str | None] = {
    "on-stage": "write-manifests",
    "on-session-start": None,
    "on-task-start": "seed-context",
    "on-inference": "artifact",
    "on-tool-call": "deny",
    "on-shell": "deny",
    "on-compaction": "replace-context",
    "on-task-end": "reopen-task",
    "on-session-end": None,
}

BINDINGS: tuple[str, ...] = tuple(COMMITTED_ARM)
COMMIT_POLICIES: tuple[str, ...] = (
    "none",
    "write-manifests",
    "artifact",
    "replace-context",
    "reopen-task",
    "seed-context",
    "deny",
)
EXECUTION_MODES: tuple[str, ...] = ("blocking", "async")

# Handlers whose events are dispatched twice (decision point, then observation).
GATED_HANDLERS: frozenset[str] = frozenset({"on-shell", "on-tool-call"})


def honored_policies(binding: str | None) -> frozenset[str]:
    """The commit policies a hook with this binding may declare."""
    if binding is None:
        return frozenset(COMMIT_POLICIES)
    arm = COMMITTED_ARM[binding]
    return frozenset({"none"} if arm is None else {"none", arm})


def policy_allowed(binding: str | None, policy: str) -> bool:
    return policy in honored_policies(binding)


def receives(binding: str | None, handler: str) -> bool:
    """Whether a hook with this binding is dispatched for `handler` at all. The seed: a hook
    with no binding receives every event (on-stage included; runtime-notes §4 says all but
    on-stage, and the seed wins)."""
    return binding is None or handler == binding


def gets_decision_point(binding: str | None, policy: str) -> bool:
    """Only a `deny` hook bound to on-shell/on-tool-call sees the before-the-call dispatch."""
    return binding in GATED_HANDLERS and policy == "deny"


def check_hook_contract(manifest: ArtifactManifest, *, path_prefix: str = "") -> list[Diagnostic]:
    """Check a hook artifact's own `binding` / `execution_mode` / `commit_policy`.

    Returns every finding (empty when the contract holds). `path_prefix` is prepended to the field
    paths, e.g. `artifacts[2]` when the caller reports against the capsule manifest.
    """
    if manifest.runtime != "hook":
        return _stray_contract_fields(manifest, path_prefix)
    who = f"hook {manifest.name!r} {manifest.version}"
    found = _unknown_values(manifest, who, path_prefix)
    if found:
        return found  # the pair rules below are meaningless with an unknown value
    return _pair_rules(manifest, who, path_prefix)


def _path(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _diag(code: str, path: str, value: str, message: str) -> Diagnostic:
    return Diagnostic(code, CODES[code].severity, path, render_value(value), message)


def _unknown_values(m: ArtifactManifest, who: str, prefix: str) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    if m.binding is not None and m.binding not in COMMITTED_ARM:
        out.append(_diag(
            "E-HOOK-001", _path(prefix, "binding"), m.binding,
            f"{who}: binding {m.binding!r} is not a hook handler; "
            f"expected one of {_quoted(BINDINGS)} (or no binding for every event)",
        ))
    if m.commit_policy not in COMMIT_POLICIES:
        out.append(_diag(
            "E-HOOK-002", _path(prefix, "commit_policy"), m.commit_policy,
            f"{who}: commit_policy {m.commit_policy!r} is not a hook-output arm; "
            f"expected one of {_quoted(COMMIT_POLICIES)}",
        ))
    if m.execution_mode not in EXECUTION_MODES:
        out.append(_diag(
            "E-HOOK-003", _path(prefix, "execution_mode"), m.execution_mode,
            f"{who}: execution_mode {m.execution_mode!r} is not one of {_quoted(EXECUTION_MODES)}",
        ))
    return out


def _pair_rules(m: ArtifactManifest, who: str, prefix: str) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    if not policy_allowed(m.binding, m.commit_policy):
        out.append(_diag(
            "E-HOOK-004", _path(prefix, "commit_policy"), m.commit_policy,
            refusal_message(who, m.binding or "", m.commit_policy),
        ))
    if m.commit_policy == "deny" and m.binding is None:
        out.append(_diag("E-HOOK-007", _path(prefix, "commit_policy"), m.commit_policy, unconsulted_deny(who)))
    if m.execution_mode == "async" and m.binding == "on-stage":
        out.append(_diag(
            "E-HOOK-006", _path(prefix, "execution_mode"), m.execution_mode,
            f"{who}: binding 'on-stage' cannot be execution_mode 'async'; "
            "staging waits for on-stage, so it is always blocking",
        ))
    elif m.execution_mode == "async" and m.commit_policy != "none":
        out.append(_diag(
            "E-HOOK-005", _path(prefix, "execution_mode"), m.execution_mode,
            f"{who}: execution_mode 'async' requires commit_policy 'none', "
            f"not {m.commit_policy!r}; nothing waits for an async hook's return value",
        ))
    return out


def unconsulted_deny(who: str) -> str:
    """Why a `deny` hook without a binding is refused: it would never be asked."""
    bindings = " or ".join(repr(b) for b in sorted(GATED_HANDLERS))
    return (f"{who}: commit_policy 'deny' with no binding is never consulted: only a decision point "
            f"(before a shell command or a tool call runs) honours deny, and it reaches only a hook bound to "
            f"{bindings}; declare `binding: on-shell` or `binding: on-tool-call` (or commit_policy 'none')")


def refusal_message(who: str, binding: str, policy: str) -> str:
    """`hook 'audit' 0.2.0: binding 'on-stage' cannot commit 'reopen-task'; on-stage honors
    'write-manifests' (or 'none')`."""
    arm = COMMITTED_ARM[binding]
    honors = f"honors {arm!r} (or 'none')" if arm is not None else "honors only 'none'"
    return f"{who}: binding {binding!r} cannot commit {policy!r}; {binding} {honors}"


def _stray_contract_fields(m: ArtifactManifest, prefix: str) -> list[Diagnostic]:
    declared = [f for f in ("binding", "execution_mode", "commit_policy") if f in m.model_fields_set]
    return [
        _diag(
            "W-HOOK-001", _path(prefix, f), getattr(m, f),
            f"{_path(prefix, f)}: artifact {m.name!r} {m.version} is runtime {m.runtime!r}, "
            f"not 'hook'; {f} is ignored (got {render_value(getattr(m, f))})",
        )
        for f in declared
    ]


def _quoted(values: tuple[str, ...]) -> str:
    return ", ".join(repr(v) for v in values)
