"""The session loop end to end: real drivers and tools through the host, results and trace."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import EXAMPLES
from loopkit import capsule_dir, driver_capsule, local, run_tasks, stage, trace_events
from murmurd.containment.host import probe_host
from murmurd.containment.plan import plan_containment
from murmurd.session.cache_key import prompt_cache_key
from murmurd.session.session import TaskSpec

pytestmark = pytest.mark.anyio

SKILL_TEXT = "# Tidy\nAlways tidy up.\n"


def _conversation_capsule(tmp_path: Path) -> Path:
    skill = tmp_path / "skills" / "tidy" / "skill.md"
    skill.parent.mkdir(parents=True)
    skill.write_text(SKILL_TEXT)
    responses = [
        {"stop_reason": "tool_call", "content": [
            {"type": "text", "text": "calling echo "},
            {"type": "tool_call", "id": "call_1", "name": "echo", "input": {"text": "ping"}},
        ]},
        {"stop_reason": "tool_call", "content": [{"type": "tool_call", "id": "call_2", "name": "tidy", "input": {}}]},
        {"stop_reason": "tool_call", "content": [
            {"type": "tool_call", "id": "call_3", "name": "printf", "input": {"command": "'%s|' 'a; rm -rf /' $HOME"}},
            {"type": "tool_call", "id": "call_4", "name": "nonexistent", "input": {}},
        ]},
        {"stop_reason": "end_turn", "usage": {"input_tokens": 7, "output_tokens": -1, "cached_tokens": 3, "bogus": 1},
         "content": [{"type": "text", "text": "All done."}]},
    ]
    return driver_capsule(
        tmp_path, "scripted-driver", {"responses": responses},
        extra_artifacts=[local("echo", "tool", EXAMPLES / "echo"), local("tidy", "skill", skill.parent)],
        capabilities={"shell": {"allow": ["printf"]}},
        trace={"include_tool_output": True},
    )


async def test_a_conversation_calls_a_wasm_tool_a_skill_and_a_shell_tool(tmp_path: Path, host) -> None:
    staged = stage(_conversation_capsule(tmp_path), host, tmp_path)
    (outcome,) = await run_tasks(staged, host, "tidy up please")
    assert outcome.exit_status == "ok", outcome.error
    assert outcome.result_text == "All done."
    assert staged.workdir.result.read_text() == "All done."

    tool_messages = [m for m in outcome.messages if m.role == "tool"]
    assert [m.tool_call_id for m in tool_messages] == ["call_1", "call_2", "call_3", "call_4"]
    assert json.loads(tool_messages[0].text) == {"text": "ping"} and tool_messages[0].is_error is False
    assert tool_messages[1].text == SKILL_TEXT
    shell_text = tool_messages[2].text
    assert shell_text.startswith("$ '%s|' 'a; rm -rf /' $HOME")
    assert "Exit code: 0" in shell_text and "a; rm -rf /|$HOME|" in shell_text
    assert tool_messages[3].is_error and "unknown tool 'nonexistent'" in tool_messages[3].text

    events = trace_events(staged)
    kinds = [e["event_type"] for e in events]
    # upstream: the session pair nests inside the task; a shell command is a tool_call line and
    # then its shell line
    assert kinds == ["task_start", "session_start", "inference", "tool_call", "inference", "skill_call",
                     "inference", "tool_call", "shell", "tool_call", "inference", "session_end", "task_end"]
    assert all(e["session_id"] == staged.session_id and isinstance(e["timestamp"], int) for e in events)
    start = events[1]
    assert start["max_turns"] == 10  # the budget left for this (first) attempt: all of it
    assert start["capsule_name"] == "loop-test" and start["tools_declared"] == ["echo", "tidy", "printf"]
    assert start["capabilities"] == ["shell"]
    assert start["system_prompt_source"] == "none" and start["system_prompt_sha256"] is None
    assert "system_prompt" not in start
    here = plan_containment(probe_host(), "auto")  # what this host achieves (docs/containment.md)
    assert (start["containment_declared"], start["containment_achieved"], start["workdir_exec"]) == (
        "advisory", here.achieved, here.workdir_exec)
    grants = start["effective_grants"]
    assert grants["shell_allow"] == ["printf"] and grants["enforcement_tier"] == here.mechanism and grants["floor_met"]
    assert set(grants) >= {"declared_containment", "achieved_containment", "floor_met", "enforcement_tier",
                           "filesystem_scope", "workdir_exec", "network_allow", "unix_sockets", "shell_allow",
                           "spawn_allow", "env_allow", "interpreter_runtime_grants", "staged_runtime_grants"}
    echo_call = events[3]
    assert echo_call["tool_name"] == "echo" and echo_call["status"] == "ok" and echo_call["state_effect"] == "read"
    assert echo_call["input"] == {"text": "ping"} and echo_call["output"] == '{"text": "ping"}'
    assert events[5]["skill_name"] == "tidy" and events[5]["output_bytes"] == len(SKILL_TEXT)
    shell_call, shell = events[7], events[8]
    assert shell_call["tool_name"] == "printf" and shell_call["status"] == "ok"
    assert shell_call["input"] == {"command": "'%s|' 'a; rm -rf /' $HOME"} and shell_call["output"] == shell_text
    assert shell["binary"].endswith("/printf") and shell["exit_code"] == 0 and shell["stdout_bytes"] > 0
    assert events[9]["tool_name"] == "nonexistent" and events[9]["status"] == "error"
    inference = [e for e in events if e["event_type"] == "inference"]
    # zero-based turns; tool, skill and shell lines carry the turn that asked for them
    assert [e["turn"] for e in inference] == [0, 1, 2, 3]
    assert [events[i]["turn"] for i in (3, 5, 7, 8, 9)] == [0, 1, 2, 2, 2]
    assert [e["decision"] for e in inference] == ["tool_call", "tool_call", "tool_call", "end_turn"]
    assert inference[0]["tool_name"] == "echo" and inference[-1]["usage"] == {"input_tokens": 7, "cached_tokens": 3}
    assert inference[-1]["tool_name"] is None  # always present, null when no tool was asked
    assert "usage" not in inference[0]
    session_end, task_end = events[-2], events[-1]
    assert task_end["exit_status"] == "ok" and task_end["turns"] == 4
    # the skill call is counted apart; the shell command counts as a tool call and a shell call
    assert (task_end["tool_calls"], task_end["shell_calls"]) == (3, 1)
    assert task_end["tool_calls"] == kinds.count("tool_call") and task_end["shell_calls"] == kinds.count("shell")
    assert task_end["input_tokens"] == sum(e["input_tokens"] for e in inference)
    assert task_end["output_tokens"] == sum(e["output_tokens"] for e in inference)
    assert session_end["total_turns"] == task_end["turns"] == len(inference)
    assert session_end["total_tool_calls"] == task_end["tool_calls"]
    assert session_end["total_shell_calls"] == task_end["shell_calls"]
    assert session_end["total_input_tokens"] == task_end["input_tokens"]
    assert session_end["exit_status"] == "ok"


async def test_a_failing_shell_command_is_an_error_tool_call_and_turns_restart_per_task(tmp_path, host) -> None:
    responses = [
        {"stop_reason": "tool_call", "content": [{"type": "tool_call", "id": "c1", "name": "false", "input": {"command": ""}}]},
        {"stop_reason": "end_turn", "content": [{"type": "text", "text": "one"}]},
        {"stop_reason": "end_turn", "content": [{"type": "text", "text": "two"}]},
    ]
    directory = driver_capsule(tmp_path, "scripted-driver", {"responses": responses},
                               capabilities={"shell": {"allow": ["false"]}})
    staged = stage(directory, host, tmp_path)
    await run_tasks(staged, host, "a", "b")
    events = trace_events(staged)
    call = next(e for e in events if e["event_type"] == "tool_call")
    assert call["tool_name"] == "false" and call["status"] == "error"
    assert [e["turn"] for e in events if e["event_type"] == "inference"] == [0, 1, 0, 1]  # per task, from 0


CHAOS = [
    ("mode:trap", "failed", "chaos-driver: trap"),
    ("mode:hang", "failed", "chaos-driver: deadline exceeded after 1 s"),
    ("mode:badjson", "failed", "driver response is not JSON"),
    ("mode:notool", "failed", "stop_reason tool_call with no tool_call block"),
    ("mode:banana", "failed", "unknown stop_reason 'banana'"),
    ("mode:failed", "failed", "returned status failed: upstream said 503"),
    ("mode:error", "failed", "driver error: rate limited by provider"),
]


@pytest.mark.parametrize(("mode", "status", "message"), CHAOS, ids=[c[0] for c in CHAOS])
async def test_driver_failures_end_the_task_and_the_next_task_works(tmp_path, host, mode, status, message) -> None:
    directory = driver_capsule(tmp_path, "chaos-driver", {},
                               driver_entry={"capabilities": {"limits": {"deadline_seconds": 1}}})
    staged = stage(directory, host, tmp_path)
    failed, recovered = await run_tasks(staged, host, mode, "hello again")
    assert failed.exit_status == status
    assert message in (failed.error or "")
    assert recovered.exit_status == "ok" and recovered.result_text == "answer: hello again"
    assert staged.workdir.result.read_text() == "answer: hello again"
    task_ends = [e for e in trace_events(staged) if e["event_type"] == "task_end"]
    assert [e["exit_status"] for e in task_ends] == [status, "ok"]


async def test_a_failed_task_writes_the_error_as_its_result(tmp_path, host) -> None:
    staged = stage(driver_capsule(tmp_path, "chaos-driver", {}), host, tmp_path)
    (outcome,) = await run_tasks(staged, host, "mode:banana")
    assert staged.workdir.result.read_text() == f"error: {outcome.error}"


async def test_max_turns_ends_the_task(tmp_path, host) -> None:
    loop_forever = {"stop_reason": "tool_call",
                    "content": [{"type": "tool_call", "id": "c", "name": "echo", "input": {"text": "again"}}]}
    directory = driver_capsule(tmp_path, "scripted-driver", {"responses": [loop_forever] * 5},
                               extra_artifacts=[local("echo", "tool", EXAMPLES / "echo")],
                               inference={"max_turns": 3})
    staged = stage(directory, host, tmp_path)
    (outcome,) = await run_tasks(staged, host, "go")
    assert outcome.exit_status == "max_turns_reached" and outcome.counters.turns == 3


def _records(outcome) -> list[dict]:
    return [json.loads(m.content[0]["text"]) for m in outcome.messages if m.role == "assistant"]


async def test_continuation_sends_only_the_tail_within_a_context(tmp_path, host) -> None:
    directory = driver_capsule(tmp_path, "recorder-driver", {"steps": 3, "continuation": "hold"},
                               extra_artifacts=[local("echo", "tool", EXAMPLES / "echo")])
    staged = stage(directory, host, tmp_path)
    first, same, other = await run_tasks(
        staged, host,
        TaskSpec("tsk_" + "1" * 32, "first", context_id="ctx_a"),
        TaskSpec("tsk_" + "2" * 32, "second", context_id="ctx_a", history=[]),
        TaskSpec("tsk_" + "3" * 32, "third", context_id="ctx_b"),
    )
    turns = _records(first)
    # The driver acknowledged what it was sent: its own answer goes out again with the tool result.
    assert [t["roles"] for t in turns] == [["user"], ["assistant", "tool"], ["assistant", "tool"]]
    assert [t["continuation_id"] for t in turns] == [None, "cont-1", "cont-2"]
    assert not any(t["has_ids"] for t in turns)
    # The same context continues from the held id: only the new user message goes out.
    assert _records(same)[0]["roles"] == ["user"] and _records(same)[0]["continuation_id"] == "cont-3"
    # A different context never reuses the continuation: full resend, no id.
    assert _records(other)[0]["roles"] == ["user"] and _records(other)[0]["continuation_id"] is None
    # Token accounting uses the full conversation, so it grows although the payload does not.
    inference = [e for e in trace_events(staged) if e["event_type"] == "inference"][:3]
    assert inference[0]["input_tokens"] < inference[1]["input_tokens"] < inference[2]["input_tokens"]


@pytest.mark.parametrize(("mode", "roles"), [("hold", ["assistant", "tool"]), ("none", ["user", "assistant", "tool"])])
async def test_after_one_bash_call_the_driver_sees_two_messages_with_continuation_three_without(
    tmp_path, host, mode, roles
) -> None:
    """Upstream's continuation check: one `bash` tool call, then count what reaches the driver."""
    directory = driver_capsule(tmp_path, "recorder-driver",
                               {"steps": 2, "continuation": mode, "tool": "bash", "input": {"command": "echo hi"}},
                               capabilities={"shell": {"allow": ["bash"]}})
    staged = stage(directory, host, tmp_path)
    (outcome,) = await run_tasks(staged, host, TaskSpec("tsk_" + "7" * 32, "run it", context_id="ctx_a"))
    assert outcome.exit_status == "ok", outcome.error
    second = _records(outcome)[1]
    assert second["roles"] == roles
    assert second["continuation_id"] == ("cont-1" if mode == "hold" else None)
    assert "hi" in second["texts"][-1]  # the bash result itself went out


