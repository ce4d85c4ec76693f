"""Compatibility: capsules written the way upstream's docs write them (the lock-down coding
capsule of `how-to/lock-down-capsule.md`, the fields of the manifest fact sheet) validate, stage
and run on murmurd unchanged, through the real CLI. Only the driver is local (offline) instead
of a registry pull."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest
import yaml

from a2akit import ROOT, start
from murmurd.containment.host import probe_host
from murmurd.containment.plan import plan_containment
from conftest import EXAMPLES

SKILL = "# Tidy\nAlways leave the repo tidy.\n"
RESPONSES = [
    {"stop_reason": "tool_call", "content": [{"type": "tool_call", "id": "c1", "name": "tidy", "input": {}}]},
    {"stop_reason": "tool_call", "content": [
        {"type": "tool_call", "id": "c2", "name": "printf", "input": {"command": "'%s' cloned"}}]},
    {"stop_reason": "end_turn", "content": [{"type": "text", "text": "Repository tidied."}]},
]


def coding_agent(root: Path, *, port: int | None = None) -> Path:
    """The lock-down guide's coding capsule, plus the fact sheet's fields, as upstream writes it."""
    directory = root / "coding-agent"
    (directory / "skills" / "tidy").mkdir(parents=True)
    (directory / "skills" / "tidy" / "SKILL.md").write_text(SKILL)
    (directory / "instructions.md").write_text("You are a careful coding agent.\n")
    (directory / ".env").write_text("# provider key, never committed\nCOMPAT_PROVIDER_KEY='sk-compat-0000'\n")
    driver = EXAMPLES / "scripted-driver"
    manifest = textwrap.dedent(f"""\
        name: coding-agent
        version: "0.1.0"
        mur_version: 0.2.0

        artifacts:
          - name: scripted-driver
            runtime: driver
            source: {driver}
            local_source: true
            capabilities:
              network:
                allow:
                  - https://api.anthropic.com
          - name: tidy
            runtime: skill
            source: skills/tidy

        network:
          internal_port: {port or 0}

        capabilities:
          containment: advisory
          network:
            allow:
              - https://api.anthropic.com
            unix_sockets: false
          filesystem:
            scope: repo
            workdir_exec: false
          shell:
            allow:
              - printf
            strip_env:
              - CARGO_HOME
              - RUSTUP_HOME
            baseline_env:
              - DATABASE_URL
          resources:
            max_processes: 64
            cpu_seconds: 600

        inference:
          transport: http
          endpoint: http://127.0.0.1:9
          model: scripted
          api_key: ${{COMPAT_PROVIDER_KEY}}
          max_turns: 6
          system_prompt_file: ./instructions.md
          provider:
            artifact: scripted-driver
          driver:
            artifact: scripted-driver
            config:
              responses: {json.dumps(RESPONSES)}

        lifecycle:
          task_acceptance: single
          after_task: exit
        """)
    if port is None:
        manifest = manifest.replace("network:\n  internal_port: 0\n", "")
    (directory / "murmur.yaml").write_text(manifest)
    return directory


def _murmurd(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "COMPAT_PROVIDER_KEY"}
    return subprocess.run([sys.executable, "-m", "murmurd", *args], capture_output=True, text=True,
                          timeout=180, cwd=ROOT, env=env)


def test_validate_accepts_it_and_names_every_field_it_ignores(tmp_path: Path) -> None:
    proc = _murmurd("validate", str(coding_agent(tmp_path)), "--json")
    report = json.loads(proc.stdout)
    assert proc.returncode == 0 and report["ok"] and report["errors"] == 0, proc.stdout
    warned = sorted(d["path"] for d in report["diagnostics"] if d["code"] == "W-MAN-002")
    assert warned == ["mur_version"]  # network.unix_sockets is honoured (the seccomp filter)
    assert not [d for d in report["diagnostics"] if d["code"] == "W-MAN-001"]  # nothing silently unknown


def test_run_answers_with_the_skill_and_the_shell_and_a_full_trace(tmp_path: Path) -> None:
    capsule = coding_agent(tmp_path)
    proc = _murmurd("run", str(capsule), "--task", "Clone and tidy", "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["exit_status"] == "ok" and summary["result"] == "Repository tidied."
    assert "warning W-MAN-002 mur_version" in proc.stderr  # repeated at launch
    workdir = Path(summary["workdir"])
    events = [json.loads(line) for line in (workdir / "trace.jsonl").read_text().splitlines()]
    kinds = [e["event_type"] for e in events]
    assert kinds == ["task_start", "session_start", "inference", "skill_call", "inference", "tool_call", "shell",
                     "inference", "session_end", "task_end"]
    start_event = events[1]
    assert start_event["tools_declared"] == ["tidy", "printf"]
    assert start_event["system_prompt_source"] == "manifest"
    here = plan_containment(probe_host(), "auto")
    assert (start_event["containment_declared"], start_event["containment_achieved"]) == ("advisory", here.achieved)
    assert start_event["effective_grants"]["filesystem_scope"] == "repo"
    assert events[0]["context_id"] == summary["context_id"]
    assert (events[-1]["tool_calls"], events[-1]["shell_calls"]) == (1, 1)  # the skill is counted apart
    assert (events[-2]["total_tool_calls"], events[-2]["total_shell_calls"]) == (1, 1)
    assert not (capsule / "murmur.lock").exists()  # only local sources: nothing to pin


def test_serve_binds_the_top_level_port_and_runs_the_launch_task(tmp_path: Path, artifacts) -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    capsule = coding_agent(tmp_path, port=port)
    served = start(capsule, tmp_path / "state", "--task", "Clone and tidy")
    assert served.url == f"http://127.0.0.1:{port}/"
    card = None
    try:
        card = httpx.get(served.url + ".well-known/agent-card.json", timeout=10).json()
    except httpx.HTTPError:
        pass  # the single launch task may already have finished and the daemon gone
    assert served.proc.wait(timeout=60) == 0
    if card is not None:
        assert card["name"] == "coding-agent"
    result = served.workdir / "out" / "result.txt"
    deadline = time.monotonic() + 5
    while not result.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert result.read_text() == "Repository tidied."


def _drop_driver(m: dict) -> None:
    del m["inference"]["driver"], m["inference"]["provider"]


def _seal(m: dict) -> None:  # sealed with workdir files executable: advisory on every host
    m["capabilities"]["containment"] = "sealed"
    m["capabilities"].setdefault("filesystem", {})["workdir_exec"] = True


def _skill_not_local(m: dict) -> None:
    m["artifacts"][1]["local_source"] = False


@pytest.mark.parametrize(("edit", "code"), [(_drop_driver, "E-INF-010"), (_seal, "E-CAP-003"),
                                            (_skill_not_local, "E-ART-007")])
def test_what_murmurd_cannot_honour_is_refused_before_launch(tmp_path: Path, edit, code) -> None:
    capsule = coding_agent(tmp_path)
    manifest = yaml.safe_load((capsule / "murmur.yaml").read_text())
    edit(manifest)
    (capsule / "murmur.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    proc = _murmurd("run", str(capsule), "--task", "x")
    assert proc.returncode == 1 and code in proc.stderr
    assert not (capsule / "workdir").exists()
