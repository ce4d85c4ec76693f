"""A hook that errs, traps or overruns its deadline is logged and the session goes on; at a
decision point it denies the call (fail closed). Async queues: ordered, bounded (`drop` counts
and traces, `block` applies back-pressure), drained before `session_end` within a budget."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from hookkit import end_turn, faults, hook_events, hook_ref, hooked_capsule, run_session, runtime_lines, tool_call
from loopkit import stage, trace_events
from murmurd.hooks.dispatch import DispatchSettings

pytestmark = pytest.mark.anyio

SCRIPT = [tool_call("c1", "echo", {"text": "x"}), tool_call("c2", "printf", {"command": "hi"}), end_turn("all done")]


@pytest.fixture(scope="module")
def arm(artifacts) -> Path:  # type: ignore[no-untyped-def]
    return artifacts.fixture("arm-hook")


def _capsule(tmp_path: Path, arm: Path, monkeypatch, config: dict[str, Any], mode: str = "blocking", *,
             binding: str | None = None, policy: str = "none", deadline: int | None = None, overflow: str | None = None,
             responses: list[dict[str, Any]] | None = None, **extra: Any) -> Path:
    monkeypatch.setenv("ARM_HOOK", json.dumps(config))
    caps = {"limits": {"deadline_seconds": deadline}} if deadline else None
    hook = hook_ref(tmp_path, "flaky", arm, binding=binding, mode=mode, policy=policy, config_var="ARM_HOOK",
                    capabilities=caps, overflow=overflow)
    extra.setdefault("capabilities", {"shell": {"allow": ["printf"]}})
    return hooked_capsule(tmp_path, [hook], responses or SCRIPT, **extra)


def _names(root: Path) -> list[str]:
    return [e["event"] for e in hook_events(root, "flaky")]


# -- a hook's own failures --------------------------------------------------------------------

@pytest.mark.parametrize("mode, traced", [("blocking", []), ("async", [("flaky", "on-inference", "error")] * 3)])
async def test_an_erroring_hook_is_logged_and_the_session_continues(tmp_path: Path, host, arm, monkeypatch,
                                                                   mode: str, traced: list) -> None:
    staged = stage(_capsule(tmp_path, arm, monkeypatch, {"on-inference": {"do": "err"}}, mode), host, tmp_path)
    (outcome,) = await run_session(staged, host, "go")
    assert outcome.ok and outcome.result_text == "all done"
    lines = runtime_lines(staged.workdir.root, "flaky")
    assert sum("on-inference" in line and "returned err: on-inference failed on purpose" in line for line in lines) == 3
    trace = trace_events(staged)
    assert faults(trace) == traced
    # faults are written just before the session_end they precede
    assert [e["event_type"] for e in trace][-2 - len(traced):] == ["hook_dispatch_error"] * len(traced) + [
        "session_end", "task_end"]
    # still dispatched after its errors: the task's end, then the attempt's
    assert _names(staged.workdir.root)[-2:] == ["on-task-end", "on-session-end"]


@pytest.mark.parametrize("mode, traced", [("blocking", []), ("async", [("flaky", "on-task-start", "error")])])
async def test_a_trapping_hook_is_logged_and_gets_a_fresh_instance(tmp_path: Path, host, arm, monkeypatch,
                                                                  mode: str, traced: list) -> None:
    staged = stage(_capsule(tmp_path, arm, monkeypatch, {"on-task-start": {"do": "trap"}}, mode), host, tmp_path)
    (outcome,) = await run_session(staged, host, "go")
    assert outcome.ok
    assert any("on-task-start failed: trap" in line for line in runtime_lines(staged.workdir.root, "flaky"))
    assert faults(trace_events(staged)) == traced
    events = hook_events(staged.workdir.root, "flaky")[1:]  # after on-stage
    assert [e["event"] for e in events[:2]] == ["on-session-start", "on-task-start"]
    assert [e["n"] for e in events[:3]] == [1, 2, 1]  # the trap cost the instance its state: a fresh one


@pytest.mark.parametrize("mode, traced", [("blocking", []), ("async", [("flaky", "on-task-start", "timeout")])])
async def test_a_hook_past_its_deadline_is_logged_and_the_session_continues(tmp_path: Path, host, arm, monkeypatch,
                                                                           mode: str, traced: list) -> None:
    staged = stage(_capsule(tmp_path, arm, monkeypatch, {"on-task-start": {"do": "hang"}}, mode, deadline=1),
                   host, tmp_path)
    started = time.monotonic()
    (outcome,) = await run_session(staged, host, "go")
    assert outcome.ok and time.monotonic() - started < 15
    assert any("on-task-start failed: deadline exceeded after 1 s" in line
               for line in runtime_lines(staged.workdir.root, "flaky"))
    assert faults(trace_events(staged)) == traced
    assert "on-session-end" in _names(staged.workdir.root)


@pytest.mark.parametrize("failure", [{"do": "trap"}, {"do": "err"}, {"do": "hang"}])
async def test_a_failing_policy_hook_denies_the_call_fail_closed(tmp_path: Path, host, arm, monkeypatch,
                                                                 failure: dict[str, str]) -> None:
    config = {"on-shell@decision": failure}
    staged = stage(_capsule(tmp_path, arm, monkeypatch, config, binding="on-shell", policy="deny", deadline=1),
                   host, tmp_path)
    (outcome,) = await run_session(staged, host, "go")
    assert outcome.ok
    answer = next(m for m in outcome.messages if m.role == "tool" and m.tool_call_id == "c2")
    assert answer.is_error and answer.text.startswith("denied by hook flaky: the policy hook failed (")
    assert answer.text.endswith("; denied (fail closed)")
    trace = trace_events(staged)
    (denial,) = [e for e in trace if e["event_type"] == "call_denied"]
    assert "fail closed" in denial["reason"] and denial["hook_name"] == "flaky"
    assert not [e for e in trace if e["event_type"] == "shell"]  # the call was not made


# -- async queues ---------------------------------------------------------------------------------

MANY = [tool_call(f"c{i}", "echo", {"text": str(i)}) for i in range(8)] + [end_turn()]


async def test_an_async_queue_never_reorders_and_never_runs_a_hook_concurrently_with_itself(
        tmp_path: Path, host, arm, monkeypatch) -> None:
    staged = stage(_capsule(tmp_path, arm, monkeypatch, {"on-tool-call": {"do": "sleep", "ms": 30}}, "async",
                            responses=MANY), host, tmp_path)
    await run_session(staged, host, "go")
    calls = [e for e in hook_events(staged.workdir.root, "flaky") if e["event"] == "on-tool-call"]
    assert [json.loads(e["input"])["text"] for e in calls] == [str(i) for i in range(8)]
    session_events = hook_events(staged.workdir.root, "flaky")[1:]
    assert [e["n"] for e in session_events] == list(range(1, len(session_events) + 1))
    assert faults(trace_events(staged)) == []


async def test_an_async_queue_under_drop_counts_and_traces_what_it_drops(tmp_path: Path, host, arm, monkeypatch) -> None:
    staged = stage(_capsule(tmp_path, arm, monkeypatch, {"on-inference": {"do": "sleep", "ms": 400}}, "async",
                            binding="on-inference", overflow="drop", responses=MANY), host, tmp_path)
    await run_session(staged, host, "go", settings=DispatchSettings(queue_bound=1, drain_budget=30))
    delivered = len(hook_events(staged.workdir.root, "flaky"))
    dropped = faults(trace_events(staged))
    assert dropped and set(dropped) == {("flaky", "on-inference", "queue-overflow")}
    assert delivered + len(dropped) == 9  # every driver response: delivered or counted as dropped
    lines = [line for line in runtime_lines(staged.workdir.root, "flaky") if "queue-overflow" in line]
    assert len(lines) == len(dropped) and lines[-1].endswith(f"({len(dropped)} dropped so far)")


async def test_an_async_queue_under_block_applies_back_pressure(tmp_path: Path, host, arm, monkeypatch) -> None:
    staged = stage(_capsule(tmp_path, arm, monkeypatch, {"on-inference": {"do": "sleep", "ms": 150}}, "async",
                            binding="on-inference", overflow="block", responses=MANY), host, tmp_path)
    started = time.monotonic()
    await run_session(staged, host, "go", settings=DispatchSettings(queue_bound=1, drain_budget=30))
    assert time.monotonic() - started >= 9 * 0.15 * 0.8  # the loop waited for room
    assert len(hook_events(staged.workdir.root, "flaky")) == 9 and faults(trace_events(staged)) == []


async def test_a_hook_still_running_when_the_drain_budget_ends_is_abandoned_and_traced(
        tmp_path: Path, host, arm, monkeypatch) -> None:
    staged = stage(_capsule(tmp_path, arm, monkeypatch, {"on-session-end": {"do": "hang"}}, "async"), host, tmp_path)
    started = time.monotonic()
    (outcome,) = await run_session(staged, host, "go", settings=DispatchSettings(drain_budget=1))
    assert outcome.ok and time.monotonic() - started < 10  # the hook's own deadline is 30 s
    trace = trace_events(staged)
    assert faults(trace) == [("flaky", "drain", "timeout")]
    order = [e["event_type"] for e in trace]
    assert order[-3:] == ["hook_dispatch_error", "session_end", "task_end"]  # just before its session_end
    assert any("hook flaky: drain timeout: still running after the 1 s drain budget" in line
               for line in runtime_lines(staged.workdir.root, "flaky"))


async def test_every_queue_drains_before_session_end(tmp_path: Path, host, arm, monkeypatch) -> None:
    staged = stage(_capsule(tmp_path, arm, monkeypatch, {"on-tool-call": {"do": "sleep", "ms": 100}}, "async",
                            responses=MANY), host, tmp_path)
    await run_session(staged, host, "go")
    names = _names(staged.workdir.root)
    assert names.count("on-tool-call") == 8 and names[-1] == "on-session-end"