@pytest.mark.parametrize("mode", ["empty", "none"])
async def test_without_a_continuation_every_turn_resends_everything(tmp_path, host, mode) -> None:
    directory = driver_capsule(tmp_path, "recorder-driver", {"steps": 3, "continuation": mode},
                               extra_artifacts=[local("echo", "tool", EXAMPLES / "echo")])
    staged = stage(directory, host, tmp_path)
    (outcome,) = await run_tasks(staged, host, TaskSpec("tsk_" + "4" * 32, "go", context_id="ctx_a"))
    turns = _records(outcome)
    assert [t["roles"] for t in turns] == [["user"], ["user", "assistant", "tool"],
                                          ["user", "assistant", "tool", "assistant", "tool"]]
    assert all(t["continuation_id"] is None for t in turns)


async def test_the_driver_request_carries_the_capsule_block_tools_and_cache_key(tmp_path, host) -> None:
    long_name = "a-capsule-with-a-rather-long-descriptive-name-for-testing"
    directory = driver_capsule(tmp_path, "recorder-driver", {"steps": 1}, name=long_name,
                               extra_artifacts=[local("echo", "tool", EXAMPLES / "echo")],
                               inference={"system_prompt": "Be terse."})
    staged = stage(directory, host, tmp_path)
    one, two = await run_tasks(staged, host, TaskSpec("tsk_" + "5" * 32, "a", context_id="ctx_" + "0" * 32),
                               TaskSpec("tsk_" + "6" * 32, "b", context_id="ctx_" + "1" * 32))
    first, second = _records(one)[0], _records(two)[0]
    assert first["system"].startswith(f"[Capsule]\nname: {long_name}\nversion: 0.3.0\n\n")
    assert first["system"].endswith("Be terse.") and "untrusted" in first["system"]
    assert first["tools"] == ["echo"]
    assert first["keys"] == ["max_tokens", "messages", "model", "params", "prompt_cache_key", "system", "tools"]
    key = first["prompt_cache_key"]
    assert key == prompt_cache_key(long_name, "0.3.0", "ctx_" + "0" * 32)
    assert len(key) == 64 and key.startswith(long_name[:40]) and key != second["prompt_cache_key"]


