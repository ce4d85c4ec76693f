"""`murmurd trace` on traces real sessions wrote: example capsules run by `murmurd run` (the
scripted driver, offline), including a deliberately redundant one (the bundled editor reads one
file twice with no write between), and two runs that differ in one tool call (issue 16)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bundledkit import bundled
from conftest import EXAMPLES, ROOT
from hookkit import end_turn, tool_call
from loopkit import capsule_dir, local
from tracekit import golden, murmurd, steady

EDITOR = "murmur-tool-editor"


def _capsule(root: Path, name: str, artifacts: list[dict[str, Any]], responses: list[dict[str, Any]]) -> Path:
    return capsule_dir(root, {
        "name": name, "version": "0.1.0",
        "artifacts": [local("scripted-driver", "driver", EXAMPLES / "scripted-driver"), *artifacts],
        "inference": {"endpoint": "http://127.0.0.1:9", "model": "scripted", "max_turns": 8,
                      "driver": {"artifact": "scripted-driver", "config": {"responses": responses}}},
    })


def run(capsule: Path, task: str = "go") -> dict[str, Any]:
    """`murmurd run CAPSULE --json` from the capsule's directory: sessions land in ./workdir."""
    proc = subprocess.run([sys.executable, "-m", "murmurd", "run", ".", "--task", task, "--json", "--no-env-file"],
                          cwd=capsule, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def edit(op: str, **fields: str) -> dict[str, Any]:
    return {"op": op, **fields}


REDUNDANT = [
    tool_call("c0", EDITOR, edit("write", path="notes.txt", content="one\n")),
    tool_call("c1", EDITOR, edit("read", path="notes.txt")),
    tool_call("c2", EDITOR, edit("read", path="./notes.txt")),  # the same file again: redundant
    tool_call("c3", EDITOR, edit("patch", path="notes.txt", old="one", new="two")),
    tool_call("c4", EDITOR, edit("read", path="notes.txt")),  # after a write: not redundant
    end_turn("notes.txt says two"),
]


@pytest.fixture(scope="module")
def redundant(tmp_path_factory) -> tuple[Path, dict[str, Any]]:
    capsule = _capsule(tmp_path_factory.mktemp("redundant"), "redundant", [bundled(EDITOR)], REDUNDANT)
    return capsule, run(capsule)


def test_a_file_read_twice_with_no_write_between_is_flagged(redundant, capsys) -> None:
    capsule, result = redundant
    os.chdir(capsule)  # `murmurd trace` reads ./workdir by default, where `murmurd run` put the session
    code, out, err = murmurd(capsys, "trace", "show", "--json")
    assert (code, err) == (0, "")
    shown = json.loads(out)
    assert shown["session_id"] == result["session_id"]
    calls = [(c["turn"], c.get("state_effect"), c.get("resource_id")) for c in shown["tool_calls"]["calls"]]
    assert calls == [(0, "mutate", "file:notes.txt"), (1, "read", "file:notes.txt"), (2, "read", "file:notes.txt"),
                     (3, "mutate", "file:notes.txt"), (4, "read", "file:notes.txt")]
    assert [(r["turn"], r["tool_name"], r["resource"], r["prior_turn"]) for r in shown["redundant_calls"]] == \
        [(2, EDITOR, "file:notes.txt", 1)]
    code, out, _ = murmurd(capsys, "trace", "show")
    assert code == 0
    golden("trace/real-redundant.show.txt", _steady_tokens(steady(out, result["session_id"])))
    code, out, _ = murmurd(capsys, "trace", "steps", "-v", result["session_id"][-6:])
    assert code == 0
    golden("trace/real-redundant.steps.txt", steady(out, result["session_id"]))
    code, out, _ = murmurd(capsys, "trace", "report")
    assert code == 0 and "  Redundant calls: 1\n" in out


def _steady_tokens(text: str) -> str:
    """Token counts depend on the tokenizer's view of the capsule block; keep the layout only."""
    import re

    lines = []
    for line in text.splitlines(keepends=True):
        if line.startswith(("  input:", "  output:", "  total:")):
            line = re.sub(r"[0-9][0-9,.]*", "N", line)
        elif line.startswith("  count: ") and "(max: " in line:
            # the last session_start's budget: the whole max_turns, or (one session_start per
            # attempt, upstream's nesting) what the reopened attempt had left
            line = re.sub(r"\(max: [0-9]+\)", "(max: M)", line)
        elif line.startswith("  fired: yes"):
            line = re.sub(r"\([0-9,]+ → [0-9,]+ tokens\)", "(N → N tokens)", line)
        lines.append(line)
    return "".join(lines)


def test_the_trace_murmurd_wrote_parses_with_upstreams_rules(redundant) -> None:
    """Every line of a real trace passes the reader's checks, and the totals it shows are the
    session's own (the last session_end)."""
    from murmurd.traceview.metrics import session_metrics
    from murmurd.traceview.sessions import read_trace, resolve

    capsule, result = redundant
    metrics = session_metrics(read_trace(resolve(capsule / "workdir", result["session_id"])))
    assert (metrics.capsule_name, metrics.exit_status, metrics.turns) == ("redundant", "ok", 6)
    assert len(metrics.tools) == metrics.tool_calls_total == 5


def test_diff_of_two_real_runs_differing_in_one_tool_call(tmp_path: Path, capsys) -> None:
    echo, write = local("echo", "tool", EXAMPLES / "echo"), local("write-file", "tool", EXAMPLES / "write-file")
    first = [tool_call("c1", "echo", {"text": "hi"}),
             tool_call("c2", "write-file", {"path": "out/a.txt", "content": "a\n"}), end_turn("done")]
    capsule = _capsule(tmp_path, "pair", [echo, write], first)
    a = run(capsule)
    second = [first[0], tool_call("c1b", "echo", {"text": "hi again"}), *first[1:]]  # one tool call more
    _capsule(tmp_path, "pair", [echo, write], second)
    b = run(capsule)
    assert a["session_id"] < b["session_id"]  # UUIDv7: the later run sorts last
    os.chdir(capsule)
    code, out, _ = murmurd(capsys, "trace", "diff", "--json")  # @2 @1
    assert code == 0
    rows = {r["metric"]: r for r in json.loads(out)["rows"]}
    assert json.loads(out)["a"]["session_id"] == a["session_id"]
    assert (rows["turns"]["a"], rows["turns"]["b"], rows["turns"]["delta"]) == (3, 4, "+1 (A better)")
    assert (rows["tool calls"]["a"], rows["tool calls"]["b"], rows["tool calls"]["delta"]) == (2, 3, "+1 (A better)")
    for same in ("tool success rate", "skill calls", "shell calls", "compaction", "exit status"):
        assert rows[same]["delta"] == "=", same
    code, out, _ = murmurd(capsys, "trace", "diff", a["session_id"], b["session_id"][-8:])
    assert code == 0
    shown = steady(out, a["session_id"], b["session_id"]).replace(str(capsule), "<capsule>")
    kept = [line for line in shown.splitlines(keepends=True) if not line.startswith(("input", "output", "duration", "avg tool latency"))]
    golden("trace/real-pair.diff.txt", "".join(kept))


@pytest.mark.parametrize("example", ["hello", "context-demo"])
def test_the_example_capsules_traces(example: str, tmp_path: Path, capsys) -> None:
    """`examples/hello` (tools and a skill) and `examples/context-demo` (a hook inference, a
    compaction and a reopen, turns restarting at 0) as `murmurd run --workdir` leaves them."""
    project = tmp_path / "project"
    proc = subprocess.run([sys.executable, "-m", "murmurd", "run", str(EXAMPLES / example), "--task", "go",
                           "--workdir", str(project), "--json", "--no-env-file"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    session_id = json.loads(proc.stdout.splitlines()[-1])["session_id"]
    code, out, err = murmurd(capsys, "trace", "show", "--workdir", str(project))  # found under .murmur/
    assert (code, err) == (0, "")
    golden(f"trace/example-{example}.show.txt", _steady_tokens(steady(out, session_id)))
    code, out, _ = murmurd(capsys, "trace", "steps", "--workdir", str(project))
    assert code == 0
    golden(f"trace/example-{example}.steps.txt", steady(out, session_id))


def test_murmurds_trace_without_a_model_or_a_loop_still_reads(tmp_path: Path, artifacts, capsys) -> None:
    """A manifest naming no model and a script capsule (no inference at all): session_start still
    carries the string `model` and integer `max_turns` upstream's reader requires."""
    unnamed = capsule_dir(tmp_path, {
        "name": "unnamed", "version": "0.1.0",
        "artifacts": [local("scripted-driver", "driver", EXAMPLES / "scripted-driver")],
        "inference": {"endpoint": "http://127.0.0.1:9",
                      "driver": {"artifact": "scripted-driver", "config": {"responses": [end_turn("ok")]}}}})
    script = capsule_dir(tmp_path, {"name": "script", "version": "0.1.0",
                                    "artifacts": [local("echo", "tool", EXAMPLES / "echo")]},
                         capsule_wasm=artifacts.example("invoke-capsule"))
    for capsule, model, max_turns in ((unnamed, "", 10), (script, "", 0)):
        result = run(capsule)
        os.chdir(capsule)
        code, out, err = murmurd(capsys, "trace", "show", "--json")
        assert (code, err) == (0, ""), capsule
        shown = json.loads(out)
        assert (shown["session_id"], shown["model"], shown["max_turns"]) == (result["session_id"], model, max_turns)
