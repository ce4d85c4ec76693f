"""Evals (issue 16, item 3): the `observability.eval` block, the bundled `murmur-hook-eval` run
by the hooks runtime in real sessions, `eval.jsonl` records, and `murmurd eval show | diff | run`
with their error codes and exit codes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from bundledkit import bundled
from conftest import EXAMPLES, FIXTURES, ROOT
from hookkit import end_turn, tool_call
from loopkit import capsule_dir, local
from tracekit import golden, murmurd, place
from otlpkit import JsonCollector

EVALS = FIXTURES / "evals"
HOOK = "murmur-hook-eval"
SCORED = {"dataset_id": "smoke", "scorers": [
    {"type": "exit_ok"}, {"type": "max_turns", "max": 2}, {"type": "max_tokens"},
    {"type": "tool_sequence", "name": "echo-then-write", "expected": ["echo", "write-file"]},
    {"type": "tool_sequence", "name": "write-then-echo", "expected": ["write-file", "echo"]},
    {"type": "llm_judge"}, {"type": "vibes"}]}
RESPONSES = [tool_call("c1", "echo", {"text": "hi"}),
             tool_call("c2", "write-file", {"path": "out/a.txt", "content": "a\n"}), end_turn("done")]


def _capsule(root: Path, *, evals: dict[str, Any] | None = SCORED, scope: str | None = ".",
             name: str = "scored") -> Path:
    hook = bundled(HOOK, "hook", **({"capabilities": {"filesystem": {"scope": scope}}} if scope else {}))
    manifest: dict[str, Any] = {
        "name": name, "version": "0.1.0",
        "artifacts": [local("scripted-driver", "driver", EXAMPLES / "scripted-driver"),
                      local("echo", "tool", EXAMPLES / "echo"), local("write-file", "tool", EXAMPLES / "write-file"), hook],
        "inference": {"endpoint": "http://127.0.0.1:9", "model": "scripted", "max_turns": 6,
                      "driver": {"artifact": "scripted-driver", "config": {"responses": RESPONSES}}},
    }
    if evals is not None:
        manifest["observability"] = {"eval": evals}
    return capsule_dir(root, manifest)


def _murmurd_process(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "murmurd", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def _records(session: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (session / "eval.jsonl").read_text().splitlines()]


# -- the manifest block -------------------------------------------------------------------------


def _validate(tmp_path: Path, evals: Any, with_hook: bool = True) -> dict[str, Any]:
    directory = _capsule(tmp_path, evals=evals) if with_hook else capsule_dir(tmp_path, {
        "name": "bare", "version": "0.1.0", "observability": {"eval": evals},
        "artifacts": [local("scripted-driver", "driver", EXAMPLES / "scripted-driver")],
        "inference": {"endpoint": "http://127.0.0.1:9", "driver": {"artifact": "scripted-driver"}}})
    code = subprocess.run([sys.executable, "-m", "murmurd", "validate", str(directory), "--json", "--no-env-file"],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    report = json.loads(code.stdout)
    report["exit"] = code.returncode
    report["codes"] = sorted((d["code"], d["path"]) for d in report["diagnostics"])
    return report


def test_the_eval_block_is_a_model_of_its_own() -> None:
    from murmurd.manifest.capsule import Observability

    block = Observability.model_validate({"eval": SCORED}).eval
    assert block is not None and block.dataset_id == "smoke"
    assert [s.label for s in block.scorers][:4] == ["exit_ok", "max_turns", "max_tokens", "echo-then-write"]
    assert block.scorers[1].max == 2 and block.scorers[3].expected == ["echo", "write-file"]


def test_validate_warns_what_would_score_nothing(tmp_path: Path) -> None:
    report = _validate(tmp_path / "a", SCORED)
    assert report["exit"] == 0
    assert report["codes"] == [("W-EVAL-001", "observability.eval.scorers[6].type"),
                               ("W-EVAL-002", "observability.eval.scorers[5].type")]
    report = _validate(tmp_path / "b", {"scorers": [{"type": "exit_ok"}, {"type": "max_turns", "name": "exit_ok"}]},
                       with_hook=False)
    assert report["codes"] == [("W-EVAL-004", "observability.eval"), ("W-EVAL-005", "observability.eval.scorers[1].name")]
    assert _validate(tmp_path / "c", {"dataset_id": "d"})["codes"] == [("W-EVAL-003", "observability.eval.scorers")]


@pytest.mark.parametrize("evals, code, path", [
    ({"scorers": "exit_ok"}, "E-MAN-003", "observability.eval.scorers"),
    ({"scorers": [{"name": "x"}]}, "E-MAN-001", "observability.eval.scorers[0].type"),
    ({"scorers": [{"type": "max_turns", "max": -1}]}, "E-MAN-006", "observability.eval.scorers[0].max"),
    ({"scorers": [{"type": "max_turns", "max": "5"}]}, "E-MAN-003", "observability.eval.scorers[0].max"),
    ({"scorers": [{"type": "tool_sequence", "expected": "echo"}]}, "E-MAN-003", "observability.eval.scorers[0].expected"),
    ({"dataset_id": 7, "scorers": [{"type": "exit_ok"}]}, "E-MAN-003", "observability.eval.dataset_id"),
])
def test_validate_refuses_a_malformed_block(tmp_path: Path, evals: Any, code: str, path: str) -> None:
    report = _validate(tmp_path, evals)
    assert report["exit"] == 1 and (code, path) in report["codes"], report["codes"]


def test_every_hook_sees_the_eval_config_the_dataset_and_the_case(tmp_path: Path, host) -> None:
    from loopkit import stage

    staged = stage(_capsule(tmp_path), host, tmp_path)
    env = dict(staged.call_grant(HOOK).env)
    assert json.loads(env["MURMUR_EVAL_CONFIG"]) == {
        "dataset_id": "smoke", "scorers": [{**s, "expected": s.get("expected", [])} for s in SCORED["scorers"]]}
    assert env["MURMUR_DATASET_ID"] == "smoke" and "MURMUR_CASE_ID" not in env
    assert "MURMUR_EVAL_CONFIG" not in staged.call_grant("echo").env  # a tool gets nothing of it
    staged.host_env["MURMUR_CASE_ID"] = "case-3"
    assert staged.call_grant(HOOK).env["MURMUR_CASE_ID"] == "case-3"


# -- the hook in real sessions ------------------------------------------------------------------


@pytest.fixture(scope="module")
def scored_run(tmp_path_factory) -> tuple[Path, dict[str, Any]]:
    capsule = _capsule(tmp_path_factory.mktemp("scored"))
    proc = _murmurd_process("run", ".", "--task", "go", "--json", "--no-env-file", cwd=capsule)
    assert proc.returncode == 0, proc.stderr
    return capsule, json.loads(proc.stdout.splitlines()[-1])


def test_the_eval_hook_writes_records_beside_the_trace(scored_run) -> None:
    capsule, result = scored_run
    session = capsule / "workdir" / result["session_id"]
    records = _records(session)
    assert [r["record_type"] for r in records] == ["event_score"] * 5 + ["dataset_run"]
    scores = {r["scorer"]: (r["result"], r["score"], r["reason"]) for r in records[:5]}
    assert scores["exit_ok"] == ("pass", 1.0, "exit_status=ok")
    assert scores["max_turns"] == ("fail", 0.0, "turns=3 max=2")
    assert scores["max_tokens"][0] == "pass" and scores["max_tokens"][2].endswith(" max=100000")
    assert scores["echo-then-write"][:2] == ("pass", 1.0)
    assert scores["write-then-echo"] == (  # published: a greedy in-order match, scored matched/expected
        "fail", 0.5, 'observed=["echo", "write-file"] expected=["write-file", "echo"]')
    assert all(r["turn"] == 3 and r["event_type"] == "session_end" and isinstance(r["ts"], int) for r in records[:5])
    run = records[-1]
    assert (run["dataset_id"], run["case_id"], run["overall"]) == ("smoke", None, "fail")
    assert run["scores"] == {"exit_ok": 1.0, "max_turns": 0.0, "max_tokens": 1.0, "echo-then-write": 1.0,
                             "write-then-echo": 0.5}
    log = (session / "logs" / f"hook-{HOOK}.log").read_text()
    assert "[murmur-hook-eval] scorer 'llm_judge' type 'llm_judge' is not yet implemented \u2014 scoring nothing" in log
    assert "[murmur-hook-eval] unknown scorer type 'vibes' for scorer 'vibes' \u2014 skipping" in log
    raw = (session / "eval.jsonl").read_text().splitlines()
    assert raw == [json.dumps(r, sort_keys=True, separators=(",", ":")) for r in records]  # serde_json's shape


@pytest.mark.anyio
async def test_the_eval_hook_scores_once_per_launch_with_the_sessions_totals(tmp_path: Path, host) -> None:
    """Two tasks, so two trace `session_start`/`session_end` pairs; the hook hears one
    `on-session-end` (the seed: once per capsule launch) and scores the whole session once."""
    from hookkit import run_session
    from loopkit import stage

    staged = stage(_capsule(tmp_path), host, tmp_path)
    first, second = await run_session(staged, host, "one", "two")
    assert first.ok and second.ok
    ends = [json.loads(line) for line in (staged.workdir.root / "trace.jsonl").read_text().splitlines()
            if json.loads(line)["event_type"] == "session_end"]
    assert [e["total_turns"] for e in ends] == [3, 6]
    records = _records(staged.workdir.root)
    assert [r["record_type"] for r in records] == ["event_score"] * 5 + ["dataset_run"]  # one set, not one per attempt
    scores = {r["scorer"]: (r["result"], r["reason"]) for r in records[:5]}
    assert scores["max_turns"] == ("fail", "turns=6 max=2")  # the session's totals, both tasks
    assert scores["max_tokens"][1] == (f"tokens={ends[-1]['total_input_tokens'] + ends[-1]['total_output_tokens']}"
                                       " max=100000")
    assert scores["echo-then-write"] == (
        "pass", 'observed=["echo", "write-file", "echo", "write-file"] expected=["echo", "write-file"]')
    assert all(r["turn"] == 6 for r in records[:5])


def test_eval_show_reads_the_sessions_records(scored_run, capsys) -> None:
    capsule, result = scored_run
    os.chdir(capsule)
    code, out, err = murmurd(capsys, "eval", "show", "--json")
    assert (code, err) == (0, "")
    shown = json.loads(out)
    assert shown["overall"] == "fail"
    assert shown["scorers"]["max_turns"] == {"pass": 0, "fail": 1, "total": 1, "pass_rate": 0.0}
    code, out, _ = murmurd(capsys, "eval", "show", result["session_id"][-5:])
    assert code == 0 and "  max_turns        turn 3  turns=3 max=2" in out


def test_without_scorers_or_without_a_scope_nothing_is_written(tmp_path: Path) -> None:
    for name, kwargs in (("unscored", {"evals": {"dataset_id": "d", "scorers": []}}), ("unscoped", {"scope": None})):
        capsule = _capsule(tmp_path, name=name, **kwargs)
        proc = _murmurd_process("run", ".", "--task", "go", "--json", "--no-env-file", cwd=capsule)
        assert proc.returncode == 0, proc.stderr
        session = capsule / "workdir" / json.loads(proc.stdout.splitlines()[-1])["session_id"]
        assert not (session / "eval.jsonl").exists()
        log = (session / "logs" / f"hook-{HOOK}.log").read_text()
        assert ("no valid scorers configured \u2014 eval.jsonl will not be written" if name == "unscored"
                else "[murmur-hook-eval] failed to write eval.jsonl") in log
        code = _murmurd_process("eval", "show", cwd=capsule)
        assert code.returncode == 1 and code.stderr.startswith("error[E-EVAL-002]: ")


# -- eval show / diff on hand-written records ---------------------------------------------------


def test_eval_show_golden(capsys) -> None:
    code, out, _ = murmurd(capsys, "eval", "show", str(EVALS / "run-a.jsonl"))
    assert code == 0
    golden("eval/run-a.show.txt", out.replace(str(EVALS), "<evals>"))
    code, out, _ = murmurd(capsys, "eval", "show", "--json", str(EVALS / "run-b.jsonl"))
    shown = json.loads(out)
    assert shown["overall"] == "fail" and shown["dataset_run"]["case_id"] is None
    assert set(shown["scorers"]) == {"exit_ok", "max_turns", "max_tokens"}  # the unknown record is ignored


def test_eval_overall_without_a_dataset_run(tmp_path: Path, capsys) -> None:
    lines = (EVALS / "run-a.jsonl").read_text().splitlines()
    passing = tmp_path / "pass.jsonl"
    passing.write_text("\n".join(lines[:2]) + "\n")
    failing = tmp_path / "fail.jsonl"
    failing.write_text("\n".join(lines[:3]) + "\n")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    for path, overall in ((passing, "pass"), (failing, "fail"), (empty, "no_scores")):
        code, out, _ = murmurd(capsys, "eval", "show", "--json", str(path))
        assert code == 0 and json.loads(out)["overall"] == overall
    code, out, _ = murmurd(capsys, "eval", "show", str(empty))
    assert code == 0 and "(no failing events)" in out


def test_eval_diff(capsys) -> None:
    code, out, _ = murmurd(capsys, "eval", "diff", str(EVALS / "run-a.jsonl"), str(EVALS / "run-b.jsonl"))
    assert code == 0
    golden("eval/diff.txt", out.replace(str(EVALS), "<evals>"))
    code, out, _ = murmurd(capsys, "eval", "diff", "--json", str(EVALS / "run-a.jsonl"), str(EVALS / "run-b.jsonl"))
    rows = {r["scorer"]: r["delta"] for r in json.loads(out)["rows"]}
    assert rows == {"exit_ok": "=", "max_turns": "-100.0pp", "reads-then-writes": "(A only)", "max_tokens": "(B only)"}


def test_eval_selectors_and_error_codes(tmp_path: Path, capsys) -> None:
    root = tmp_path / "workdir"
    a = place(root, "ses_019ad1c2e4007c1d8e2f3a4b5c6d7e8f", None)
    shutil.copyfile(EVALS / "run-a.jsonl", a / "eval.jsonl")
    b = place(root, "ses_019ad1c2f8a07c1d9e2f3a4b5c6d7e90", None)
    shutil.copyfile(EVALS / "run-b.jsonl", b / "eval.jsonl")
    where = ("--workdir", str(root))
    def overall_case(*args: str) -> Any:
        code, out, err = murmurd(capsys, "eval", "show", "--json", *where, *args)
        assert code == 0, err
        return json.loads(out)["dataset_run"]["case_id"]
    assert overall_case() is None  # latest: run-b
    assert overall_case("7E8F") == "case-7"
    assert overall_case(a.name) == "case-7"
    assert murmurd(capsys, "eval", "diff", *where, "e8f", "e90")[0] == 0
    def error(*args: str) -> str:
        code, out, err = murmurd(capsys, "eval", *args)
        assert code == 1 and out == "" and err.count("\n") == 1, (code, out, err)
        return err
    assert error("show", *where, "nope").startswith("error[E-TRC-002]: ")
    assert error("show", "--workdir", str(tmp_path / "absent")).startswith("error[E-IO-001]: ")
    place(root, "ses_019ad1c30b407c1dae2f3a4b5c6d7e91", None)
    assert error("show", *where).startswith("error[E-EVAL-002]: ")  # the latest session has no eval.jsonl
    assert error("diff", *where, "e8f", "e91").startswith("error[E-EVAL-002]: ")
    (b / "eval.jsonl").write_text('{"record_type": "event_score", "scorer": "x", "result": "maybe"}\n')
    assert error("show", *where, "e90").startswith(f"error[E-EVAL-001]: {b / 'eval.jsonl'}:1: ")
    (b / "eval.jsonl").write_text("\n{nope\n")
    assert error("show", *where, "e90").startswith(f"error[E-EVAL-001]: {b / 'eval.jsonl'}:2: ")
    assert error("show", str(tmp_path / "gone.jsonl")).startswith("error[E-EVAL-002]: ")


def test_eval_diff_needs_both_arguments(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        murmurd(capsys, "eval", "diff", "only-one")
    assert exit_info.value.code == 2  # a usage error, as for every missing argument


# -- eval run -----------------------------------------------------------------------------------


def test_eval_run_reruns_the_task_set_and_scores_each_case(tmp_path: Path) -> None:
    capsule = _capsule(tmp_path)
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "greet.md").write_text("Say hello\n")
    dataset = tmp_path / "cases.jsonl"
    dataset.write_text(json.dumps({"case_id": "greet", "task_path": "tasks/greet.md", "expected": "hello"}) + "\n\n"
                       + json.dumps({"case_id": "inline", "task": "Say hi"}) + "\n"
                       + json.dumps({"case_id": "lost", "task_path": "tasks/missing.md"}) + "\n")
    proc = _murmurd_process("eval", "run", str(capsule), "--dataset", str(dataset), "--no-env-file", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr  # cases that fail their scorers do not fail the command
    lines = proc.stdout.splitlines()
    assert lines[0] == "Running 3 case(s) …"
    assert lines[1::2][:3] == ["  case: greet", "  case: inline", "  case: lost"]
    sessions = [line.split("session: ")[1] for line in lines if line.startswith("    result: ")]
    assert [line.split()[1] for line in lines if line.startswith("    result: ")] == ["fail"] * 3
    assert lines[7:9] == ["── Summary ──", "pass: 0/3"]
    assert lines[9].startswith("  greet  fail  echo-then-write=1 exit_ok=1 max_tokens=1 max_turns=0 write-then-echo=0.5  ")
    assert lines[9].endswith(str(capsule / "workdir" / sessions[0]))
    assert "warning: case lost: cannot read task" in proc.stderr
    for case_id, session in zip(("greet", "inline", "lost"), sessions, strict=True):
        run = _records(capsule / "workdir" / session)[-1]
        assert (run["case_id"], run["dataset_id"]) == (case_id, "smoke")
    task = (capsule / "workdir" / sessions[0] / "task.md").read_text()
    assert task.startswith("Say hello")


def test_eval_run_without_the_hook_is_no_scores(tmp_path: Path) -> None:
    capsule = capsule_dir(tmp_path, {"name": "plain", "version": "0.1.0",
                                     "artifacts": [local("scripted-driver", "driver", EXAMPLES / "scripted-driver")],
                                     "inference": {"endpoint": "http://127.0.0.1:9", "driver": {
                                         "artifact": "scripted-driver", "config": {"responses": [end_turn("ok")]}}}})
    (capsule / "eval.jsonl").write_text(json.dumps({"case_id": "one", "task": "go"}) + "\n")
    proc = _murmurd_process("eval", "run", cwd=capsule)  # DIR defaults to ., the dataset to ./eval.jsonl
    assert proc.returncode == 0, proc.stderr
    assert "    result: no_scores  session: ses_" in proc.stdout and "pass: 0/1" in proc.stdout


@pytest.mark.parametrize("content, message", [
    (None, "dataset "),
    ("", "no cases"),
    ("\n\n", "no cases"),
    ("{nope\n", ":1: not a JSON line"),
    ('{"task": "x"}\n', ":1: want an object with a non-empty string case_id"),
    ('{"case_id": "a"}\n', ":1: case 'a' needs a string task_path"),
    ('{"case_id": "a", "task": "x"}\n{"case_id": "a", "task": "y"}\n', "case_id 'a' appears twice"),
])
def test_eval_run_setup_errors_exit_1(tmp_path: Path, content: str | None, message: str) -> None:
    capsule = _capsule(tmp_path)
    dataset = tmp_path / "cases.jsonl"
    if content is not None:
        dataset.write_text(content)
    proc = _murmurd_process("eval", "run", str(capsule), "--dataset", str(dataset), "--no-env-file", cwd=tmp_path)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("error[E-EVAL-003]: ") and message in proc.stderr, proc.stderr
    assert not (capsule / "workdir").exists()  # nothing ran


def test_eval_run_with_a_bad_manifest_exits_1(tmp_path: Path) -> None:
    capsule = _capsule(tmp_path, evals={"scorers": [{"type": "max_turns", "max": -3}]})
    (tmp_path / "cases.jsonl").write_text(json.dumps({"case_id": "a", "task": "x"}) + "\n")
    proc = _murmurd_process("eval", "run", str(capsule), "--dataset", "cases.jsonl", "--no-env-file", cwd=tmp_path)
    assert proc.returncode == 1 and proc.stdout == "" and "E-MAN-006" in proc.stderr


@pytest.mark.anyio
async def test_the_published_eval_hook_resolves_async_and_without_a_config_warns_and_writes_nothing(
        tmp_path: Path, host) -> None:
    """murmur-hook-eval 0.3.0: named at its published version, async as `mur`'s default makes it;
    with no `observability.eval` it notes so in its log and stays inactive."""
    from hookkit import run_session
    from loopkit import stage

    capsule = _capsule(tmp_path, evals=None)
    manifest = yaml.safe_load((capsule / "murmur.yaml").read_text())
    manifest["artifacts"][-1]["version"] = "0.3.0"
    (capsule / "murmur.yaml").write_text(yaml.safe_dump(manifest))
    staged = stage(capsule, host, tmp_path)
    own = staged.artifacts[HOOK].resolved.manifest
    assert (own.version, own.binding, own.execution_mode, own.commit_policy) == ("0.3.0", None, "async", "none")
    (outcome,) = await run_session(staged, host, "go")
    assert outcome.ok, outcome.error
    assert not (staged.workdir.root / "eval.jsonl").exists()
    log = (staged.workdir.root / "logs" / f"hook-{HOOK}.log").read_text()
    assert "[murmur-hook-eval] MURMUR_EVAL_CONFIG is not set \u2014 no eval scores will be written" in log




@pytest.mark.anyio
async def test_the_eval_hook_exports_its_scores_as_otlp_logs(tmp_path: Path, host) -> None:
    from hookkit import run_session
    from loopkit import stage

    collector = JsonCollector()
    try:
        capsule = _capsule(tmp_path)
        manifest = yaml.safe_load((capsule / "murmur.yaml").read_text())
        manifest["observability"]["otel_endpoint"] = collector.url + "/"
        manifest["artifacts"][-1]["capabilities"]["network"] = {"allow": [collector.url]}
        (capsule / "murmur.yaml").write_text(yaml.safe_dump(manifest))
        staged = stage(capsule, host, tmp_path)
        (outcome,) = await run_session(staged, host, "go")
        assert outcome.ok, outcome.error
        assert collector.arrived.wait(120), "no OTLP export arrived"
    finally:
        collector.close()
    (path, payload), = [e for e in collector.exports if e[0] == "/v1/logs"]
    (resource,) = payload["resourceLogs"]
    assert resource["resource"]["attributes"] == [{"key": "service.name", "value": {"stringValue": HOOK}}]
    (scope,) = resource["scopeLogs"]
    assert scope["scope"] == {"name": HOOK, "version": "0.3.16"}
    logs = scope["logRecords"]
    h1 = _fnv(staged.session_id.encode())
    trace_id = f"{h1:016x}{_fnv(h1.to_bytes(8, 'little')):016x}"
    assert {r["traceId"] for r in logs} == {trace_id} and all(r["timeUnixNano"].isdigit() for r in logs)
    bodies = [r["body"]["stringValue"] for r in logs]
    assert bodies == [f"eval.scorer={name} result={result} score={score}" for name, result, score in (
        ("exit_ok", "pass", "1.0000"), ("max_turns", "fail", "0.0000"), ("max_tokens", "pass", "1.0000"),
        ("echo-then-write", "pass", "1.0000"), ("write-then-echo", "fail", "0.5000"))]
    assert logs[4]["attributes"] == [{"key": "eval.scorer", "value": {"stringValue": "write-then-echo"}},
                                     {"key": "eval.result", "value": {"stringValue": "fail"}},
                                     {"key": "eval.score", "value": {"doubleValue": 0.5}}]
    assert [r["record_type"] for r in _records(staged.workdir.root)][-1] == "dataset_run"  # the file as before


def _fnv(data: bytes) -> int:
    h = 0xcbf29ce484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001b3) % 2**64
    return h


@pytest.mark.anyio
async def test_an_eval_export_refused_for_want_of_a_grant_is_a_warning(tmp_path: Path, host) -> None:
    from hookkit import run_session
    from loopkit import stage

    collector = JsonCollector()
    try:
        capsule = _capsule(tmp_path)
        manifest = yaml.safe_load((capsule / "murmur.yaml").read_text())
        manifest["observability"]["otel_endpoint"] = collector.url  # and no network grant for the hook
        (capsule / "murmur.yaml").write_text(yaml.safe_dump(manifest))
        staged = stage(capsule, host, tmp_path)
        (outcome,) = await run_session(staged, host, "go")
    finally:
        collector.close()
    assert outcome.ok, outcome.error
    assert not [e for e in collector.exports if e[0] == "/v1/logs"]
    assert [r["record_type"] for r in _records(staged.workdir.root)][-1] == "dataset_run"
    log = (staged.workdir.root / "logs" / f"hook-{HOOK}.log").read_text()
    assert "[murmur-hook-eval] OTLP log export failed: POST " + collector.url + "/v1/logs" in log
    assert "returned err" not in log  # best effort: the hook does not fail for it
