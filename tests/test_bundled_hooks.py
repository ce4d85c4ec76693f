"""The bundled hooks through real sessions (issue 13, item 3): the debug log (async, upstream's
`hook-debug.jsonl` lines, issue 28), compaction with murmur-hook-compact 0.4.0 over a scripted long conversation (the
compaction model and prompt honoured, the published fallback), and memory-jsonl across two tasks of one context."""

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


def _memory_capsule(tmp_path: Path, conversation: str = "stateless", **entry: Any) -> Path:
    capsule = hooked_capsule(tmp_path, [bundled(MEMORY, "hook", **entry)], [],
                              context={"max_tokens": 4000, "seed_budget": 0.5},
                              lifecycle={"conversation": conversation})
    return with_rules(capsule, MEMORY_RULES)


def _records(root: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (root / "memory" / "memory.jsonl").read_text().splitlines()]


@pytest.mark.anyio
async def test_memory_remembers_each_turn_and_seeds_the_next_task_of_the_context(tmp_path: Path, host) -> None:
    staged = stage(_memory_capsule(tmp_path, capabilities={"filesystem": {"scope": "memory"}}), host, tmp_path)
    first, second, other = await run_session(
        staged, host, TaskSpec("tsk_1", "first question", "ctx_a"), TaskSpec("tsk_2", "second question", "ctx_a"),
        TaskSpec("tsk_3", "other question", "ctx_b"))
    assert first.ok and second.ok and other.ok
    assert [(m.role, m.text, m.source_id) for m in second.messages[:2]] == [
        ("user", "first question", "memory-jsonl:tsk_1"), ("assistant", "first answer", "memory-jsonl:tsk_1")]
    assert second.messages[2].text == "second question"
    assert [m.text for m in other.messages] == ["other question", "other answer"]  # another context: nothing
    seeds = _events(trace_events(staged), "context_seed")
    assert [(s["task_id"], s["outcome"], s["messages_committed"]) for s in seeds] == [("tsk_2", "committed", 2)]
    records = _records(staged.workdir.root)
    assert [(r["type"], r["task_id"], r.get("role")) for r in records] == [
        ("turn", "tsk_1", "user"), ("turn", "tsk_1", "assistant"), ("task_end", "tsk_1", None),
        ("turn", "tsk_2", "user"), ("turn", "tsk_2", "assistant"), ("task_end", "tsk_2", None),
        ("turn", "tsk_3", "user"), ("turn", "tsk_3", "assistant"), ("task_end", "tsk_3", None)]
    assert {r["context_id"] for r in records[:6]} == {"ctx_a"} and records[2]["exit_status"] == "ok"


@pytest.mark.anyio
async def test_memory_does_not_repeat_a_threaded_history_the_runtime_loaded(tmp_path: Path, host) -> None:
    capsule = _memory_capsule(tmp_path, "threaded", capabilities={"filesystem": {"scope": "memory"}})
    staged = stage(capsule, host, tmp_path)
    history = [user_message("first question"), Message("assistant", [{"type": "text", "text": "first answer"}])]
    first, second = await run_session(staged, host, TaskSpec("tsk_1", "first question", "ctx_a"),
                                      TaskSpec("tsk_2", "second question", "ctx_a", history=history))
    assert first.ok and second.ok
    assert not _events(trace_events(staged), "context_seed")
    assert [m.text for m in second.messages[:3]] == ["first question", "first answer", "second question"]


@pytest.mark.anyio
async def test_memory_skips_a_torn_line_and_seeds_nothing_without_a_budget(tmp_path: Path, host) -> None:
    capsule = _memory_capsule(tmp_path, capabilities={"filesystem": {"scope": "memory"}})
    path = capsule / "murmur.yaml"
    manifest = yaml.safe_load(path.read_text())
    staged = stage(capsule, host, tmp_path)
    (staged.workdir.root / "memory" / "memory.jsonl").write_text(
        '{"type": "turn", "context_id": "ctx_a", "task_id": "old", "role": "user", "content": "kept"}\n{"type": "tu\n')
    (outcome,) = await run_session(staged, host, TaskSpec("tsk_1", "first question", "ctx_a"))
    assert [m.text for m in outcome.messages[:2]] == ["kept", "first question"]
    del manifest["context"]
    path.write_text(dump_yaml(manifest))
    unbudgeted = stage(capsule, host, tmp_path)
    (unbudgeted.workdir.root / "memory").mkdir(exist_ok=True)
    (unbudgeted.workdir.root / "memory" / "memory.jsonl").write_text(
        (staged.workdir.root / "memory" / "memory.jsonl").read_text())
    (outcome,) = await run_session(unbudgeted, host, TaskSpec("tsk_2", "second question", "ctx_a"))
    assert [m.text for m in outcome.messages] == ["second question", "second answer"]


@pytest.mark.anyio
async def test_memory_without_a_filesystem_scope_keeps_nothing_and_says_so_once(tmp_path: Path, host) -> None:
    staged = stage(_memory_capsule(tmp_path), host, tmp_path)
    first, second = await run_session(staged, host, TaskSpec("tsk_1", "first question", "ctx_a"),
                                      TaskSpec("tsk_2", "second question", "ctx_a"))
    assert first.ok and second.ok and second.messages[0].text == "second question"
    warnings = [line for line in hook_log(staged.workdir.root, MEMORY) if "cannot write memory.jsonl" in line]
    assert len(warnings) == 1 and "capabilities.filesystem.scope" in warnings[0]
    assert not list(staged.workdir.root.rglob("memory.jsonl"))
