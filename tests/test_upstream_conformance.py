"""Issue 28 item 4: what upstream-built and upstream-layout components found murmurd doing
differently, each through a real session (real components in wasmtime, a real shell): the
`shell` trace line's `command` for an interpreter, `shell.baseline_env` adding to the default
environment (upstream's `baseline_env: [DATABASE_URL]` example), and the shape of the line
`out/compaction-summaries.jsonl` receives (tests/test_context_compaction.py), and diagnostic
codes that mean what upstream's mean (through the real `murmurd validate`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from a2akit import ROOT
from hookkit import end_turn, run_session, tool_call
from loopkit import driver_capsule, stage, trace_events

pytestmark = pytest.mark.anyio

DATABASE_URL = "postgres://app:s3cret@db.internal:5432/app"


def _shell_capsule(tmp_path: Path, responses: list[dict], shell: dict) -> Path:
    return driver_capsule(tmp_path, "scripted-driver", {"responses": responses}, capabilities={"shell": shell})


async def test_the_shell_line_of_an_interpreter_call_carries_the_script_text(tmp_path: Path, host) -> None:
    script = "printf '%s\\n' \"it's here\" && echo done"
    responses = [tool_call("c1", "sh", {"command": script}), tool_call("c2", "printf", {"command": "'%s' hi"}),
                 end_turn()]
    staged = stage(_shell_capsule(tmp_path, responses, {"allow": ["sh", "printf"]}), host, tmp_path)
    (outcome,) = await run_session(staged, host, "go")
    assert outcome.ok
    shells = [e for e in trace_events(staged) if e["event_type"] == "shell"]
    assert [e["exit_code"] for e in shells] == [0, 0]
    assert shells[0]["command"] == script  # upstream: the -c script, not `-c '...'`
    assert shells[1]["command"] == "%s hi"  # any other binary: its argument list
    assert "it's here\ndone" in outcome.messages[2].text  # the script did run as written


async def test_baseline_env_adds_to_the_default_environment_as_upstreams_example_does(
        tmp_path: Path, host, monkeypatch) -> None:
    """`baseline_env: [DATABASE_URL]`: the child keeps PATH (so `env` is found and runs) and gets
    the database URL it was named for; a credential nobody named stays out."""
    monkeypatch.setenv("DATABASE_URL", DATABASE_URL)
    monkeypatch.setenv("REDIS_URL", "redis://:pw@cache.internal/0")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-conformance-not-real-000000")
    script = 'echo "path=$PATH"; echo "db=$DATABASE_URL"; echo "redis=${REDIS_URL:-unset}"; echo "key=${OPENAI_API_KEY:-unset}"'
    responses = [tool_call("c1", "sh", {"command": script}), end_turn()]
    shell = {"allow": ["sh"], "baseline_env": ["DATABASE_URL", "OPENAI_API_KEY"]}
    staged = stage(_shell_capsule(tmp_path, responses, shell), host, tmp_path)
    (outcome,) = await run_session(staged, host, "go")
    text = outcome.messages[2].text
    assert "Exit code: 0" in text, text
    lines = dict(line.split("=", 1) for line in text.splitlines() if "=" in line and line.split("=", 1)[0].isalpha())
    assert lines["path"] and "/" in lines["path"]  # the default baseline survived
    assert lines["db"] == DATABASE_URL  # named by baseline_env: not stripped
    assert lines["redis"] == "unset"  # a credential no one named
    assert lines["key"] == "unset"  # upstream's built-in strips win even over baseline_env
    assert "sk-conformance" not in staged.workdir.trace.read_text()


async def test_a_shell_call_is_traced_as_a_tool_call_then_a_shell_line(tmp_path: Path, host) -> None:
    responses = [tool_call("c1", "sh", {"command": "exit 3"}), end_turn()]
    staged = stage(_shell_capsule(tmp_path, responses, {"allow": ["sh"]}), host, tmp_path)
    await run_session(staged, host, "go")
    trace = trace_events(staged)
    order = [e["event_type"] for e in trace if e["event_type"] in ("tool_call", "shell")]
    assert order == ["tool_call", "shell"]
    call, shell = (e for e in trace if e["event_type"] in ("tool_call", "shell"))
    assert call["tool_name"] == "sh" and call["status"] == "error" and shell["exit_code"] == 3
    assert shell["command"] == "exit 3"


# -- diagnostic codes mean what upstream's mean ------------------------------------------------

UPSTREAM_MEANINGS = [  # (what is wrong, the manifest text, upstream's code, the path it names)
    ("a required field is missing", "version: '1.0'\n", "E-MAN-001", "name"),
    ("YAML syntax", "name: [unclosed\n", "E-MAN-002", "$"),
    ("a type mismatch", "name: t\nversion: '1'\ninference: {max_turns: ten}\n", "E-MAN-003", "inference.max_turns"),
    ("a top level that is no mapping", "- a\n- b\n", "E-MAN-003", "$"),
    ("a bad network.allow entry", "name: t\nversion: '1'\ncapabilities: {network: {allow: ['ht!tp://x y']}}\n",
     "E-CAP-001", "capabilities.network.allow[0]"),
    ("an absolute scope", "name: t\nversion: '1'\ncapabilities: {filesystem: {scope: /etc}}\n",
     "E-CAP-002", "capabilities.filesystem.scope"),
    ("a scope escaping with ..", "name: t\nversion: '1'\ncapabilities: {filesystem: {scope: ../up}}\n",
     "E-CAP-002", "capabilities.filesystem.scope"),
]


@pytest.mark.parametrize("what, text, code, path", UPSTREAM_MEANINGS, ids=[m[0] for m in UPSTREAM_MEANINGS])
def test_validate_reports_upstreams_code_for_upstreams_condition(tmp_path: Path, what: str, text: str, code: str,
                                                               path: str) -> None:
    (tmp_path / "murmur.yaml").write_text(text)
    proc = _validate(tmp_path)
    errors = [d for d in json.loads(proc.stdout)["diagnostics"] if d["severity"] == "error"]
    assert proc.returncode != 0 and (code, path) in [(d["code"], d["path"]) for d in errors], proc.stdout


def test_no_manifest_is_upstreams_e_io_001(tmp_path: Path) -> None:
    proc = _validate(tmp_path)
    assert proc.returncode != 0 and [d["code"] for d in json.loads(proc.stdout)["diagnostics"]] == ["E-IO-001"]


@pytest.mark.parametrize("entry, code", [("/usr/bin/git", "E-CAP-013"), ("git status", "E-CAP-013")])
def test_murmurds_own_shell_rules_take_codes_upstream_does_not_use(tmp_path: Path, entry: str, code: str) -> None:
    (tmp_path / "murmur.yaml").write_text(f"name: t\nversion: '1'\ncapabilities: {{shell: {{allow: ['{entry}']}}}}\n")
    assert code in [d["code"] for d in json.loads(_validate(tmp_path).stdout)["diagnostics"]]
    (tmp_path / "murmur.yaml").write_text("name: t\nversion: '1'\ncapabilities: {shell: {allow: []}}\n")
    assert "E-CAP-014" in [d["code"] for d in json.loads(_validate(tmp_path).stdout)["diagnostics"]]


def test_no_upstream_code_is_reused_for_another_meaning() -> None:
    """Upstream's E-CAP-004 (staged_runtime below sealed) and E-CAP-006 (sealed, interpreted
    entrypoint unreachable) name conditions murmurd does not check: they stay unassigned."""
    from murmurd.manifest.diagnostics import CODES

    assert "E-CAP-004" not in CODES and "E-CAP-006" not in CODES
    assert "containment" in CODES["E-CAP-003"].summary and "network namespace" in CODES["E-CAP-005"].summary
    assert "required" in CODES["E-MAN-001"].summary and "type" in CODES["E-MAN-003"].summary


def _validate(directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "murmurd", "validate", str(directory), "--json"],
                          capture_output=True, text=True, timeout=180, cwd=ROOT)
