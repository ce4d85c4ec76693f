"""The hook contract: binding x commit_policy x execution_mode, checked against the seed's table."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from murmurd.manifest.artifact import ArtifactManifest, load_artifact_manifest
from murmurd.manifest.hooks import (
    BINDINGS,
    COMMIT_POLICIES,
    check_hook_contract,
    gets_decision_point,
    receives,
)

# The seed's "What each handler can commit" table, written out independently of hooks.py.
HONORS: dict[str | None, set[str]] = {
    "on-stage": {"none", "write-manifests"},
    "on-session-start": {"none"},
    "on-task-start": {"none", "seed-context"},
    "on-inference": {"none", "artifact"},
    "on-tool-call": {"none", "deny"},
    "on-shell": {"none", "deny"},
    "on-compaction": {"none", "replace-context"},
    "on-task-end": {"none", "reopen-task"},
    "on-session-end": {"none"},
    # no binding: every event, any arm but deny, which only a decision point honours (E-HOOK-007)
    None: {"none", "write-manifests", "artifact", "replace-context", "reopen-task", "seed-context"},
}
POLICIES = sorted(HONORS[None] | {"deny"})


def hook(binding: str | None = None, policy: str = "none", mode: str = "blocking", **extra: str) -> ArtifactManifest:
    fields: dict = {"name": "audit", "version": "0.2.0", "runtime": "hook",
                    "commit_policy": policy, "execution_mode": mode, **extra}
    if binding is not None:
        fields["binding"] = binding
    return ArtifactManifest.model_validate(fields)


def test_table_covers_every_binding_and_policy() -> None:
    assert set(BINDINGS) == {b for b in HONORS if b is not None}
    assert set(COMMIT_POLICIES) == set(POLICIES)


@pytest.mark.parametrize(("binding", "policy"), list(itertools.product(list(HONORS), POLICIES)))
def test_binding_policy_pair(binding: str | None, policy: str) -> None:
    found = check_hook_contract(hook(binding, policy))
    if policy in HONORS[binding]:
        assert found == []
    elif binding is None:  # deny bound to nothing: never consulted
        assert [(d.code, d.severity, d.path) for d in found] == [("E-HOOK-007", "error", "commit_policy")]
        assert "'on-shell' or 'on-tool-call'" in found[0].message and "hook 'audit' 0.2.0" in found[0].message
    else:
        assert [(d.code, d.severity, d.path) for d in found] == [("E-HOOK-004", "error", "commit_policy")]
        message = found[0].message
        assert f"'{binding}'" in message and f"'{policy}'" in message
        assert "hook 'audit' 0.2.0" in message
        assert found[0].value == repr(policy)


def test_refusal_wording() -> None:
    (diag,) = check_hook_contract(hook("on-stage", "reopen-task"))
    assert diag.message == (
        "hook 'audit' 0.2.0: binding 'on-stage' cannot commit 'reopen-task'; "
        "on-stage honors 'write-manifests' (or 'none')"
    )


def test_refusal_wording_for_a_none_only_binding() -> None:
    (diag,) = check_hook_contract(hook("on-session-end", "deny"))
    assert diag.message == (
        "hook 'audit' 0.2.0: binding 'on-session-end' cannot commit 'deny'; on-session-end honors only 'none'"
    )


@pytest.mark.parametrize(("binding", "policy"), list(itertools.product(list(HONORS), POLICIES)))
def test_async_requires_none(binding: str | None, policy: str) -> None:
    codes = [d.code for d in check_hook_contract(hook(binding, policy, "async"))]
    if binding == "on-stage":
        assert "E-HOOK-006" in codes
    elif policy != "none":
        assert "E-HOOK-005" in codes
    else:
        assert codes == []


def test_on_stage_is_never_async() -> None:
    (diag,) = check_hook_contract(hook("on-stage", "none", "async"))
    assert (diag.code, diag.path) == ("E-HOOK-006", "execution_mode")
    assert "'on-stage'" in diag.message and "'async'" in diag.message


def test_async_with_a_policy_names_both() -> None:
    (diag,) = check_hook_contract(hook("on-task-end", "reopen-task", "async"))
    assert (diag.code, diag.path) == ("E-HOOK-005", "execution_mode")
    assert "'async'" in diag.message and "'reopen-task'" in diag.message


@pytest.mark.parametrize(("fields", "code", "path"), [
    ({"binding": "on-startup"}, "E-HOOK-001", "binding"),
    ({"policy": "rewrite"}, "E-HOOK-002", "commit_policy"),
    ({"mode": "background"}, "E-HOOK-003", "execution_mode"),
])
def test_unknown_values_are_errors(fields: dict, code: str, path: str) -> None:
    kwargs = {"binding": fields.get("binding"), "policy": fields.get("policy", "none"),
              "mode": fields.get("mode", "blocking")}
    (diag,) = check_hook_contract(hook(**kwargs))
    assert (diag.code, diag.severity, diag.path) == (code, "error", path)
    assert "hook 'audit' 0.2.0" in diag.message and path in diag.message


def test_every_unknown_value_is_reported() -> None:
    found = check_hook_contract(hook("on-startup", "rewrite", "background"))
    assert [d.code for d in found] == ["E-HOOK-001", "E-HOOK-002", "E-HOOK-003"]


def test_path_prefix() -> None:
    (diag,) = check_hook_contract(hook("on-stage", "deny"), path_prefix="artifacts[3]")
    assert diag.path == "artifacts[3].commit_policy"


def test_non_hook_with_contract_fields_is_a_warning() -> None:
    tool = ArtifactManifest.model_validate({"name": "t", "version": "1.0.0", "binding": "on-stage"})
    (diag,) = check_hook_contract(tool)
    assert (diag.code, diag.severity, diag.path) == ("W-HOOK-001", "warning", "binding")
    assert check_hook_contract(ArtifactManifest.model_validate({"name": "t", "version": "1.0.0"})) == []


def test_loaded_from_the_hooks_own_manifest(tmp_path: Path) -> None:
    (tmp_path / "murmur.yaml").write_text(
        "name: audit\nversion: 0.2.0\nruntime: hook\nbinding: on-stage\ncommit_policy: reopen-task\n",
        encoding="utf-8",
    )
    manifest = load_artifact_manifest(tmp_path / "murmur.yaml")
    assert (manifest.binding, manifest.execution_mode, manifest.commit_policy) == (
        "on-stage", "blocking", "reopen-task")
    assert [d.code for d in check_hook_contract(manifest)] == ["E-HOOK-004"]


def test_defaults() -> None:
    manifest = ArtifactManifest.model_validate({"name": "h", "version": "1", "runtime": "hook"})
    assert (manifest.binding, manifest.execution_mode, manifest.commit_policy) == (None, "blocking", "none")
    assert check_hook_contract(manifest) == []
    # the builder's extra keys are still allowed
    assert ArtifactManifest.model_validate({"name": "h", "version": "1", "world": "hook", "x": 1}).world == "hook"


def test_dispatch_helpers() -> None:
    assert receives(None, "on-task-end") and receives(None, "on-stage")  # the seed: every event
    assert receives("on-stage", "on-stage") and not receives("on-stage", "on-task-end")
    assert gets_decision_point("on-shell", "deny") and gets_decision_point("on-tool-call", "deny")
    assert not gets_decision_point("on-shell", "none") and not gets_decision_point(None, "deny")
