"""The context examples (issue 10): the context-demo capsule through a real `murmurd run`, and the
compaction, memory and gatekeeper hooks each on their own, error paths included."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import EXAMPLES
from hookkit import end_turn, hook_events, hooked_capsule, run_session, tool_call
from loopkit import local, stage, trace_events

ROOT = Path(__file__).resolve().parent.parent
TASK = "Write the release note for murmur 1.4."


@pytest.fixture(scope="module")
def built(artifacts) -> None:  # type: ignore[no-untyped-def]
    for name in ("scripted-driver", "echo", "compaction-hook", "memory-hook", "gatekeeper-hook"):
        artifacts.example(name)


def _events(trace: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in trace if e["event_type"] == kind]


def _demo(workdir: Path) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]], Path]:
    """`murmurd run --workdir DIR`: DIR is the capsule's `.`, the bookkeeping under DIR/.murmur/<id>."""
    proc = subprocess.run([sys.executable, "-m", "murmurd", "run", "examples/context-demo", "--task", TASK,
                           "--workdir", str(workdir)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    (book,) = (workdir / ".murmur").iterdir()
    trace = [json.loads(line) for line in (book / "trace.jsonl").read_text().splitlines()]
    return proc, trace, book


def test_the_context_demo_seeds_compacts_and_reopens_in_one_run(tmp_path: Path, built) -> None:
    workdir = tmp_path / "demo"
    (workdir / "memory").mkdir(parents=True)
    shutil.copyfile(EXAMPLES / "context-demo" / "memory" / "notes.md", workdir / "memory" / "notes.md")
    proc, trace, book = _demo(workdir)
    assert proc.returncode == 0, proc.stderr
    (seed,) = _events(trace, "context_seed")
    assert seed == {**seed, "hook_name": "memory-hook", "outcome": "summarized", "summarized_by": "compaction-hook",
                    "messages_offered": 3, "messages_committed": 3}
    assert seed["tokens_committed"] <= seed["budget_tokens"] == 120 < seed["tokens_offered"]
    (compaction,) = _events(trace, "compaction")
    assert compaction["tokens_after"] < compaction["tokens_before"]
    (summary,) = [json.loads(line) for line in (book / "out" / "compaction-summaries.jsonl").read_text().splitlines()]
    assert set(summary) == {"turn", "tokens_before", "tokens_after", "summary"}  # upstream's shape
    assert (summary["tokens_before"], summary["tokens_after"]) == (compaction["tokens_before"], compaction["tokens_after"])
    assert isinstance(summary["summary"], str) and summary["summary"].strip()
    (reopened,) = _events(trace, "task_reopened")
    assert reopened["hook_name"] == "gatekeeper-hook" and "VERIFIED" in reopened["reason"]
    hook_turns = [e for e in _events(trace, "inference") if e.get("origin") == "hook:compaction-hook"]
    assert len(hook_turns) == 2  # the seed's summary and the history's
    (end,) = _events(trace, "task_end")
    assert (end["exit_status"], end["reopen_count"]) == ("ok", 1)
    assert (book / "out" / "result.txt").read_text().splitlines()[-1] == "VERIFIED"
    assert "VERIFIED" in proc.stdout


def test_without_its_notes_the_memory_hook_seeds_nothing(tmp_path: Path, built) -> None:
    workdir = tmp_path / "demo"
    workdir.mkdir()
    proc, trace, _ = _demo(workdir)
    assert proc.returncode == 0, proc.stderr
    assert not _events(trace, "context_seed")
    assert len(_events(trace, "compaction")) == 1 and len(_events(trace, "task_reopened")) == 1


def _hook(name: str, **extra: Any) -> dict[str, Any]:
    return local(name, "hook", EXAMPLES / name, **extra)


@pytest.mark.anyio
@pytest.mark.parametrize("answers, reopens, status, result", [
    (["all good\nVERIFIED"], 0, "ok", "all good\nVERIFIED"),
    (["draft", "fixed\nVERIFIED"], 1, "ok", "fixed\nVERIFIED"),
    (["draft", "still a draft", "a third draft"], 1, "reopen_budget_exhausted", "still a draft"),
])
async def test_the_gatekeeper_reopens_until_the_marker_is_there(tmp_path: Path, host, built, answers: list[str],
                                                                reopens: int, status: str, result: str) -> None:
    staged = stage(hooked_capsule(tmp_path, [_hook("gatekeeper-hook")], [end_turn(a) for a in answers]), host, tmp_path)
    (outcome,) = await run_session(staged, host, "go")
    assert (outcome.exit_status, outcome.reopen_count, outcome.result_text) == (status, reopens, result)
    assert (staged.workdir.root / "out" / "result.txt").read_text() == result
    feedback = [m for m in outcome.messages if m.source_id == "hook:gatekeeper-hook"]
    assert len(feedback) == reopens


@pytest.mark.anyio
async def test_the_gatekeeper_leaves_a_failed_task_alone(tmp_path: Path, host, built) -> None:
    responses = [{"stop_reason": "error", "error": "the model is down"}]
    staged = stage(hooked_capsule(tmp_path, [_hook("gatekeeper-hook")], responses), host, tmp_path)
    (outcome,) = await run_session(staged, host, "go")
    assert outcome.exit_status == "failed" and outcome.reopen_count == 0
    assert not _events(trace_events(staged), "task_reopened")


@pytest.mark.anyio
async def test_the_memory_hook_without_a_granted_scope_or_a_budget_declines(tmp_path: Path, host, built) -> None:
    staged = stage(hooked_capsule(tmp_path / "a", [_hook("memory-hook")], [end_turn()],
                                  context={"max_tokens": 1000, "seed_budget": 0.5}), host, tmp_path / "a")
    (staged.workdir.root / "notes.md").write_text("a note\n")  # in the workdir, but no scope: unreachable
    (outcome,) = await run_session(staged, host, "go")
    assert outcome.ok and not _events(trace_events(staged), "context_seed")

    staged = stage(hooked_capsule(tmp_path / "b", [_hook("memory-hook", capabilities={"filesystem": {"scope": "memory"}})],
                                  [end_turn()]), host, tmp_path / "b")
    (staged.workdir.root / "memory").mkdir(exist_ok=True)
    (staged.workdir.root / "memory" / "notes.md").write_text("a note\n")
    (outcome,) = await run_session(staged, host, "go")
    assert outcome.ok and not _events(trace_events(staged), "context_seed")  # budget 0: it declines


@pytest.mark.anyio
async def test_the_memory_hook_seeds_each_paragraph_with_its_source(tmp_path: Path, host, built) -> None:
    hook = _hook("memory-hook", capabilities={"filesystem": {"scope": "memory"}})
    staged = stage(hooked_capsule(tmp_path, [hook], [end_turn()], context={"max_tokens": 1000, "seed_budget": 0.5}),
                   host, tmp_path)
    (staged.workdir.root / "memory").mkdir(exist_ok=True)
    (staged.workdir.root / "memory" / "notes.md").write_text("first note\nstill first\n\n\nsecond note\n")
    (outcome,) = await run_session(staged, host, "go")
    assert [(m.text, m.source_id) for m in outcome.messages[:2]] == [
        ("memory: first note\nstill first", "memory-hook:notes.md#1"), ("memory: second note", "memory-hook:notes.md#2")]
    assert _events(trace_events(staged), "context_seed")[0]["outcome"] == "committed"


@pytest.mark.anyio
async def test_the_compaction_hook_ends_the_session_when_its_summary_is_refused_at_the_spend_ceiling(
        tmp_path: Path, host, built) -> None:
    responses = [tool_call("c1", "echo", {"text": "x " * 200}), tool_call("c2", "echo", {"text": "y " * 200}),
                 end_turn()]
    staged = stage(hooked_capsule(tmp_path, [_hook("compaction-hook")], responses, context={"max_tokens": 700},
                                  inference={"max_session_tokens": 700}), host, tmp_path)
    (outcome,) = await run_session(staged, host, "go")
    assert outcome.exit_status == "spend_ceiling_reached", outcome.error
    assert "compaction hook compaction-hook failed" in outcome.error
    log = (staged.workdir.root / "logs" / "hook-compaction-hook.log").read_text()
    assert "the summary could not be written" in log and "session token ceiling" in log


@pytest.mark.anyio
async def test_the_compaction_hook_keeps_the_latest_tool_exchange_verbatim(tmp_path: Path, host, built) -> None:
    responses = [tool_call("c1", "echo", {"text": "x " * 200}), tool_call("c2", "echo", {"text": "y " * 200})]
    rules = [{"when": "Summarize", "response": end_turn("SHORT SUMMARY")},  # the hook's own completion
             {"when": "y y y", "response": end_turn("done")}]  # after the second answer, compacted or not
    capsule = hooked_capsule(tmp_path, [_hook("compaction-hook")], responses, context={"max_tokens": 700},
                             inference={"compaction": {"threshold": 0.9, "system_prompt": "Summarize, please."}})
    manifest_path = capsule / "murmur.yaml"
    manifest = yaml.safe_load(manifest_path.read_text())
    manifest["inference"]["driver"]["config"]["rules"] = rules
    manifest_path.write_text(yaml.safe_dump(manifest))
    staged = stage(capsule, host, tmp_path)
    (outcome,) = await run_session(staged, host, "go")
    assert outcome.ok, outcome.error
    (compaction,) = _events(trace_events(staged), "compaction")
    assert [m.role for m in outcome.messages] == ["user", "assistant", "tool", "assistant"]
    summary, call, answer, _ = outcome.messages
    assert summary.text.endswith("SHORT SUMMARY") and summary.source_id == "murmur-hook-compact:summary"
    assert call.tool_calls()[0]["id"] == "c2" and answer.tool_call_id == "c2"  # restored, still paired
    asked = [e for e in trace_events(staged) if e.get("origin") == "hook:compaction-hook"]
    assert len(asked) == 1 and compaction["turn"] == 1  # after turn 0 the front was the task alone: declined
    assert not hook_events(staged.workdir.root, "compaction-hook")  # it logs nothing of its own


@pytest.mark.anyio
@pytest.mark.parametrize("rules, error", [
    ("not a list", '"rules" must be a list'),
    ([{"when": "go", "response": "not an object"}], "is not a JSON object"),
])
async def test_the_scripted_driver_refuses_malformed_rules(tmp_path: Path, host, built, rules: Any, error: str) -> None:
    capsule = hooked_capsule(tmp_path, [], [end_turn()])
    manifest = yaml.safe_load((capsule / "murmur.yaml").read_text())
    manifest["inference"]["driver"]["config"]["rules"] = rules
    (capsule / "murmur.yaml").write_text(yaml.safe_dump(manifest))
    (outcome,) = await run_session(stage(capsule, host, tmp_path), host, "go")
    assert outcome.exit_status == "failed" and error in outcome.error


@pytest.mark.anyio
async def test_a_scripted_rule_matches_the_last_message_before_the_turn_count(tmp_path: Path, host, built) -> None:
    capsule = hooked_capsule(tmp_path, [], [end_turn("by count")])
    manifest = yaml.safe_load((capsule / "murmur.yaml").read_text())
    manifest["inference"]["driver"]["config"]["rules"] = [{"when": "magic", "response": end_turn("by rule")}]
    (capsule / "murmur.yaml").write_text(yaml.safe_dump(manifest))
    staged = stage(capsule, host, tmp_path)
    outcomes = await run_session(staged, host, "say the magic word", "plain")
    assert [o.result_text for o in outcomes] == ["by rule", "by count"]


def test_murmurd_run_reports_a_spent_reopen_budget_with_the_last_result(tmp_path: Path, built) -> None:
    capsule = hooked_capsule(tmp_path, [_hook("gatekeeper-hook")], [end_turn("draft"), end_turn("draft 2")])
    proc = subprocess.run([sys.executable, "-m", "murmurd", "run", str(capsule), "--task", "go", "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (report["exit_status"], report["result"]) == ("reopen_budget_exhausted", "draft 2")
    assert "hook gatekeeper-hook still asked to reopen the task" in report["error"]
