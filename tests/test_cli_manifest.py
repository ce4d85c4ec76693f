"""`murmurd validate` and `murmurd explain`, run as real subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

MIB = 1024 * 1024


def _murmurd(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "murmurd", *args], capture_output=True, text=True, timeout=60,
        env={**os.environ, **(env or {})},
    )


def _manifest(tmp_path: Path, data: dict) -> Path:
    (tmp_path / "murmur.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return tmp_path


GRANTED = {
    "name": "granted",
    "version": "1.0.0",
    "capabilities": {
        "network": {"allow": ["https://api.example.com", "example.org:8443"]},
        "filesystem": {"scope": "data"},
        "shell": {"allow": ["cat", "ls"], "strip_env": ["MURMUR_DEMO_HIDDEN*"]},
        "env": {"allow": ["LANG", "MURMUR_DEMO_*", "GITHUB_TOKEN"]},
        "limits": {"memory_bytes": 256 * MIB},
    },
    "artifacts": [
        {"name": "narrow", "version": "0.1.0", "capabilities": {
            "network": {"allow": ["https://api.example.com", "https://evil.example"]},
            "filesystem": {"scope": "data/sub"},
            "env": {"allow": ["LANG"]},
            "shell": {"allow": []},
            "limits": {"memory_bytes": 128 * MIB, "deadline_seconds": 9999},
        }},
        {"name": "plain", "version": "0.1.0"},
        {"name": "audit", "version": "0.1.0", "runtime": "hook",
         "capabilities": {"network": {"allow": ["hooks.example.com"]}}},
        {"name": "quiet", "version": "0.1.0", "runtime": "hook"},
        {"name": "notes", "version": "0.1.0", "runtime": "skill"},
        {"name": "drv", "version": "0.1.0", "runtime": "driver"},
    ],
    "inference": {"endpoint": "https://api.example.com", "model": "m", "driver": {"artifact": "drv"}},
}


def test_explain_json_matches_the_expected_grant_set(tmp_path: Path) -> None:
    capsule = _manifest(tmp_path, GRANTED)
    env = {"LANG": "C.UTF-8", "MURMUR_DEMO_A": "1", "MURMUR_DEMO_HIDDEN_B": "2", "GITHUB_TOKEN": "ghp_secret"}
    proc = _murmurd("explain", str(capsule), "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    ceiling_limits = {"memory_bytes": 256 * MIB, "table_elements": 100000, "instances": 1000, "deadline_seconds": 600}
    ceiling = {
        "network": ["https://api.example.com", "example.org:8443"],
        "filesystem": "data",
        "shell": ["cat", "ls"],
        "env": ["LANG", "MURMUR_DEMO_A"],
        "limits": ceiling_limits,
    }
    explained = json.loads(proc.stdout)
    assert explained.pop("containment")["declared"] == "advisory"  # the host's tier: tests/test_containment.py
    assert explained == {
        "capsule": ceiling,
        "components": {
            "audit": {"network": ["hooks.example.com"], "filesystem": None, "shell": [], "env": [],
                      "limits": {**ceiling_limits, "deadline_seconds": 30}},
            "narrow": {"network": ["https://api.example.com"], "filesystem": "data/sub", "shell": [],
                       "env": ["LANG"], "limits": {**ceiling_limits, "memory_bytes": 128 * MIB}},
            "plain": ceiling,
            "drv": ceiling,
            "quiet": {"network": [], "filesystem": None, "shell": [], "env": [],
                      "limits": {**ceiling_limits, "deadline_seconds": 30}},
        },
        "warnings": [
            "narrow: network.allow entry 'https://evil.example' is outside the capsule's grant; dropped",
            "narrow: limits.deadline_seconds 9999 exceeds the capsule's 600; dropped",
        ],
    }
    assert "ghp_secret" not in proc.stdout


def test_validate_exits_zero_for_a_valid_manifest(tmp_path: Path) -> None:
    # GRANTED's artifacts come from no source a launch could resolve (issue 25: validate says so)
    named = _murmurd("validate", str(_manifest(tmp_path, GRANTED)), "--json")
    assert named.returncode == 1
    unresolvable = {d["path"] for d in json.loads(named.stdout)["diagnostics"] if d["code"] == "E-REG-001"}
    assert unresolvable == {f"artifacts[{i}].name" for i in range(len(GRANTED["artifacts"]))}
    local = {**GRANTED, "artifacts": [{**a, "source": f"./{a['name']}", "local_source": True}
                                      for a in GRANTED["artifacts"]]}
    proc = _murmurd("validate", str(_manifest(tmp_path, local)))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_validate_reports_every_error_as_json_and_exits_one(tmp_path: Path) -> None:
    capsule = _manifest(tmp_path, {"version": "1", "inference": {"endpoint": "http://example.com"}, "surprise": 1})
    proc = _murmurd("validate", str(capsule), "--json")
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    found = {(d["code"], d["path"]) for d in report["diagnostics"]}
    assert ("E-MAN-001", "name") in found
    assert ("E-INF-002", "inference.endpoint") in found
    assert ("W-MAN-001", "surprise") in found


def test_explain_refuses_an_invalid_manifest_with_the_errors(tmp_path: Path) -> None:
    proc = _murmurd("explain", str(_manifest(tmp_path, {"name": "x"})))
    assert proc.returncode == 1
    assert "version" in proc.stderr


# Hostile manifest files: each is answered with one diagnostic, never a traceback or a hang.
HOSTILE_MANIFESTS = {
    "deeply-nested-flow-yaml": ("name: x\nversion: '1'\nextra: " + "[" * 5000 + "]" * 5000 + "\n",
                                "E-MAN-010", "nested deeper than 64 levels"),
    "a-5000-digit-integer": ("name: x\nversion: '1'\nextra: " + "7" * 5000 + "\n",
                             "E-MAN-010", "a value cannot be read"),
    "alias-bomb": ("a: &a [x, x, x, x, x, x, x, x, x]\n"
                   + "".join(f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 40)}]\n" for i in range(8))
                   + "name: x\nversion: '1'\n",
                   "E-MAN-010", "holds a YAML alias (*a) at line 2, column 8; aliases are not allowed"),
    # 80 aliases (few) that expand to 10^9 nodes once loaded, where the config is serialized
    "billion-laughs-under-a-count": (
        "name: laughs\nversion: 1.0.0\nx-anchors:\n  l0: &l0 [" + ", ".join(["lol"] * 10) + "]\n"
        + "".join(f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, 9))
        + "inference:\n  endpoint: http://127.0.0.1:9\n  model: m\n  driver:\n    artifact: d\n"
        + "    config: {responses: *l8}\n",
        "E-MAN-010", "holds a YAML alias (*l0) at line 5, column 12"),
    "one-alias": ("name: x\nversion: '1'\ninference:\n  endpoint: &e http://127.0.0.1:9\n"
                  "  model: m\nobservability:\n  otel_endpoint: *e\n",
                  "E-MAN-010", "holds a YAML alias (*e) at line 7, column 18"),
    "larger-than-a-mebibyte": ("name: x\nversion: '1'\n# " + "x" * (1024 * 1024) + "\n",
                               "E-IO-001", "larger than 1048576 bytes"),
}


def _only_diagnostic(proc: subprocess.CompletedProcess[str]) -> dict:
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    [found] = json.loads(proc.stdout)["diagnostics"]
    return found


@pytest.mark.parametrize("case", sorted(HOSTILE_MANIFESTS))
def test_hostile_manifest_text_is_one_diagnostic(case: str, tmp_path: Path) -> None:
    text, code, words = HOSTILE_MANIFESTS[case]
    (tmp_path / "murmur.yaml").write_text(text)
    found = _only_diagnostic(_murmurd("validate", str(tmp_path), "--json"))
    assert found["code"] == code
    assert words in found["message"]


def test_a_manifest_linked_to_dev_zero_is_refused_without_reading_it(tmp_path: Path) -> None:
    (tmp_path / "murmur.yaml").symlink_to("/dev/zero")
    found = _only_diagnostic(_murmurd("validate", str(tmp_path), "--json"))
    assert found["code"] == "E-IO-001"
    assert "not a regular file (a character device)" in found["message"]


def test_a_manifest_that_is_a_fifo_is_refused_without_waiting(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "murmur.yaml")
    found = _only_diagnostic(_murmurd("validate", str(tmp_path), "--json"))
    assert found["code"] == "E-IO-001"
    assert "not a regular file (a FIFO)" in found["message"]


def test_a_prompt_file_that_is_a_fifo_is_named(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "prompt.md")
    _manifest(tmp_path, {"name": "x", "version": "1.0.0", "inference": {"system_prompt_file": "prompt.md"}})
    proc = _murmurd("validate", str(tmp_path), "--json")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    codes = {d["code"]: d for d in json.loads(proc.stdout)["diagnostics"]}
    assert "not a regular file (a FIFO)" in codes["E-INF-007"]["message"]


def test_run_refuses_an_alias_bomb_before_anything_expands_it(tmp_path: Path) -> None:
    """`validate` used to pass the 80-alias file and `run` then serialized 10^9 nodes (OOM)."""
    text, _code, words = HOSTILE_MANIFESTS["billion-laughs-under-a-count"]
    (tmp_path / "murmur.yaml").write_text(text)
    proc = _murmurd("run", str(tmp_path), "--task", "hi")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "E-MAN-010" in proc.stderr and words in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["murmur.yaml"]  # no workdir was laid out
