"""`seed-context` (issue 10): each outcome against the seed budget, with its `context_seed` event,
seen in the bytes the driver received."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import EXAMPLES
from hookkit import hook_events, hook_ref, run_session
from loopkit import driver_capsule, local, stage, trace_events
from murmurd.session.messages import user_message
from murmurd.session.seeding import fitting_suffix, message_tokens
from murmurd.session.session import TaskSpec

pytestmark = pytest.mark.anyio

OLD, MID, NEW = "old " * 150, "mid " * 10, "new " * 10
CONTEXT = {"max_tokens": 1000, "seed_budget": 0.1}  # a budget of 100 tokens


@pytest.fixture(scope="module")
def arm(artifacts) -> Path:  # type: ignore[no-untyped-def]
    return artifacts.fixture("arm-hook")


def _seeder(root: Path, arm: Path, monkeypatch, name: str, seed: list[list[str]]) -> dict[str, Any]:
    var = f"ARM_HOOK_{name.upper()}"
    monkeypatch.setenv(var, json.dumps({"on-task-start": {"arm": "seed-context", "value": seed}}))
    return hook_ref(root, name, arm, config_var=var, binding="on-task-start", policy="seed-context")


def _summarizer(root: Path, arm: Path, monkeypatch, action: dict[str, Any]) -> dict[str, Any]:
    monkeypatch.setenv("ARM_HOOK_SUM", json.dumps({"on-compaction": action}))
    return hook_ref(root, "summarizer", arm, config_var="ARM_HOOK_SUM", binding="on-compaction",
                    policy="replace-context")


async def _run(tmp_path: Path, host, hooks: list[dict[str, Any]], context: dict[str, Any] | None = CONTEXT,
               *tasks: TaskSpec | str) -> tuple[Any, list[dict[str, Any]], list[Any]]:
    extra: dict[str, Any] = {"context": context} if context is not None else {}
    directory = driver_capsule(tmp_path, "recorder-driver", {"steps": 1},
                               extra_artifacts=[local("echo", "tool", EXAMPLES / "echo"), *hooks], **extra)
    staged = stage(directory, host, tmp_path)
    outcomes = await run_session(staged, host, *(tasks or ("go",)))
    return staged, trace_events(staged), outcomes


def _seed_event(trace: list[dict[str, Any]]) -> dict[str, Any]:
    (event,) = [e for e in trace if e["event_type"] == "context_seed"]
    return event


def _sent(outcome: Any) -> dict[str, Any]:
    """The request record the recorder driver answered the (one) turn with."""
    return json.loads(outcome.result_text)


async def test_a_seed_within_budget_is_committed_whole_ahead_of_the_task(tmp_path: Path, host, arm, monkeypatch) -> None:
    hooks = [_seeder(tmp_path, arm, monkeypatch, "memory", [["user", "remember: tabs"], ["assistant", "noted"]])]
    staged, trace, (outcome,) = await _run(tmp_path, host, hooks)
    assert outcome.ok
    event = _seed_event(trace)
    assert event == {**event, "task_id": outcome.task_id, "hook_name": "memory", "outcome": "committed",
                     "budget_tokens": 100, "messages_offered": 2, "messages_committed": 2}
    assert "reason" not in event and "summarized_by" not in event
    assert event["tokens_offered"] == event["tokens_committed"] <= 100
    sent = _sent(outcome)
    assert sent["texts"] == ["remember: tabs", "noted", "go"] and not sent["has_ids"]
    task_start = next(e for e in hook_events(staged.workdir.root, "memory") if e["event"] == "on-task-start")
    assert (task_start["context_window"], task_start["budget_tokens"]) == (1000, 100)


async def test_the_seed_goes_ahead_of_loaded_history_oldest_first(tmp_path: Path, host, arm, monkeypatch) -> None:
    hooks = [_seeder(tmp_path, arm, monkeypatch, "memory", [["user", "first"], ["assistant", "second"]])]
    history = [user_message("earlier question"), user_message("earlier follow-up")]
    _, _, (outcome,) = await _run(tmp_path, host, hooks, CONTEXT, TaskSpec("tsk_" + "1" * 32, "go", history=history))
    assert _sent(outcome)["texts"] == ["first", "second", "earlier question", "earlier follow-up", "go"]


async def test_the_first_bound_hook_returning_a_seed_wins(tmp_path: Path, host, arm, monkeypatch) -> None:
    hooks = [_seeder(tmp_path, arm, monkeypatch, "alpha", [["user", "from alpha"]]),
             _seeder(tmp_path, arm, monkeypatch, "beta", [["user", "from beta"]])]
    _, trace, (outcome,) = await _run(tmp_path, host, hooks)
    assert _seed_event(trace)["hook_name"] == "alpha"
    assert _sent(outcome)["texts"] == ["from alpha", "go"]


async def test_an_over_budget_seed_with_no_compaction_hook_is_trimmed_from_its_oldest(tmp_path: Path, host, arm,
                                                                                     monkeypatch) -> None:
    hooks = [_seeder(tmp_path, arm, monkeypatch, "memory", [["user", OLD], ["assistant", MID], ["user", NEW]])]
    _, trace, (outcome,) = await _run(tmp_path, host, hooks)
    event = _seed_event(trace)
    assert (event["outcome"], event["messages_offered"], event["messages_committed"]) == ("trimmed", 3, 2)
    assert event["tokens_offered"] > 100 >= event["tokens_committed"]
    assert "no compaction hook is bound" in event["reason"] and "dropped its 1 oldest" in event["reason"]
    assert _sent(outcome)["texts"] == [MID, NEW, "go"]


async def test_an_over_budget_seed_is_summarized_through_the_compaction_hook(tmp_path: Path, host, arm,
                                                                            monkeypatch) -> None:
    hooks = [_seeder(tmp_path, arm, monkeypatch, "memory", [["user", OLD], ["assistant", MID], ["user", NEW]]),
             _summarizer(tmp_path, arm, monkeypatch, {"arm": "replace-context", "value": [["user", "SEED SUMMARY"]]})]
    staged, trace, (outcome,) = await _run(tmp_path, host, hooks)
    event = _seed_event(trace)
    assert (event["outcome"], event["summarized_by"], event["messages_committed"]) == ("summarized", "summarizer", 3)
    assert event["tokens_committed"] <= 100 < event["tokens_offered"]
    assert _sent(outcome)["texts"] == ["SEED SUMMARY", MID, NEW, "go"]
    (asked,) = [e for e in hook_events(staged.workdir.root, "summarizer") if e["event"] == "on-compaction"]
    assert [m["content"] for m in asked["messages"]] == [OLD]  # only the overflowing front
    assert (asked["session_tokens"], asked["threshold"]) == (event["tokens_offered"], 0.1)
    assert not [e for e in trace if e["event_type"] == "compaction"]  # a seed summary is no history compaction


@pytest.mark.parametrize("action, why", [
    ({"do": "err"}, "the compaction hook failed to summarize it"),
    ({}, "the compaction hook declined to summarize it"),
    ({"arm": "replace-context", "value": [["user", OLD]]}, "does not fit either"),
    ({"arm": "replace-context", "value": [["tool", "x"]]}, "is not plain text"),
])
async def test_a_summary_that_fails_or_does_not_fit_falls_back_to_trimming(tmp_path: Path, host, arm, monkeypatch,
                                                                           action: dict[str, Any], why: str) -> None:
    hooks = [_seeder(tmp_path, arm, monkeypatch, "memory", [["user", OLD], ["assistant", MID], ["user", NEW]]),
             _summarizer(tmp_path, arm, monkeypatch, action)]
    _, trace, outcomes = await _run(tmp_path, host, hooks, CONTEXT, "go", "again")
    assert [o.exit_status for o in outcomes] == ["ok", "ok"]  # a failed seed summary never ends the session
    event = [e for e in trace if e["event_type"] == "context_seed"][0]
    assert event["outcome"] == "trimmed" and why in event["reason"]
    assert _sent(outcomes[0])["texts"] == [MID, NEW, "go"]


@pytest.mark.parametrize("seed, context, why", [
    ([["user", "remember"]], None, "no seed budget"),
    ([["user", "remember"]], {"max_tokens": 1000}, "no seed budget"),
    ([["user", "fine"], ["tool", "a tool answer"]], CONTEXT, "message 2 has role 'tool'"),
    ([["user", NEW], ["user", OLD]], CONTEXT, "even its newest message exceeds the budget"),
])
async def test_a_refused_seed_never_fails_the_task(tmp_path: Path, host, arm, monkeypatch, seed: list[list[str]],
                                                   context: dict[str, Any] | None, why: str) -> None:
    hooks = [_seeder(tmp_path, arm, monkeypatch, "memory", seed)]
    staged, trace, (outcome,) = await _run(tmp_path, host, hooks, context)
    assert outcome.ok
    event = _seed_event(trace)
    assert (event["outcome"], event["messages_committed"], event["tokens_committed"]) == ("refused", 0, 0)
    assert why in event["reason"] and event["messages_offered"] == len(seed)
    assert _sent(outcome)["texts"] == ["go"]
    assert (staged.workdir.root / "out" / "result.txt").read_text() == outcome.result_text


async def test_no_seed_writes_no_context_seed_event(tmp_path: Path, host, arm, monkeypatch) -> None:
    monkeypatch.setenv("ARM_HOOK_MEMORY", "{}")
    hooks = [hook_ref(tmp_path, "memory", arm, config_var="ARM_HOOK_MEMORY", binding="on-task-start",
                      policy="seed-context")]
    _, trace, (outcome,) = await _run(tmp_path, host, hooks)
    assert outcome.ok and not [e for e in trace if e["event_type"] == "context_seed"]


def test_the_fitting_suffix_keeps_the_newest_messages_that_fit() -> None:
    assert fitting_suffix([50, 30, 30], 100) == 1
    assert fitting_suffix([50, 30, 30], 110) == 0
    assert fitting_suffix([50, 30, 130], 100) == 3
    assert fitting_suffix([], 0) == 0
    assert message_tokens(user_message("hi")) < message_tokens(user_message("hi " * 50))


def test_a_threaded_context_gets_this_tasks_seed_once_and_never_stores_it(tmp_path: Path, arm, monkeypatch) -> None:
    from a2akit import serving

    hooks = [_seeder(tmp_path, arm, monkeypatch, "memory", [["user", "SEED"]])]
    capsule = driver_capsule(tmp_path, "recorder-driver", {"steps": 1, "continuation": "hold"},
                             extra_artifacts=[local("echo", "tool", EXAMPLES / "echo"), *hooks], context=CONTEXT,
                             lifecycle={"conversation": "threaded", "after_task": "sleep"})
    env = {"ARM_HOOK_MEMORY": json.dumps({"on-task-start": {"arm": "seed-context", "value": [["user", "SEED"]]}})}
    with serving(capsule, tmp_path / "state", env=env) as served:
        first = served.wait_state(served.send("first")["id"], "completed")
        second = served.wait_state(served.send("second", contextId=first["contextId"])["id"], "completed")
        sent = json.loads(second["status"]["response"])
        assert sent["texts"][0] == "SEED" and sent["texts"].count("SEED") == 1  # this task's seed, at the head
        assert sent["texts"][1] == "first" and sent["texts"][-1] == "second"
        assert sent["continuation_id"] is None  # a new seed changes the head: a full resend
        stored = (served.workdir / "contexts").rglob("*.json")
        histories = [json.loads(p.read_text()) for p in stored]
        assert histories and all(m["content"][0]["text"] != "SEED" for h in histories for m in h if m["content"])
        assert len(_events(served.trace())) == 2


def _events(trace: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in trace if e["event_type"] == "context_seed"]