async def test_the_driver_sees_only_the_inference_environment(tmp_path, host, monkeypatch) -> None:
    monkeypatch.setenv("LEAKY_SECRET", "nope")
    directory = driver_capsule(tmp_path, "scripted-driver", {"responses": []})
    staged = stage(directory, host, tmp_path)
    grant = staged.call_grant("scripted-driver")
    assert "LEAKY_SECRET" not in grant.env
    (outcome,) = await run_tasks(staged, host, "x")
    # The scripted driver reports a missing response; its config arrived through the WASI env.
    assert "no response for turn 1 (0 scripted)" in outcome.error


async def test_a_script_capsule_writes_invokes_and_answers(tmp_path, host, artifacts) -> None:
    from conftest import FIXTURES

    manifest = {"name": "script", "version": "1.0.0",
                "artifacts": [local("read-file", "tool", FIXTURES / "read-file")],
                "capabilities": {"shell": {"allow": ["printf", "sh"]}}}
    directory = capsule_dir(tmp_path, manifest, artifacts.fixture("pull-capsule"))
    staged = stage(directory, host, tmp_path)
    plans = [
        {"write": [["notes.txt", "written by the capsule"]], "invoke": "read-file", "data": "notes.txt",
         "shell": ["rm", ["-rf", "notes.txt"]]},
        {"invoke": "undeclared-tool", "data": "x",
         "shell": ["printf", ["%s|%s", "a; echo pwned", "$GREETING"]]},
        {"shell": ["sh", ["-c", 'printf "%s|%s|%s" "$GREETING" "${OPENAI_API_KEY:-absent}" "$HOME"']]},
        {"crash": True},
    ]
    from murmurd.session.session import Session

    session = Session(staged, host)
    await session.open()
    outcomes = []
    for i, plan in enumerate(plans):
        outcome = await session.run_task(TaskSpec(f"tsk_{i:032x}", json.dumps(plan)))
        outcomes.append((outcome, staged.workdir.result.read_text()))
    await session.close()
    (ok, ok_text), (undeclared, undeclared_text), (_env, env_text), (crashed, crashed_text) = outcomes
    exit_code, stdout, _truncated = json.loads(env_text)["shell"]["ok"]
    assert (exit_code, stdout) == (0, f"hi|absent|{staged.workdir.home}")
    assert ok.exit_status == "ok"
    assert json.loads(ok_text)["invoke"] == {"status": "passed", "data": "written by the capsule"}
    assert "rm" in json.loads(ok_text)["shell"]["err"] and (staged.workdir.root / "notes.txt").exists()
    assert undeclared.exit_status == "ok"
    undeclared_report = json.loads(undeclared_text)
    assert "'undeclared-tool' is not a declared tool" in undeclared_report["invoke"]["err"]
    assert undeclared_report["shell"] == {"ok": [0, "a; echo pwned|$GREETING", False]}
    assert crashed.exit_status == "failed" and "script: trap" in crashed.error
    assert crashed_text.startswith("error: script: trap")
    kinds = [e["event_type"] for e in trace_events(staged)]
    # a script capsule's run is its task's one attempt: a session pair inside each task
    assert kinds == ["task_start", "session_start", "session_end", "task_end"] * 4


