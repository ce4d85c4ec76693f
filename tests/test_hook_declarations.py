"""Issue 21, items 14-15: a hook policy its author declared but no decision point will honour.

Item 14: a `commit_policy: deny` hook with no binding is never consulted, so `validate` and
staging refuse it (E-HOOK-007) and name the bindings that would. Item 15: a hook given as a bare
`.wasm` runs as "every event, commit nothing": `validate` and every launch warn (W-HOOK-002); a
`murmur.yaml` beside the `.wasm` (what `murmurd build` leaves) supplies its contract, and then
the policy applies: the attack (a shell `rm` the policy hook denies) fails only then.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import EXAMPLES, ROOT
from hookkit import end_turn, tool_call
from loopkit import capsule_dir, local
from murmurd.manifest.writing import dump_yaml

POLICY = {"name": "policy-hook", "version": "0.1.0", "runtime": "hook", "execution_mode": "blocking",
          "commit_policy": "deny"}


@pytest.fixture(scope="module")
def policy_wasm(artifacts) -> Path:  # type: ignore[no-untyped-def]
    return artifacts.example("policy-hook")


def _murmurd(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "murmurd", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})


def _validate(capsule: Path) -> tuple[int, list[dict[str, Any]]]:
    proc = _murmurd("validate", str(capsule), "--json", "--no-env-file", cwd=capsule)
    return proc.returncode, json.loads(proc.stdout)["diagnostics"]


def _capsule(root: Path, hook_source: Path) -> Path:
    """A scripted capsule that runs `rm -f victim.txt` through its shell, guarded by the policy hook."""
    return capsule_dir(root, {
        "name": "guarded", "version": "0.1.0",
        "artifacts": [local("scripted-driver", "driver", EXAMPLES / "scripted-driver"),
                      {"name": "guard", "runtime": "hook", "source": str(hook_source), "local_source": True}],
        "capabilities": {"shell": {"allow": ["rm"]}},
        "inference": {"endpoint": "http://127.0.0.1:9", "model": "scripted", "max_turns": 4,
                      "driver": {"artifact": "scripted-driver", "config": {"responses": [
                          tool_call("c1", "rm", {"command": "-f victim.txt"}), end_turn("done")]}}},
    })


def _hook_dir(root: Path, wasm: Path, own: dict[str, Any] | None) -> Path:
    directory = root / "guard"
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(wasm, directory / "policy-hook.wasm")
    if own is not None:
        (directory / "murmur.yaml").write_text(dump_yaml(own))
    return directory


def _run(capsule: Path) -> subprocess.CompletedProcess[str]:
    return _murmurd("run", str(capsule), "--task", "clean up", "--no-env-file", cwd=capsule)


def _session_trace(capsule: Path) -> list[dict[str, Any]]:
    (session,) = sorted((capsule / "workdir").glob("ses_*"))
    return [json.loads(line) for line in (session / "trace.jsonl").read_text().splitlines()]


# -- item 14 ------------------------------------------------------------------------------------


def test_a_deny_hook_without_a_binding_is_refused_at_validate_and_staging(tmp_path: Path, policy_wasm: Path) -> None:
    hook = _hook_dir(tmp_path, policy_wasm, POLICY)  # deny, but bound to nothing: never consulted
    capsule = _capsule(tmp_path, hook)
    code, diagnostics = _validate(capsule)
    assert code == 1
    (refusal,) = [d for d in diagnostics if d["code"] == "E-HOOK-007"]
    assert refusal["severity"] == "error" and refusal["path"] == "artifacts[1].commit_policy"
    assert "'on-shell'" in refusal["message"] and "'on-tool-call'" in refusal["message"]
    launched = _run(capsule)
    assert launched.returncode == 1 and "E-HOOK-007" in launched.stderr and "binding: on-shell" in launched.stderr
    assert not (capsule / "workdir").exists()  # refused before anything ran

    (hook / "murmur.yaml").write_text(dump_yaml({**POLICY, "binding": "on-shell"}))  # what the author meant
    code, diagnostics = _validate(capsule)
    assert code == 0 and not [d for d in diagnostics if d["code"].startswith(("E-HOOK", "W-HOOK"))], diagnostics


# -- item 15 ------------------------------------------------------------------------------------


def test_a_bare_wasm_hook_is_warned_and_a_manifest_beside_it_supplies_its_contract(
        tmp_path: Path, policy_wasm: Path) -> None:
    bare = _hook_dir(tmp_path / "bare", policy_wasm, None)
    capsule = _capsule(tmp_path / "bare", bare / "policy-hook.wasm")
    code, diagnostics = _validate(capsule)
    assert code == 0
    (warning,) = [d for d in diagnostics if d["code"] == "W-HOOK-002"]
    assert warning["severity"] == "warning" and warning["path"] == "artifacts[1].source"
    assert "commits nothing" in warning["message"] and "name: policy-hook" in warning["message"]
    launched = _run(capsule)
    assert launched.returncode == 0, launched.stderr
    assert "warning W-HOOK-002" in launched.stderr  # every launch says it
    trace = _session_trace(capsule)
    assert not [e for e in trace if e["event_type"] == "call_denied"]
    assert [Path(e["binary"]).name for e in trace if e["event_type"] == "shell"] == ["rm"]  # the policy never applied: rm ran

    beside = _hook_dir(tmp_path / "built", policy_wasm, {**POLICY, "binding": "on-shell"})  # as `murmurd build` leaves
    capsule = _capsule(tmp_path / "built", beside / "policy-hook.wasm")
    code, diagnostics = _validate(capsule)
    assert code == 0 and not [d for d in diagnostics if d["code"].startswith(("E-HOOK", "W-HOOK"))], diagnostics
    launched = _run(capsule)
    assert launched.returncode == 0 and "W-HOOK-002" not in launched.stderr, launched.stderr
    denied = [e for e in _session_trace(capsule) if e["event_type"] == "call_denied"]
    assert [(e["hook_name"], e["kind"]) for e in denied] == [("guard", "shell")]
    assert "rm is not allowed" in denied[0]["reason"]
    assert not [e for e in _session_trace(capsule) if e["event_type"] == "shell"]  # rm never ran

    unbound = _hook_dir(tmp_path / "unbound", policy_wasm, POLICY)  # a manifest beside it is checked too
    code, diagnostics = _validate(_capsule(tmp_path / "unbound", unbound / "policy-hook.wasm"))
    assert code == 1 and [d["code"] for d in diagnostics if d["code"].startswith("E-HOOK")] == ["E-HOOK-007"]
