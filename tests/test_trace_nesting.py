"""Upstream's trace nesting (issue 12 item 4, observability fact sheet §1-§4): one
`session_start` / `session_end` pair per agent-loop attempt, inside the task; `task_reopened`
between attempts; `turn` zero-based per attempt; `max_turns` the budget left; `session_end`
totals cumulative over the session (the last equals the sum of every `task_end`); hook faults
written just before the `session_end` they precede; one `capsule.session` span per attempt.
The hooks follow the seed instead: `on-session-start` once when the session opens, before the
first task's `on-task-start`; `on-session-end` once when it closes; one `session-id` throughout.

Real parts throughout: the scripted driver, the echo tool and two arm-hook components (a
blocking `reopen-task` gate, an async hook whose every `on-inference` errs), a loopback OTLP
collector.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hookkit import end_turn, faults, hook_events, hook_ref, hooked_capsule, run_session, tool_call
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

    # the hooks hear the seed's order, not the trace's: one on-session-start before the first
    # task's on-task-start, one on-session-end at the close, each attempt's on-task-end between
    events = hook_events(staged.workdir.root, "noisy")[1:]  # after on-stage
    attempt_one = ["on-task-start", "on-inference", "on-tool-call", "on-inference", "on-task-end"]
    reopened = ["on-inference", "on-task-end"]
    assert [e["event"] for e in events] == (
        ["on-session-start"] + (attempt_one + reopened) * 2 + ["on-session-end"])
    assert events[0]["session_id"] == staged.session_id == trace[0]["session_id"]  # one id for the run
    end = events[-1]  # the session's totals, as the last session_end
    assert (end["exit_status"], end["total_turns"], end["total_input_tokens"]) == (
        "ok", ends[-1]["total_turns"], ends[-1]["total_input_tokens"])
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
    assert names == ["on-session-start", "on-task-start", "on-inference", "on-tool-call", "on-inference",
                     "on-tool-call", "on-task-end", "on-session-end"]
    assert [e["exit_status"] for e in hook_events(staged.workdir.root, "noisy") if e["event"] == "on-task-end"] == [
        "max_turns_reached"]


async def test_the_closing_phase_drains_then_writes_its_faults_after_the_last_session_end(
        tmp_path: Path, host, arm: Path, monkeypatch) -> None:
    """At close: on-session-end, the final drain, the instances freed. A fault of that phase (an
    async on-session-end that errs, a blocking one returning an arm it cannot commit) has no later
    `session_end` to precede, so it is the trace's last line; the attempt's own faults precede
    its `session_end` (an async hook's is held until then). A blocking hook's fault is traced when
    it happens: its on-session-start fault comes before the first task."""
    monkeypatch.setenv("ARM_HOOK_LATE", json.dumps({"on-session-end": {"do": "err"}, "on-inference": {"do": "err"}}))
    monkeypatch.setenv("ARM_HOOK_LOUD", json.dumps({"on-session-start": {"arm": "artifact", "value": {}},
                                                    "on-session-end": {"arm": "reopen-task", "value": "no"}}))
    late = hook_ref(tmp_path, "late", arm, config_var="ARM_HOOK_LATE", mode="async")
    loud = hook_ref(tmp_path, "loud", arm, config_var="ARM_HOOK_LOUD")
    staged = stage(hooked_capsule(tmp_path, [loud, late], [end_turn("one"), end_turn("two")]), host, tmp_path)
    await run_session(staged, host, "one", "two")
    trace = trace_events(staged)
    fault = "hook_dispatch_error"
    assert [e["event_type"] for e in trace] == [
        fault, "task_start", "session_start", "inference", fault, "session_end", "task_end",
        "task_start", "session_start", "inference", fault, "session_end", "task_end",
        fault, fault]
    assert faults(trace) == [("loud", "on-session-start", "artifact"), ("late", "on-inference", "error"),
                             ("late", "on-inference", "error"),
                             ("loud", "on-session-end", "reopen-task"), ("late", "on-session-end", "error")]
    for name in ("late", "loud"):
        names = [e["event"] for e in hook_events(staged.workdir.root, name)[1:]]
        assert names == ["on-session-start", "on-task-start", "on-inference", "on-task-end",
                         "on-task-start", "on-inference", "on-task-end", "on-session-end"], name


async def test_a_session_that_runs_no_task_still_starts_and_ends_once(tmp_path: Path, host, arm: Path,
                                                                     monkeypatch) -> None:
    """Once per launch, tasks or not: the trace stays empty (no attempt), the hooks hear the pair."""
    monkeypatch.setenv("ARM_HOOK_NOISY", json.dumps({}))
    noisy = hook_ref(tmp_path, "noisy", arm, config_var="ARM_HOOK_NOISY", mode="async")
    staged = stage(hooked_capsule(tmp_path, [noisy], [end_turn("unused")]), host, tmp_path)
    assert await run_session(staged, host) == []
    assert trace_events(staged) == []
    events = hook_events(staged.workdir.root, "noisy")[1:]
    assert [e["event"] for e in events] == ["on-session-start", "on-session-end"]
    assert events[-1]["total_turns"] == 0