async def test_a_failed_trace_write_ends_the_session_with_a_clear_error(tmp_path, host) -> None:
    from murmurd.session.session import Session

    staged = stage(driver_capsule(tmp_path, "chaos-driver", {}), host, tmp_path)
    session = Session(staged, host)
    await session.open()
    await session.trace.flush()
    # The medium under the trace fills up: its descriptor now writes to /dev/full (ENOSPC).
    full = os.open("/dev/full", os.O_WRONLY)
    os.dup2(full, session.trace._file.fileno())
    os.close(full)
    failed = await session.run_task(TaskSpec("tsk_" + "7" * 32, "hello"))
    assert failed.exit_status == "failed"
    assert "E-RUN-007: cannot write task_start to trace" in failed.error and "No space left" in failed.error
    assert staged.workdir.result.read_text() == f"error: {failed.error}"
    later = await session.run_task(TaskSpec("tsk_" + "8" * 32, "hello"))
    assert later.exit_status == "failed" and "the session has ended" in later.error
    await session.close()
    assert session.ended == "failed"


async def test_the_spend_ceiling_refuses_the_next_driver_call(tmp_path, host) -> None:
    loop_forever = {"stop_reason": "tool_call",
                    "content": [{"type": "tool_call", "id": "c", "name": "echo", "input": {"text": "again"}}]}
    directory = driver_capsule(tmp_path, "scripted-driver", {"responses": [loop_forever] * 9},
                               extra_artifacts=[local("echo", "tool", EXAMPLES / "echo")],
                               inference={"max_session_tokens": 300})
    staged = stage(directory, host, tmp_path)
    first, second = await run_tasks(staged, host, "spend", "more")
    assert first.exit_status == "spend_ceiling_reached" and "(300) reached" in first.error
    assert 1 <= first.counters.turns < 9
    assert second.exit_status == "spend_ceiling_reached" and "the session has ended" in second.error
    events = trace_events(staged)
    # the first task's attempt ends at the ceiling; the second never starts (no lines of its own)
    assert [e["event_type"] for e in events][-2:] == ["session_end", "task_end"]
    assert events[-2]["exit_status"] == events[-1]["exit_status"] == "spend_ceiling_reached"
    assert [e["event_type"] for e in events].count("task_start") == 1


