"""Compaction end to end (issue 10): a real driver pushes a session over the threshold, a real
hook commits `replace-context`, and the next request the driver receives holds the summary."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hookkit import hook_events, hook_ref, run_session
from loopkit import driver_capsule, local, stage, trace_events
from conftest import EXAMPLES
from murmurd.hooks.dispatcher import ContextArm
from murmurd.session.compaction import rebuild
from murmurd.session.messages import Message, tool_message, user_message
from murmurd.session.session import TaskSpec

pytestmark = pytest.mark.anyio

CTX = "ctx_" + "c" * 32
SUMMARY = "SUMMARY: the agent echoed twice"
DRIVER = {"steps": 4, "continuation": "hold", "finish_on": "SUMMARY"}


@pytest.fixture(scope="module")
def arm(artifacts) -> Path:  # type: ignore[no-untyped-def]
    return artifacts.fixture("arm-hook")


def _capsule(root: Path, arm: Path, monkeypatch, config: dict[str, Any], *, name: str = "compacting",
             context: dict[str, Any] | None = None, inference: dict[str, Any] | None = None) -> Path:
    monkeypatch.setenv("ARM_HOOK", json.dumps(config))
    hook = hook_ref(root, "summarizer", arm, config_var="ARM_HOOK")
    extra: dict[str, Any] = {"inference": inference or {}}
    if context is not None:
        extra["context"] = context
    return driver_capsule(root / name, "recorder-driver", DRIVER, name=name,
                          extra_artifacts=[local("echo", "tool", EXAMPLES / "echo"), hook], **extra)


def _inferences(trace: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in trace if e["event_type"] == "inference" and "origin" not in e]


async def _uncompacted_turns(tmp_path: Path, host, arm: Path, monkeypatch) -> list[dict[str, Any]]:
    """The `inference` lines of the same conversation with no window: what each turn counts."""
    staged = stage(_capsule(tmp_path / "measure", arm, monkeypatch, {}), host, tmp_path / "measure")
    await run_session(staged, host, TaskSpec("tsk_" + "0" * 32, "go", context_id=CTX))
    return _inferences(trace_events(staged))


def _records(workdir: Path) -> list[dict[str, Any]]:
    """The request records the recorder driver answered with, as the hook saw each response."""
    texts = ("".join(b.get("text", "") for b in json.loads(e["output"]) if b.get("type") == "text")
             for e in hook_events(workdir, "summarizer") if e["event"] == "on-inference")  # output: the content
    return [json.loads(text.split("\n")[0]) for text in texts]


async def test_a_session_over_the_threshold_is_compacted_before_its_next_request(tmp_path: Path, host, arm,
                                                                                monkeypatch) -> None:
    turns = await _uncompacted_turns(tmp_path, host, arm, monkeypatch)
    window = turns[2]["input_tokens"]  # what the third request counts: reached after turn 2, not turn 1
    assert turns[1]["input_tokens"] < window
    (tmp_path / "prompt.txt").write_text("Summarize tersely.")
    config = {"on-compaction": {"arm": "replace-context", "value": [["user", SUMMARY]]}}
    root = tmp_path / "run"
    directory = _capsule(root, arm, monkeypatch, config, context={"max_tokens": window},
                         inference={"compaction": {"threshold": 1.0, "model": "small-model", "dump_summaries": True,
                                                   "system_prompt_file": str(tmp_path / "prompt.txt")}})
    staged = stage(directory, host, root)
    (outcome,) = await run_session(staged, host, TaskSpec("tsk_" + "1" * 32, "go", context_id=CTX))
    assert outcome.ok, outcome.error
    trace = trace_events(staged)

    (compaction,) = [e for e in trace if e["event_type"] == "compaction"]
    inferences = _inferences(trace)
    assert compaction["turn"] == 1 and compaction["tokens_before"] == window  # turns count from 0
    assert compaction["tokens_after"] == inferences[2]["input_tokens"] < window  # recounted on what is sent

    (fired,) = [e for e in hook_events(staged.workdir.root, "summarizer") if e["event"] == "on-compaction"]
    assert fired["session_tokens"] == window and fired["threshold"] == 1.0
    assert (fired["model"], fired["system_prompt"]) == ("small-model", "Summarize tersely.")
    assert [m["role"] for m in fired["messages"]] == ["user", "assistant", "tool", "assistant", "tool"]
    assert all(m["id"].startswith("msg_") for m in fired["messages"])

    first, second, third = _records(staged.workdir.root)
    assert second["continuation_id"] == "cont-1"  # held before the compaction...
    assert third["continuation_id"] is None  # ...dropped by it: a full resend of the new history
    assert third["roles"] == ["user"] and third["texts"] == [SUMMARY]  # the summary, no old turns
    assert not any("step 0" in text for text in third["texts"])
    assert first["prompt_cache_key"] == second["prompt_cache_key"] == third["prompt_cache_key"]
    assert CTX in first["prompt_cache_key"]
    assert not any(r["has_ids"] for r in (first, second, third))  # id / source-id never reach the driver

    head = outcome.messages[0]
    assert (head.text, head.source_id) == (SUMMARY, "src:arm-hook") and head.id != "msg_from_hook"
    (line,) = (staged.workdir.root / "out" / "compaction-summaries.jsonl").read_text().splitlines()
    dumped = json.loads(line)
    # upstream's shape: exactly these four fields, the summary the hook's text verbatim
    assert dumped == {"turn": 1, "tokens_before": window, "tokens_after": compaction["tokens_after"], "summary": SUMMARY}


async def test_without_dump_summaries_no_summary_file_is_written(tmp_path: Path, host, arm, monkeypatch) -> None:
    config = {"on-compaction": {"arm": "replace-context", "value": [["user", SUMMARY]]}}
    staged = stage(_capsule(tmp_path, arm, monkeypatch, config, context={"max_tokens": 100}), host, tmp_path)
    (outcome,) = await run_session(staged, host, TaskSpec("tsk_" + "1" * 32, "go", context_id=CTX))
    assert outcome.ok and [e for e in trace_events(staged) if e["event_type"] == "compaction"]
    assert not (staged.workdir.root / "out" / "compaction-summaries.jsonl").exists()


@pytest.mark.parametrize("replacement, problem", [
    ([["user", SUMMARY], ["tool", '{"text": "step 0"}']], "answers no preceding tool call"),
    ([["user", SUMMARY], ["tool", "a made-up tool answer"]], "is not a verbatim tool answer"),
    ([], "empty replacement"),
    ([["user", "z " * 3000]], "it does not shrink the conversation"),
])
async def test_a_replacement_that_breaks_tool_pairing_is_refused_whole(tmp_path: Path, host, arm, monkeypatch,
                                                                       replacement: list[list[str]], problem: str) -> None:
    config = {"on-compaction": {"arm": "replace-context", "value": replacement}}
    staged = stage(_capsule(tmp_path, arm, monkeypatch, config, context={"max_tokens": 100}), host, tmp_path)
    (outcome,) = await run_session(staged, host, TaskSpec("tsk_" + "1" * 32, "go", context_id=CTX))
    assert outcome.ok  # the original history stays; the session goes on
    assert not [e for e in trace_events(staged) if e["event_type"] == "compaction"]
    assert [m.role for m in outcome.messages][:3] == ["user", "assistant", "tool"]
    notes = (staged.workdir.root / "logs" / "bootstrap.log").read_text()
    assert "compaction replacement from hook summarizer rejected whole" in notes and problem in notes


async def test_no_replacement_committed_leaves_the_history_and_notes_it(tmp_path: Path, host, arm, monkeypatch) -> None:
    staged = stage(_capsule(tmp_path, arm, monkeypatch, {}, context={"max_tokens": 100}), host, tmp_path)
    (outcome,) = await run_session(staged, host, TaskSpec("tsk_" + "1" * 32, "go", context_id=CTX))
    assert outcome.ok and len(outcome.messages) == 8  # four turns, three tool answers, the task
    assert "no compaction hook committed a replacement" in (staged.workdir.root / "logs" / "bootstrap.log").read_text()


@pytest.mark.parametrize("action", [{"do": "err"}, {"do": "trap"}])
async def test_an_on_compaction_error_ends_the_session_failed(tmp_path: Path, host, arm, monkeypatch,
                                                              action: dict[str, Any]) -> None:
    staged = stage(_capsule(tmp_path, arm, monkeypatch, {"on-compaction": action}, context={"max_tokens": 100}),
                   host, tmp_path)
    first, second = await run_session(staged, host, TaskSpec("tsk_" + "1" * 32, "go", context_id=CTX), "again")
    assert first.exit_status == "failed" and "compaction hook summarizer failed at turn 0" in first.error
    assert second.exit_status == "failed" and "the session has ended" in second.error
    trace = trace_events(staged)
    ends = [e for e in trace if e["event_type"] == "task_end"]
    # the second task is refused before it starts: no lines of its own
    assert [e["exit_status"] for e in ends] == ["failed"] and ends[0]["error"] == first.error
    assert [e["event_type"] for e in trace][-2:] == ["session_end", "task_end"]
    assert trace[-2]["exit_status"] == "failed"


async def test_an_on_compaction_error_after_a_refused_completion_ends_the_session_at_the_spend_ceiling(
        tmp_path: Path, host, arm, monkeypatch) -> None:
    turns = await _uncompacted_turns(tmp_path, host, arm, monkeypatch)
    spent = sum(t["input_tokens"] + t["output_tokens"] for t in turns[:2])
    config = {"on-compaction": {"do": "infer", "text": "summarize", "or": "err"}}
    root = tmp_path / "run"
    directory = _capsule(root, arm, monkeypatch, config, context={"max_tokens": turns[2]["input_tokens"]},
                         inference={"compaction": {"threshold": 1.0}, "max_session_tokens": spent})
    staged = stage(directory, host, root)
    (outcome,) = await run_session(staged, host, TaskSpec("tsk_" + "1" * 32, "go", context_id=CTX))
    assert outcome.exit_status == "spend_ceiling_reached", outcome.error
    assert "compaction hook summarizer failed at turn 1" in outcome.error
    (refused,) = [e for e in hook_events(staged.workdir.root, "summarizer") if "inference_error" in e]
    assert "session token ceiling" in refused["inference_error"]
    trace = trace_events(staged)
    assert not [e for e in trace if e["event_type"] == "compaction"]
    assert trace[-1]["exit_status"] == "spend_ceiling_reached"


# -- rebuild: what a hook handed back, made whole (pure) -----------------------------------------

def _call(call_id: str) -> Message:
    return Message("assistant", [{"type": "text", "text": "calling"},
                                 {"type": "tool_call", "id": call_id, "name": "echo", "input": {}}])


def test_messages_a_hook_hands_back_unchanged_keep_their_tool_structure() -> None:
    history = [user_message("task"), _call("c1"), tool_message("c1", "out 1", False), _call("c2"),
               tool_message("c2", "out 2", True)]
    summary = user_message("SUMMARY", source_id="sum")
    kept = [Message(m.role, m.content, id=f"msg_new{i}") for i, m in enumerate(history[3:])]
    rebuilt = rebuild(history, ContextArm("h", [summary, *kept], [summary.id, history[3].id, "msg_other"]))
    assert not isinstance(rebuilt, str)
    assert [m.role for m in rebuilt.messages] == ["user", "assistant", "tool"]
    assert rebuilt.messages[1].tool_calls()[0]["id"] == "c2"  # the call block, back from the original
    assert (rebuilt.messages[2].tool_call_id, rebuilt.messages[2].is_error) == ("c2", True)  # found by its text
    assert [m.id for m in rebuilt.messages] == [summary.id, "msg_new0", "msg_new1"]  # ids stay the fresh ones
    assert rebuilt.written == [summary]


def test_an_assistant_whose_id_is_unknown_is_plain_text_and_its_tool_answer_is_orphaned() -> None:
    history = [user_message("task"), _call("c1"), tool_message("c1", "out 1", False)]
    returned = [Message("assistant", [{"type": "text", "text": "calling"}]), tool_message("x", "out 1", False)]
    problem = rebuild(history, ContextArm("h", returned, ["msg_unknown", "msg_unknown2"]))
    assert problem == "tool answer 'c1' answers no preceding tool call"


def test_a_kept_call_without_its_answer_is_refused() -> None:
    history = [user_message("task"), _call("c1"), tool_message("c1", "out 1", False)]
    returned = [Message("assistant", [{"type": "text", "text": "calling"}])]
    assert rebuild(history, ContextArm("h", returned, [history[1].id])) == "tool call(s) c1 have no tool answer"


def test_a_message_with_an_unknown_role_is_refused() -> None:
    returned = [Message("system", [{"type": "text", "text": "obey"}])]
    assert rebuild([user_message("task")], ContextArm("h", returned, ["x"])) == "message 1 (role 'system') has no known role"


async def test_a_refused_summaries_file_costs_the_line_not_the_compaction(tmp_path: Path, host, arm, monkeypatch) -> None:
    config = {"on-compaction": {"arm": "replace-context", "value": [["user", SUMMARY]]}}
    staged = stage(_capsule(tmp_path, arm, monkeypatch, config, context={"max_tokens": 100},
                            inference={"compaction": {"dump_summaries": True}}), host, tmp_path)
    target = tmp_path / "elsewhere.jsonl"
    (staged.workdir.root / "out").mkdir(exist_ok=True)  # made with the first result, or by a guest that plants
    (staged.workdir.root / "out" / "compaction-summaries.jsonl").symlink_to(target)
    (outcome,) = await run_session(staged, host, TaskSpec("tsk_" + "1" * 32, "go", context_id=CTX))
    assert outcome.ok and [e for e in trace_events(staged) if e["event_type"] == "compaction"]
    assert not target.exists()  # never written through the planted link
    assert "out/compaction-summaries.jsonl not written" in (staged.workdir.root / "logs" / "bootstrap.log").read_text()
