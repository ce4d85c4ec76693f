"""The bundled hooks through real sessions (issue 13, item 3): the debug log (async, upstream's
`hook-debug.jsonl` lines, issue 28), compaction with murmur-hook-compact 0.4.0 over a scripted long conversation (the
compaction model and prompt honoured, the published fallback), and memory-jsonl 0.3.0's log reloaded
at each task start."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from bundledkit import bundled, with_rules
from hookkit import end_turn, hook_log, hooked_capsule, run_session, tool_call
from loopkit import stage, trace_events
from murmurd.manifest.writing import dump_yaml
from murmurd.session.messages import Message, user_message
from murmurd.session.session import TaskSpec

DEBUG, COMPACT, MEMORY = "murmur-hook-debug", "murmur-hook-compact", "murmur-hook-memory-jsonl"


def _events(trace: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in trace if e["event_type"] == kind]


# -- murmur-hook-debug -------------------------------------------------------------------------


DEBUG_FIELDS = {
    "stage": {"shell_allow"},
    "session-start": {"capsule_name", "capsule_version", "session_id", "model", "capabilities"},
    "inference": {"turn", "input_tokens", "output_tokens", "decision", "tool_name"},
    "tool-call": {"turn", "tool_name", "input_bytes", "output_bytes", "duration_ms", "status"},
    "shell": {"turn", "command", "exit_code", "stdout_bytes", "stderr_bytes", "duration_ms"},
    "session-end": {"total_turns", "total_input_tokens", "total_output_tokens", "total_tool_calls",
                    "total_shell_calls", "duration_ms", "exit_status"},
}


@pytest.mark.anyio
async def test_the_debug_hook_appends_the_published_lines_to_hook_debug_jsonl(tmp_path: Path, host) -> None:
    responses = [tool_call("c1", "echo", {"text": "hi"}), tool_call("c2", "printf", {"command": "'%s' there"}),
                 end_turn("done")]
    entry = bundled(DEBUG, "hook", capabilities={"filesystem": {"scope": "."}})
    staged = stage(hooked_capsule(tmp_path, [entry], responses, capabilities={"shell": {"allow": ["printf"]}}),
                   host, tmp_path)
    assert staged.artifacts[DEBUG].resolved.manifest.execution_mode == "async"
    await run_session(staged, host, "go")
    raw = (staged.workdir.root / "hook-debug.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in raw]
    assert raw == [json.dumps(e, sort_keys=True, separators=(",", ":")) for e in events]  # serde_json's shape
    assert [e["event"] for e in events] == [
        "stage", "session-start", "inference", "tool-call", "inference", "tool-call", "shell", "inference",
        "session-end"]  # task start and end are not logged
    assert all(set(e) == DEBUG_FIELDS[e["event"]] | {"event"} for e in events)
    start, first, echo, _, shell_call, shell, last, end = events[1:]
    assert (start["session_id"], start["capsule_name"], start["model"]) == (staged.session_id, "loop-test", "scripted")
    assert (first["decision"], first["tool_name"], last["decision"], last["tool_name"]) == (
        "tool_call", "echo", "end_turn", None)
    assert (echo["tool_name"], echo["status"], echo["input_bytes"]) == ("echo", "ok", len(b'{"text": "hi"}'))
    assert shell_call["tool_name"] == "printf" and shell["exit_code"] == 0 and shell["stdout_bytes"] == len("there")
    assert (end["total_turns"], end["total_tool_calls"], end["total_shell_calls"], end["exit_status"]) == (3, 2, 1, "ok")
    assert events[0] == {"event": "stage", "shell_allow": ["printf"]}
    assert [e for e in trace_events(staged) if e["event_type"] == "hook_dispatch_error"] == []


@pytest.mark.anyio
async def test_the_debug_hook_without_a_scope_errs_as_published_and_the_session_goes_on(tmp_path: Path, host) -> None:
    staged = stage(hooked_capsule(tmp_path, [bundled(DEBUG, "hook")], [end_turn("done")]), host, tmp_path)
    (outcome,) = await run_session(staged, host, "go")
    assert outcome.ok and not list(staged.workdir.root.rglob("hook-debug.jsonl"))
    errors = [e for e in trace_events(staged) if e["event_type"] == "hook_dispatch_error"]
    assert errors and {(e["hook_name"], e["arm"]) for e in errors} == {(DEBUG, "error")}
    assert any("failed to open hook-debug.jsonl" in line for line in hook_log(staged.workdir.root, DEBUG))


# -- murmur-hook-compact -----------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_compact_hook_summarizes_a_long_conversation_with_the_compaction_model_and_prompt(
        tmp_path: Path, host) -> None:
    """The published 0.4.0: the whole conversation summarized into one `user` message."""
    calls = {word: tool_call(f"c{n}", "echo", {"text": f"{word} " * 150}) for n, word in enumerate("xyz")}
    capsule = hooked_capsule(tmp_path, [bundled(COMPACT, "hook", version="0.4.0")], [calls["x"]],
                             context={"max_tokens": 900},
                             inference={"compaction": {"threshold": 0.8, "model": "summarizer",
                                                       "system_prompt": "Compress this, please."}})
    # The compaction request ends with the published instruction; after it the model sees only the summary.
    with_rules(capsule, [{"when": "Compress this", "response": end_turn("SHORT SUMMARY")},
                         {"when": "SHORT SUMMARY", "response": end_turn("all done")},
                         {"when": "x x x", "response": calls["y"]}, {"when": "y y y", "response": calls["z"]}])
    staged = stage(capsule, host, tmp_path)
    assert staged.artifacts[COMPACT].resolved.version == "0.4.0"
    (outcome,) = await run_session(staged, host, "go")
    assert outcome.ok and outcome.result_text == "all done", outcome.error
    trace = trace_events(staged)
    (compaction,) = _events(trace, "compaction")
    assert compaction["tokens_after"] < compaction["tokens_before"]
    asked = [e for e in _events(trace, "inference") if e.get("origin") == f"hook:{COMPACT}"]
    assert [e["model"] for e in asked] == ["summarizer"]
    summary, answer = outcome.messages
    assert (summary.role, summary.text, summary.source_id) == ("user", "SHORT SUMMARY", f"{COMPACT}:summary")
    assert (answer.role, answer.text) == ("assistant", "all done")  # no tool exchange kept: all of it summarized


@pytest.mark.anyio
async def test_the_compact_hook_without_its_own_prompt_uses_its_default(tmp_path: Path, host) -> None:
    responses = [tool_call(f"c{i}", "echo", {"text": f"{word} " * 150}) for i, word in enumerate(("x", "y"))]
    capsule = hooked_capsule(tmp_path, [bundled(COMPACT, "hook")], responses, context={"max_tokens": 700},
                             inference={"compaction": {"threshold": 0.9}})
    with_rules(capsule, [{"when": "You are compacting an agent session so it can continue",
                          "response": end_turn("DEFAULT SUMMARY")},
                         {"when": "DEFAULT SUMMARY", "response": end_turn("done")},
                         {"when": "y y y", "response": end_turn("done")}])
    staged = stage(capsule, host, tmp_path)
    (outcome,) = await run_session(staged, host, "go")
    assert outcome.ok, outcome.error
    assert outcome.messages[0].text == "DEFAULT SUMMARY"
    asked = [e for e in _events(trace_events(staged), "inference") if e.get("origin") == f"hook:{COMPACT}"]
    assert {e["model"] for e in asked} == {"scripted"}  # no compaction model: the capsule's own


@pytest.mark.anyio
async def test_a_failed_compaction_retries_once_with_the_capsules_model_then_ends_the_session(
        tmp_path: Path, host) -> None:
    calls = [tool_call(f"c{i}", "echo", {"text": f"{word} " * 150}) for i, word in enumerate(("x", "y"))]
    capsule = hooked_capsule(tmp_path, [bundled(COMPACT, "hook")], calls, context={"max_tokens": 700},
                             inference={"compaction": {"threshold": 0.9, "model": "summarizer"}})
    # The published instruction ends the compaction request; a non-object response is a driver error.
    with_rules(capsule, [{"when": "Write the summary now.", "response": "not an object"}])
    staged = stage(capsule, host, tmp_path)
    (outcome,) = await run_session(staged, host, "go")
    assert not outcome.ok and f"compaction hook {COMPACT} failed" in outcome.error
    # Failed completions are not traced as inferences; the error names both attempts, in order.
    first, fallback = outcome.error.index("refused model 'summarizer'"), outcome.error.index("refused model 'scripted'")
    assert "compaction inference failed with model 'summarizer'" in outcome.error and first < fallback
    log = "\n".join(hook_log(staged.workdir.root, COMPACT))
    assert "compaction inference failed with model 'summarizer'" in log and "the capsule's primary model" in log


# -- murmur-hook-memory-jsonl ------------------------------------------------------------------


MEMORY_RULES = [{"when": "first question", "response": end_turn("first answer")},
                {"when": "second question", "response": end_turn("second answer")},
                {"when": "other question", "response": end_turn("other answer")}]
MEMORY_HEADER = "Memory Log \u2014 {} prior turn(s) recorded in this capsule's working history:\n\n"


def _memory_capsule(tmp_path: Path, **entry: Any) -> Path:
    capsule = hooked_capsule(tmp_path, [bundled(MEMORY, "hook", **entry)], [],
                             context={"max_tokens": 4000, "seed_budget": 0.5})
    return with_rules(capsule, MEMORY_RULES)


def _log(path: Path) -> tuple[list[str], list[dict[str, Any]]]:
    raw = path.read_text().splitlines()
    return raw, [json.loads(line) for line in raw]


def _turn_line(record: dict[str, Any]) -> str:
    tool = f" tool={record['tool_name']}" if "tool_name" in record else ""
    return f"[turn {record['turn']} \u00b7 {record['decision']}{tool}] {record.get('output', '')}"


@pytest.mark.anyio
async def test_memory_logs_each_turn_and_reloads_every_prior_turn_at_task_start(tmp_path: Path, host) -> None:
    """The published 0.3.0: `memory-log.jsonl` in the workdir, `kind`-tagged records, every earlier
    turn (any task, any context) reloaded as one `user` message."""
    entry = {"version": "0.3.0", "capabilities": {"filesystem": {"scope": "."}}}
    staged = stage(_memory_capsule(tmp_path, **entry), host, tmp_path)
    manifest = staged.artifacts[MEMORY].resolved.manifest
    assert (manifest.version, manifest.binding, manifest.execution_mode, manifest.commit_policy) == (
        "0.3.0", None, "blocking", "replace-context")
    first, second, other = await run_session(
        staged, host, TaskSpec("tsk_1", "first question", "ctx_a"), TaskSpec("tsk_2", "second question", "ctx_a"),
        TaskSpec("tsk_3", "other question", "ctx_b"))
    assert first.ok and second.ok and other.ok
    raw, records = _log(staged.workdir.root / "memory-log.jsonl")
    assert raw == [json.dumps(r, separators=(",", ":"), ensure_ascii=False) for r in records]  # serde's shape
    assert [r["kind"] for r in records] == ["task_open", "turn", "task_close"] * 3
    assert all(list(r)[0] == "kind" for r in records)
    assert list(records[0]) == ["kind", "task_id", "context_id", "source"]
    assert (records[0]["task_id"], records[0]["context_id"]) == ("tsk_1", "ctx_a")
    assert records[2] == {"kind": "task_close", "task_id": "tsk_1", "exit_status": "ok"}
    turn = records[1]
    assert [k for k in turn if k not in ("tool_name", "output")] == ["kind", "turn", "decision", "input_tokens",
                                                                     "output_tokens"]
    assert turn["decision"] == "end_turn" and "first answer" in turn.get("output", "")
    assert first.messages[0].text == "first question"  # nothing remembered yet: no seed
    seed = second.messages[0]
    assert (seed.role, seed.text) == ("user", MEMORY_HEADER.format(1) + _turn_line(turn))
    assert second.messages[1].text == "second question"
    assert other.messages[0].text == MEMORY_HEADER.format(2) + "\n".join(map(_turn_line, (turn, records[4])))
    seeds = _events(trace_events(staged), "context_seed")
    assert [(s["task_id"], s["outcome"], s["messages_committed"]) for s in seeds] == [
        ("tsk_2", "committed", 1), ("tsk_3", "committed", 1)]


@pytest.mark.anyio
async def test_memory_follows_its_log_path_variable_and_skips_lines_it_cannot_read(
        tmp_path: Path, host, monkeypatch) -> None:
    monkeypatch.setenv("MURMUR_MEMORY_LOG_PATH", "state/agent/memory.jsonl")
    entry = {"capabilities": {"filesystem": {"scope": "."}, "env": {"allow": ["MURMUR_MEMORY_LOG_PATH"]}}}
    staged = stage(_memory_capsule(tmp_path, **entry), host, tmp_path)
    log = staged.workdir.root / "state" / "agent" / "memory.jsonl"
    log.parent.mkdir(parents=True)
    old = {"kind": "turn", "turn": 4, "decision": "tool_call", "tool_name": "echo", "output": "earlier",
           "input_tokens": 10, "output_tokens": 2}
    log.write_text("\n".join([json.dumps(old), "", '{"kind": "tu', json.dumps({"kind": "turn", "turn": "x"}),
                              json.dumps({"kind": "task_close", "task_id": "t0", "exit_status": "ok"})]) + "\n")
    (outcome,) = await run_session(staged, host, TaskSpec("tsk_1", "first question", "ctx_a"))
    assert outcome.ok, outcome.error
    assert outcome.messages[0].text == MEMORY_HEADER.format(1) + "[turn 4 \u00b7 tool_call tool=echo] earlier"
    appended = [json.loads(line) for line in log.read_text().splitlines()[-3:]]
    assert [r["kind"] for r in appended] == ["task_open", "turn", "task_close"]
    assert not (staged.workdir.root / "memory-log.jsonl").exists()


@pytest.mark.anyio
async def test_memory_without_a_filesystem_scope_errs_as_published_and_the_task_goes_on(tmp_path: Path, host) -> None:
    staged = stage(_memory_capsule(tmp_path), host, tmp_path)
    first, second = await run_session(staged, host, TaskSpec("tsk_1", "first question", "ctx_a"),
                                      TaskSpec("tsk_2", "second question", "ctx_a"))
    assert first.ok and second.ok and second.messages[0].text == "second question"
    handlers = [line.split(f"hook {MEMORY}: ", 1)[1].split(" returned err")[0]
                for line in hook_log(staged.workdir.root, MEMORY) if "failed to open memory-log.jsonl" in line]
    assert handlers == ["on-task-start", "on-inference", "on-task-end"] * 2  # every append, both tasks
    assert not list(staged.workdir.root.rglob("memory-log.jsonl"))