async def test_reaching_the_compaction_threshold_without_a_hook_is_logged(tmp_path, host) -> None:
    responses = [{"stop_reason": "end_turn", "content": [{"type": "text", "text": "word " * 200}]}]
    directory = driver_capsule(tmp_path, "scripted-driver", {"responses": responses},
                               context={"max_tokens": 100})
    staged = stage(directory, host, tmp_path)
    (outcome,) = await run_tasks(staged, host, "talk a lot")
    assert outcome.exit_status == "ok"
    log = (staged.workdir.logs / "bootstrap.log").read_text()
    assert "reached the compaction threshold 98" in log and "no compaction hook" in log
    assert "compaction" not in [e["event_type"] for e in trace_events(staged)]


async def test_the_system_prompt_skill_becomes_the_prompt_and_leaves_the_tool_list(tmp_path, host) -> None:
    persona = tmp_path / "persona"
    persona.mkdir()
    (persona / "SKILL.md").write_text("You are a lighthouse keeper.")
    other = tmp_path / "other"
    other.mkdir()
    (other / "skill.md").write_text("Other skill.")
    directory = driver_capsule(
        tmp_path, "recorder-driver", {"steps": 1},
        extra_artifacts=[local("persona", "skill", persona), local("other", "skill", other)],
        inference={"system_prompt_artifact": "persona"},
    )
    staged = stage(directory, host, tmp_path)
    (outcome,) = await run_tasks(staged, host, "hi")
    record = _records(outcome)[0]
    assert record["system"].endswith("You are a lighthouse keeper.")
    assert record["tools"] == ["other"]
    start = trace_events(staged)[1]
    assert start["event_type"] == "session_start" and start["system_prompt_source"] == "manifest"
