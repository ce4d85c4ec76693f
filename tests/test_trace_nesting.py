"""Upstream's trace nesting (issue 12 item 4, observability fact sheet §1-§4): one
`session_start` / `session_end` pair per agent-loop attempt, inside the task; `task_reopened`
between attempts; `turn` zero-based per attempt; `max_turns` the budget left; `session_end`
totals cumulative over the session (the last equals the sum of every `task_end`); hook faults
written just before the `session_end` they precede; one `capsule.session` span per attempt.

Real parts throughout: the scripted driver, the echo tool and two arm-hook components (a
blocking `reopen-task` gate, an async hook whose every `on-inference` errs), a loopback OTLP
collector.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hookkit import end_turn, hook_events, hook_ref, hooked_capsule, run_session, tool_call
from loopkit import stage, trace_events
from murmurd.session.session import TaskSpec

pytestmark = pytest.mark.anyio

FEEDBACK = "not yet; once more"
TOTALS = {"turns": "total_turns", "input_tokens": "total_input_tokens", "output_tokens": "total_output_tokens",
          "tool_calls": "total_tool_calls", "shell_calls": "total_shell_calls"}


@pytest.fixture(scope="module")
def arm(artifacts) -> Path:  # type: ignore[no-untyped-def]
    artifacts.example("echo")
    artifacts.example("scripted-driver")
    return artifacts.fixture("arm-hook")


def _capsule(root: Path, arm: Path, monkeypatch, **extra: Any) -> Path:
    monkeypatch.setenv("ARM_HOOK_GATE", json.dumps({"on-task-end": {"arm": "reopen-task", "value": FEEDBACK}}))
    monkeypatch.setenv("ARM_HOOK_NOISY", json.dumps({"on-inference": {"do": "err"}}))
    gate = hook_ref(root, "gate", arm, config_var="ARM_HOOK_GATE", binding="on-task-end", policy="reopen-task")
    noisy = hook_ref(root, "noisy", arm, config_var="ARM_HOOK_NOISY", mode="async")
    # attempt 1: a tool call, then an answer; the reopened attempt answers at once
    responses = [tool_call("c1", "echo", {"text": "hi"}), end_turn("first"), end_turn("second")]
    return hooked_capsule(root, [gate, noisy], responses, lifecycle={"max_task_reopens": 1}, **extra)


def _of(trace: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in trace if e["event_type"] == kind]


async def test_a_reopened_task_and_a_second_task_nest_their_sessions_inside_each_task(
        tmp_path: Path, host, arm: Path, monkeypatch) -> None:
    from test_otel import Collector

    collector = Collector()
    try:
        staged = stage(_capsule(tmp_path, arm, monkeypatch, observability={"otel_endpoint": collector.url}),
                       host, tmp_path)
        first, second = await run_session(staged, host, TaskSpec("tsk_" + "a" * 32, "one"),
                                          TaskSpec("tsk_" + "b" * 32, "two"))
        spans = collector.named("capsule.session")
        inferences = collector.named("capsule.inference")
    finally:
        collector.close()
    assert (first.exit_status, first.reopen_count, first.result_text) == ("reopen_budget_exhausted", 1, "second")
    assert (second.exit_status, second.reopen_count) == ("reopen_budget_exhausted", 1)

    trace = trace_events(staged)
    kinds = [e["event_type"] for e in trace]
    fault = "hook_dispatch_error"
    # each attempt: its session pair, the async hook's faults (one per inference) written just
    # before its session_end; the reopen between the pairs; the budget's end before task_end
    one_task = ["task_start",
                "session_start", "inference", "tool_call", "inference", fault, fault, "session_end",
                "task_reopened",
                "session_start", "inference", fault, "session_end",
                "reopen_budget_exhausted", "task_end"]
    assert kinds == one_task * 2
    assert {(e["hook_name"], e["event"], e["arm"]) for e in _of(trace, fault)} == {("noisy", "on-inference", "error")}

    starts, ends, task_ends = _of(trace, "session_start"), _of(trace, "session_end"), _of(trace, "task_end")
    assert [e["max_turns"] for e in starts] == [10, 8, 10, 8]  # what each attempt had left of max_turns
    assert [e["turn"] for e in _of(trace, "inference")] == [0, 1, 0, 0, 1, 0]  # zero-based, per attempt
    assert [e["exit_status"] for e in ends] == ["ok"] * 4
    assert [e["total_turns"] for e in ends] == [2, 3, 5, 6]  # cumulative over the whole session
    assert [e["turns"] for e in task_ends] == [3, 3]  # per task, over its attempts
    for counter, total in TOTALS.items():  # the last session_end is the sum of every task_end
        assert ends[-1][total] == sum(e[counter] for e in task_ends), counter
    assert ends[1][TOTALS["input_tokens"]] == task_ends[0]["input_tokens"]  # and each task's last, so far

    # one capsule.session span per attempt, each its own trace; a turn's span under its attempt's
    assert len(spans) == 4 and len({s["trace_id"] for s in spans}) == 4
    assert [s["attributes"]["exit_status"].string_value for s in spans] == ["ok"] * 4
    per_span = [sum(i["parent"] == s["span_id"] for i in inferences) for s in spans]
    assert sorted(per_span) == [1, 1, 2, 2] and len(inferences) == 6

    # the hooks hear the same nesting: every task event inside an on-session-start .. on-session-end
    names = [e["event"] for e in hook_events(staged.workdir.root, "noisy")[1:]]  # after on-stage
    attempt_one = ["on-session-start", "on-task-start", "on-inference", "on-tool-call", "on-inference",
                   "on-task-end", "on-session-end"]
    attempt_two = ["on-session-start", "on-inference", "on-task-end", "on-session-end"]
    assert names == (attempt_one + attempt_two) * 2
    gate = [(e["event"], e["task_id"]) for e in hook_events(staged.workdir.root, "gate")]
    assert gate == [("on-task-end", first.task_id)] * 2 + [("on-task-end", second.task_id)] * 2


async def test_a_failing_attempt_still_ends_its_session_before_the_task_ends(
        tmp_path: Path, host, arm: Path, monkeypatch) -> None:
    """max_turns spent inside an attempt: session_end carries the attempt's status, then task_end."""
    monkeypatch.setenv("ARM_HOOK_NOISY", json.dumps({}))
    noisy = hook_ref(tmp_path, "noisy", arm, config_var="ARM_HOOK_NOISY")
    loop = [tool_call(f"c{i}", "echo", {"text": str(i)}) for i in range(5)]
    staged = stage(hooked_capsule(tmp_path, [noisy], loop, inference={"max_turns": 2}), host, tmp_path)
    (outcome,) = await run_session(staged, host, "spin")
    assert outcome.exit_status == "max_turns_reached"
    trace = trace_events(staged)
    assert [e["event_type"] for e in trace] == ["task_start", "session_start", "inference", "tool_call", "inference",
                                                "tool_call", "session_end", "task_end"]
    assert trace[-2]["exit_status"] == trace[-1]["exit_status"] == "max_turns_reached"
    names = [e["event"] for e in hook_events(staged.workdir.root, "noisy")[1:]]
    assert names[:2] == ["on-session-start", "on-task-start"] and names[-2:] == ["on-task-end", "on-session-end"]
    assert [e["exit_status"] for e in hook_events(staged.workdir.root, "noisy") if e["event"] == "on-task-end"] == [
        "max_turns_reached"]
