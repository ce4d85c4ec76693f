"""The seed's "Handler / Fires" and "two dispatches" tables, row by row, for blocking and async
hooks: real hook components (tests/fixtures/arm-hook) through real sessions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hookkit import end_turn, hook_events, hook_ref, hooked_capsule, run_session, tool_call
from loopkit import stage, trace_events
from murmurd.session.session import TaskSpec
from murmurd.session.tokens import count_tokens

pytestmark = pytest.mark.anyio

MODES = ["blocking", "async"]
SCRIPT = [tool_call("c1", "echo", {"text": "x"}), tool_call("c2", "printf", {"command": "'%s' hi"}), end_turn("all done")]
# what a hook hears of one SCRIPT task (observation dispatches only: no deny policy); a shell call
# is a tool call too: on-tool-call, then on-shell (upstream's order)
ONE_TASK = ["on-task-start", "on-inference", "on-tool-call", "on-inference", "on-tool-call", "on-shell", "on-inference",
            "on-task-end"]


@pytest.fixture(scope="module")
def arm(artifacts) -> Path:  # type: ignore[no-untyped-def]
    return artifacts.fixture("arm-hook")


def _capsule(tmp_path: Path, arm: Path, mode: str = "blocking", *, binding: str | None = None, policy: str = "none",
             responses: list[dict[str, Any]] | None = None, **extra: Any) -> Path:
    hook = hook_ref(tmp_path, "watch", arm, binding=binding, mode=mode, policy=policy, config_var="ARM_HOOK")
    extra.setdefault("capabilities", {"shell": {"allow": ["printf", "sh", "make"]}})
    return hooked_capsule(tmp_path, [hook], responses or SCRIPT, **extra)


def _names(events: list[dict[str, Any]]) -> list[str]:
    return [e["event"] for e in events]


@pytest.mark.parametrize("mode", MODES)
async def test_on_stage_fires_once_at_staging_before_any_session(tmp_path: Path, host, arm: Path, mode: str) -> None:
    staged = stage(_capsule(tmp_path, arm, mode), host, tmp_path)
    root = staged.workdir.root
    assert [(e["event"], e["shell_allow"]) for e in hook_events(root, "watch")] == [("on-stage", ["printf", "sh", "make"])]
    assert not (root / "trace.jsonl").exists()  # no session yet
    await run_session(staged, host, "go")
    names = _names(hook_events(root, "watch"))
    assert names.count("on-stage") == 1 and names[:3] == ["on-stage", "on-session-start", "on-task-start"]


@pytest.mark.parametrize("mode", MODES)
async def test_on_session_start_fires_once_per_launch_before_the_first_task(tmp_path: Path, host, arm: Path, mode: str) -> None:
    """The seed: once per capsule launch, before the first task's work begins (the trace's
    per-attempt `session_start` lines do not multiply it)."""
    staged = stage(_capsule(tmp_path, arm, mode), host, tmp_path)
    await run_session(staged, host, "one", "two")
    events = hook_events(staged.workdir.root, "watch")[1:]  # after on-stage
    assert _names(events) == ["on-session-start", *ONE_TASK, *ONE_TASK, "on-session-end"]
    assert sum(e["event_type"] == "session_start" for e in trace_events(staged)) == 2  # the trace: per attempt
    starts = [e for e in events if e["event"] == "on-session-start"]
    assert starts[0]["session_id"] == staged.session_id
    assert (starts[0]["capsule_name"], starts[0]["capsule_version"], starts[0]["model"]) == ("loop-test", "0.3.0", "scripted")
    assert starts[0]["capabilities"] == ["filesystem", "shell"]


@pytest.mark.parametrize("mode", MODES)
async def test_on_task_start_fires_once_per_task_before_its_first_inference(tmp_path: Path, host, arm: Path, mode: str) -> None:
    staged = stage(_capsule(tmp_path, arm, mode, context={"max_tokens": 100000, "seed_budget": 0.25}), host, tmp_path)
    await run_session(staged, host, TaskSpec("tsk_a", "first", context_id="ctx_a"), "second")
    names = _names(hook_events(staged.workdir.root, "watch"))
    first, second = names.index("on-task-start"), len(names) - 1 - names[::-1].index("on-task-start")
    assert names.count("on-task-start") == 2
    assert names[first + 1] == "on-inference" and names[second + 1] == "on-inference"
    assert names[first - 1] == "on-session-start" and names[second - 1] == "on-task-end"  # the seed's order
    assert "on-task-end" in names[first:second]
    start = next(e for e in hook_events(staged.workdir.root, "watch") if e["event"] == "on-task-start")
    assert start == {**start, "task_id": "tsk_a", "context_id": "ctx_a", "source": "task_md", "input_bytes": 5,
                     "context_window": 100000, "budget_tokens": 25000, "prior_tokens": 0}


async def test_task_start_without_a_context_block_reports_a_zero_window(tmp_path: Path, host, arm: Path) -> None:
    staged = stage(_capsule(tmp_path, arm), host, tmp_path)
    await run_session(staged, host, "go")
    start = next(e for e in hook_events(staged.workdir.root, "watch") if e["event"] == "on-task-start")
    assert (start["context_window"], start["budget_tokens"], start["prior_tokens"]) == (0, 0, 0)


async def test_prior_tokens_counts_the_history_a_threaded_task_loads(tmp_path: Path, host, arm: Path) -> None:
    staged = stage(_capsule(tmp_path, arm, lifecycle={"conversation": "threaded"}), host, tmp_path)
    from murmurd.session.messages import user_message

    history = [user_message("an earlier question"), user_message("and its follow-up")]
    await run_session(staged, host, TaskSpec("tsk_b", "again", context_id="ctx_b", history=history))
    start = next(e for e in hook_events(staged.workdir.root, "watch") if e["event"] == "on-task-start")
    assert start["prior_tokens"] == count_tokens(json.dumps([m.to_driver() for m in history])) > 0


@pytest.mark.parametrize("mode", MODES)
async def test_on_inference_fires_after_each_driver_response(tmp_path: Path, host, arm: Path, mode: str) -> None:
    staged = stage(_capsule(tmp_path, arm, mode), host, tmp_path)
    await run_session(staged, host, "go")
    seen = [e for e in hook_events(staged.workdir.root, "watch") if e["event"] == "on-inference"]
    traced = [e for e in trace_events(staged) if e["event_type"] == "inference"]
    assert [(e["turn"], e["input_tokens"], e["output_tokens"], e["decision"], e["tool_name"]) for e in seen] == [
        (t["turn"], t["input_tokens"], t["output_tokens"], t["decision"], t.get("tool_name")) for t in traced
    ]
    assert json.loads(seen[-1]["output"]) == [{"type": "text", "text": "all done"}]  # the content, as upstream
    assert json.loads(seen[0]["output"])[0]["input"] == {"text": "x"}  # a tool call's input included
    assert json.loads(seen[0]["prompt"])[0]["content"][0]["text"] == "go"
    offered = [t["name"] for t in json.loads(seen[0]["tools"])]
    assert offered == ["echo", "printf", "sh", "make"]  # hooks (and the driver) are never the model's tools


@pytest.mark.parametrize("mode", MODES)
async def test_on_tool_call_an_ordinary_hook_sees_the_observation_alone(tmp_path: Path, host, arm: Path, mode: str) -> None:
    staged = stage(_capsule(tmp_path, arm, mode), host, tmp_path)
    await run_session(staged, host, "go")
    calls = [e for e in hook_events(staged.workdir.root, "watch") if e["event"] == "on-tool-call"]
    assert [c["dispatch"] for c in calls] == ["observation", "observation"]  # echo, then the shell call
    assert (calls[0]["tool_name"], json.loads(calls[0]["input"]), calls[0]["input_bytes"]) == ("echo", {"text": "x"}, 13)
    assert calls[0]["outcome"]["status"] == "ok" and calls[0]["outcome"]["output_bytes"] > 0
    assert (calls[1]["tool_name"], json.loads(calls[1]["input"])) == ("printf", {"command": "'%s' hi"})
    assert calls[1]["outcome"]["status"] == "ok"


async def test_on_tool_call_a_deny_hook_sees_the_decision_point_then_the_observation(tmp_path: Path, host, arm: Path) -> None:
    staged = stage(_capsule(tmp_path, arm, binding="on-tool-call", policy="deny"), host, tmp_path)
    await run_session(staged, host, "go")
    calls = hook_events(staged.workdir.root, "watch")
    assert [(e["event"], e["dispatch"]) for e in calls] == [("on-tool-call", "decision"), ("on-tool-call", "observation")] * 2
    assert calls[0]["outcome"] is None and calls[1]["outcome"]["status"] == "ok"
    assert calls[2]["tool_name"] == "printf" and calls[2]["outcome"] is None  # the shell call, before it runs


@pytest.mark.parametrize("mode", MODES)
async def test_on_shell_an_ordinary_hook_sees_the_observation_alone(tmp_path: Path, host, arm: Path, mode: str) -> None:
    staged = stage(_capsule(tmp_path, arm, mode), host, tmp_path)
    await run_session(staged, host, "go")
    shells = [e for e in hook_events(staged.workdir.root, "watch") if e["event"] == "on-shell"]
    assert len(shells) == 1 and shells[0]["dispatch"] == "observation"
    shell = shells[0]
    assert shell["binary"].startswith("/") and shell["binary"].endswith("printf")  # canonicalized
    assert (shell["argv"], shell["script"], shell["recipe"]) == (["printf", "%s", "hi"], None, None)
    assert shell["outcome"]["exit_code"] == 0 and shell["outcome"]["stdout"] == "hi"
    assert shell["outcome"]["stdout_bytes"] == 2


async def test_on_shell_a_deny_hook_sees_both_dispatches_with_full_argv_script_and_recipe(tmp_path: Path, host, arm: Path) -> None:
    long_script = "echo " + "x" * 300
    responses = [tool_call("c1", "sh", {"command": long_script}), tool_call("c2", "make", {"command": "build"}),
                 end_turn()]
    directory = _capsule(tmp_path, arm, binding="on-shell", policy="deny", responses=responses)
    staged = stage(directory, host, tmp_path)
    (staged.workdir.root / "Makefile").write_text("all:\n\ttrue\nbuild: all\n\techo building\n\tcc -o app app.c\n")
    await run_session(staged, host, "go")
    shells = hook_events(staged.workdir.root, "watch")
    assert [(e["event"], e["dispatch"]) for e in shells] == [("on-shell", "decision"), ("on-shell", "observation")] * 2
    decision = shells[0]
    assert decision["outcome"] is None and decision["script"] == long_script
    assert decision["argv"] == ["sh", "-c", long_script]  # untruncated
    assert len(decision["command"]) == 200 and long_script.startswith(decision["command"][:-1])
    assert shells[1]["outcome"]["stdout"] == "x" * 300 + "\n"
    assert shells[2]["recipe"] == shells[3]["recipe"] == "echo building\ncc -o app app.c"
    assert shells[2]["binary"].endswith("make")


@pytest.mark.parametrize("mode", MODES)
async def test_on_compaction_fires_at_the_threshold_before_any_history_is_replaced(tmp_path: Path, host, arm: Path, mode: str) -> None:
    staged = stage(_capsule(tmp_path, arm, mode, context={"max_tokens": 200},
                            inference={"compaction": {"threshold": 0.5, "model": "small", "system_prompt": "Summarize."}}),
                   host, tmp_path)
    (outcome,) = await run_session(staged, host, "go")
    compactions = [e for e in hook_events(staged.workdir.root, "watch") if e["event"] == "on-compaction"]
    assert compactions, "the context passed half of 200 tokens"
    first = compactions[0]
    assert first["threshold"] == 0.5 and first["model"] == "small" and first["system_prompt"] == "Summarize."
    assert first["session_tokens"] >= 100
    assert [m["role"] for m in first["messages"]][:2] == ["user", "assistant"]
    assert all(m["id"].startswith("msg_") for m in first["messages"])
    assert outcome.ok  # nothing committed a replacement: the history stays, the task goes on


@pytest.mark.parametrize("mode", MODES)
async def test_on_task_end_fires_once_per_task_after_its_loop_returns(tmp_path: Path, host, arm: Path, mode: str) -> None:
    staged = stage(_capsule(tmp_path, arm, mode), host, tmp_path)
    await run_session(staged, host, "one", "two")
    events = hook_events(staged.workdir.root, "watch")
    ends = [e for e in events if e["event"] == "on-task-end"]
    assert [(e["task_id"], e["exit_status"]) for e in ends] == [(f"tsk_{0:032x}", "ok"), (f"tsk_{1:032x}", "ok")]
    names = _names(events)
    last_inference = max(i for i, n in enumerate(names) if n == "on-inference")
    assert names.index("on-task-end") > names.index("on-inference") and names.index("on-task-end", names.index("on-task-end") + 1) > last_inference


@pytest.mark.parametrize("mode", MODES)
async def test_on_session_end_fires_once_per_launch_after_the_task_loop_exits(tmp_path: Path, host, arm: Path, mode: str) -> None:
    staged = stage(_capsule(tmp_path, arm, mode), host, tmp_path)
    await run_session(staged, host, "one", "two")
    events = hook_events(staged.workdir.root, "watch")
    names = _names(events)
    # once, at the close: after the last task's on-task-end, never between tasks
    assert names.count("on-session-end") == 1 and names[-2:] == ["on-task-end", "on-session-end"]
    end = events[-1]
    keys = ("total_turns", "total_input_tokens", "total_output_tokens", "total_tool_calls", "total_shell_calls",
            "exit_status")
    traced = [e for e in trace_events(staged) if e["event_type"] == "session_end"]
    # the session's totals: what the last attempt's session_end carries (cumulative over both tasks)
    assert len(traced) == 2 and {k: end[k] for k in keys} == {k: traced[-1][k] for k in keys}
    assert end["total_turns"] == 2 * traced[0]["total_turns"] > 0


@pytest.mark.parametrize("mode", MODES)
async def test_one_instance_serves_the_whole_session_in_event_order(tmp_path: Path, host, arm: Path, mode: str) -> None:
    staged = stage(_capsule(tmp_path, arm, mode), host, tmp_path)
    await run_session(staged, host, "one", "two")
    session_events = hook_events(staged.workdir.root, "watch")[1:]  # on-stage ran on its own instance
    assert [e["n"] for e in session_events] == list(range(1, len(session_events) + 1))


async def test_a_hook_bound_to_one_handler_receives_that_handler_alone(tmp_path: Path, host, arm: Path) -> None:
    staged = stage(_capsule(tmp_path, arm, binding="on-task-end"), host, tmp_path)
    await run_session(staged, host, "one")
    assert _names(hook_events(staged.workdir.root, "watch")) == ["on-task-end"]


async def test_a_shell_call_refused_before_it_runs_skips_the_decision_point(tmp_path: Path, host, arm: Path) -> None:
    responses = [tool_call("c1", "printf", {"command": "'unbalanced"}), end_turn()]
    staged = stage(_capsule(tmp_path, arm, binding="on-shell", policy="deny", responses=responses), host, tmp_path)
    (outcome,) = await run_session(staged, host, "go")
    (observed,) = hook_events(staged.workdir.root, "watch")
    assert observed["dispatch"] == "observation" and observed["outcome"]["exit_code"] == -1
    assert "cannot split the command" in observed["outcome"]["stderr"]
    assert outcome.ok and not [e for e in trace_events(staged) if e["event_type"] == "call_denied"]
