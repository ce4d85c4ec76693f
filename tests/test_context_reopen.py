"""`reopen-task` (issue 10): reopens counted, the budget (both manifest names), `max_turns`
across attempts, and over A2A a task that stays `working` until its last attempt ends."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from a2akit import serving
from hookkit import end_turn, hook_events, hook_ref, hooked_capsule, run_session
from loopkit import stage, trace_events

FEEDBACK = "the result lacks the marker; try again"
RESPONSES = [end_turn("first"), end_turn("second"), end_turn("third"), end_turn("fourth")]


@pytest.fixture(scope="module")
def arm(artifacts) -> Path:  # type: ignore[no-untyped-def]
    artifacts.example("echo")
    artifacts.example("scripted-driver")
    return artifacts.fixture("arm-hook")


def _capsule(root: Path, arm: Path, monkeypatch, **extra: Any) -> Path:
    monkeypatch.setenv("ARM_HOOK", json.dumps({"on-task-end": {"arm": "reopen-task", "value": FEEDBACK}}))
    hook = hook_ref(root, "gate", arm, config_var="ARM_HOOK", binding="on-task-end", policy="reopen-task")
    return hooked_capsule(root, [hook], RESPONSES, **extra)


def _events(trace: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in trace if e["event_type"] == kind]


@pytest.mark.anyio
async def test_reopens_are_counted_until_the_budget_runs_out_and_the_last_result_stands(tmp_path: Path, host, arm,
                                                                                        monkeypatch) -> None:
    staged = stage(_capsule(tmp_path, arm, monkeypatch, lifecycle={"max_task_reopens": 2}), host, tmp_path)
    (outcome,) = await run_session(staged, host, "go")
    assert (outcome.exit_status, outcome.reopen_count, outcome.result_text) == ("reopen_budget_exhausted", 2, "third")
    assert (staged.workdir.root / "out" / "result.txt").read_text() == "third"
    trace = trace_events(staged)
    reopened = _events(trace, "task_reopened")
    assert [(e["reopen_number"], e["hook_name"], e["reason"]) for e in reopened] == [(1, "gate", FEEDBACK),
                                                                                    (2, "gate", FEEDBACK)]
    (exhausted,) = _events(trace, "reopen_budget_exhausted")
    assert exhausted == {**exhausted, "task_id": outcome.task_id, "hook_name": "gate", "reason": FEEDBACK,
                         "reopen_count": 2, "max_task_reopens": 2}
    (end,) = _events(trace, "task_end")
    assert (end["exit_status"], end["reopen_count"], end["turns"]) == ("reopen_budget_exhausted", 2, 3)
    kinds = [e["event_type"] for e in trace]
    # upstream's nesting: one session pair per attempt inside the task, task_reopened between them
    attempt = ["session_start", "inference", "session_end"]
    assert kinds == ["task_start", *attempt, "task_reopened", *attempt, "task_reopened", *attempt,
                     "reopen_budget_exhausted", "task_end"]
    sessions = _events(trace, "session_end")
    assert [e["exit_status"] for e in sessions] == ["ok", "ok", "ok"]  # a spent budget is task_end's only
    assert [e["total_turns"] for e in sessions] == [1, 2, 3]  # cumulative over the session
    assert [e["max_turns"] for e in _events(trace, "session_start")] == [10, 9, 8]  # what each attempt had left
    assert [e["turn"] for e in _events(trace, "inference")] == [0, 0, 0]  # zero-based, restarting per attempt
    # The feedback is the next attempt's last message, provenance kept; each attempt ends in on-task-end.
    assert [(m.role, m.text) for m in outcome.messages] == [
        ("user", "go"), ("assistant", "first"), ("user", FEEDBACK), ("assistant", "second"), ("user", FEEDBACK),
        ("assistant", "third")]
    assert outcome.messages[2].source_id == "hook:gate"
    ends = [e for e in hook_events(staged.workdir.root, "gate") if e["event"] == "on-task-end"]
    assert [e["exit_status"] for e in ends] == ["ok", "ok", "ok"]


@pytest.mark.anyio
@pytest.mark.parametrize("lifecycle, inference, reopens", [
    ({}, {}, 1),  # the default budget
    ({}, {"max_task_reopens": 0}, 0),  # the older name still counts
    ({"max_task_reopens": 2}, {}, 2),  # the seed's name
])
async def test_the_reopen_budget_comes_from_lifecycle_or_inference(tmp_path: Path, host, arm, monkeypatch,
                                                                   lifecycle: dict[str, Any], inference: dict[str, Any],
                                                                   reopens: int) -> None:
    staged = stage(_capsule(tmp_path, arm, monkeypatch, lifecycle=lifecycle, inference=inference), host, tmp_path)
    (outcome,) = await run_session(staged, host, "go")
    assert (outcome.exit_status, outcome.reopen_count) == ("reopen_budget_exhausted", reopens)
    assert outcome.result_text == ["first", "second", "third"][reopens]
    assert len(_events(trace_events(staged), "task_reopened")) == reopens


@pytest.mark.anyio
async def test_max_turns_counts_every_attempt_of_a_reopened_task(tmp_path: Path, host, arm, monkeypatch) -> None:
    staged = stage(_capsule(tmp_path, arm, monkeypatch, lifecycle={"max_task_reopens": 5},
                            inference={"max_turns": 2}), host, tmp_path)
    (outcome,) = await run_session(staged, host, "go")
    assert (outcome.exit_status, outcome.reopen_count) == ("max_turns_reached", 2)
    (end,) = _events(trace_events(staged), "task_end")
    assert (end["turns"], end["exit_status"]) == (2, "max_turns_reached")
    assert not _events(trace_events(staged), "reopen_budget_exhausted")


@pytest.mark.anyio
async def test_a_failed_attempt_is_never_reopened(tmp_path: Path, host, arm, monkeypatch) -> None:
    monkeypatch.setenv("ARM_HOOK", json.dumps({"on-task-end": {"arm": "reopen-task", "value": FEEDBACK}}))
    hook = hook_ref(tmp_path, "gate", arm, config_var="ARM_HOOK", binding="on-task-end", policy="reopen-task")
    staged = stage(hooked_capsule(tmp_path, [hook], [{"stop_reason": "error", "error": "down"}]), host, tmp_path)
    (outcome,) = await run_session(staged, host, "go")
    assert (outcome.exit_status, outcome.reopen_count) == ("failed", 0)
    ends = [e for e in hook_events(staged.workdir.root, "gate") if e["event"] == "on-task-end"]
    assert [e["exit_status"] for e in ends] == ["failed"]  # told, once; its reopen-task is not honoured
    assert not _events(trace_events(staged), "task_reopened")


def test_over_a2a_the_task_stays_working_across_reopens_and_streams_the_new_turns(tmp_path: Path, arm,
                                                                                 monkeypatch) -> None:
    capsule = _capsule(tmp_path, arm, monkeypatch, lifecycle={"max_task_reopens": 2, "after_task": "sleep"})
    config = json.dumps({"on-task-end": {"arm": "reopen-task", "value": FEEDBACK}})
    with serving(capsule, tmp_path / "state", env={"ARM_HOOK": config}) as served:
        msg = {"messageId": f"m{time.monotonic_ns()}", "role": "user", "parts": [{"text": "go"}]}
        frames = served.events("message/stream", {"message": msg})
        states = [d["status"]["state"] for _i, e, d in frames if e == "status"]
        assert states[-1] == "completed" and "completed" not in states[:-1]
        assert set(states[:-1]) <= {"submitted", "working"}
        final = frames[-1][2]
        assert final["final"] is True and final["status"]["response"] == "third"
        streamed = "".join(d.get("text", "") for _i, e, d in frames if e == "text")
        assert streamed.index("first") < streamed.index("second") < streamed.index("third")
        last_text = max(i for i, (_id, e, _d) in enumerate(frames) if e == "text")
        assert last_text < len(frames) - 1  # every attempt's text arrives before the task completes
        task = served.get(final["taskId"] if "taskId" in final else final["id"])
        assert task["status"]["state"] == "completed"
        trace = served.trace()
        assert len(_events(trace, "task_reopened")) == 2 and len(_events(trace, "reopen_budget_exhausted")) == 1


INFERENCE = {"model": "m", "driver": {"artifact": "drv"}}
DRIVER = {"name": "drv", "runtime": "driver", "source": "drv", "local_source": True}


@pytest.mark.parametrize("lifecycle, inference, budget", [
    ({}, {}, 1),
    ({}, {"max_task_reopens": 3}, 3),
    ({"max_task_reopens": 0}, {}, 0),
    ({"max_task_reopens": 2}, {"max_task_reopens": 2}, 2),
])
def test_the_manifest_reads_the_reopen_budget_under_either_name(tmp_path: Path, lifecycle: dict[str, Any],
                                                                inference: dict[str, Any], budget: int) -> None:
    from murmurd.manifest.validate import validate_manifest

    raw = {"name": "c", "version": "0.1.0", "artifacts": [DRIVER], "inference": {**INFERENCE, **inference},
           "lifecycle": lifecycle}
    model, report = validate_manifest(raw, tmp_path, {})
    assert report.ok and model is not None and model.max_task_reopens == budget


def test_the_two_names_of_the_reopen_budget_must_agree(tmp_path: Path) -> None:
    from murmurd.manifest.validate import validate_manifest

    raw = {"name": "c", "version": "0.1.0", "artifacts": [DRIVER],
           "inference": {**INFERENCE, "max_task_reopens": 1}, "lifecycle": {"max_task_reopens": 3}}
    model, report = validate_manifest(raw, tmp_path, {})
    assert model is None and [(d.code, d.path) for d in report.diagnostics] == [("E-LIF-001", "lifecycle.max_task_reopens")]
    assert "disagrees with inference.max_task_reopens (1)" in report.diagnostics[0].message
