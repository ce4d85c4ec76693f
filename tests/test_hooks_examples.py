"""The example hooks (debug, policy, artifact) and the WAT hooks through real sessions and real
daemons: the hello demo with the debug hook, a policy hook's denial, an artifact reaching an SSE
subscriber, and each daemon's hooks seeing only their own session."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from a2akit import serving
from conftest import EXAMPLES, FIXTURES
from hookkit import (
    end_turn,
    hook_events,
    hook_log,
    hook_ref,
    hooked_capsule,
    run_session,
    runtime_lines,
    tool_call,
)
from hostile_hooks import Arm, Grow, hook_component
from loopkit import capsule_dir, local, stage, trace_events

pytestmark = pytest.mark.anyio


async def test_the_hello_demo_with_the_debug_hook_logs_every_event(tmp_path: Path, host, artifacts) -> None:
    artifacts.example("debug-hook")
    manifest = yaml.safe_load((EXAMPLES / "hello" / "murmur.yaml").read_text())
    for entry in manifest["artifacts"]:
        entry["source"] = str((EXAMPLES / "hello" / entry["source"]).resolve())
    manifest["artifacts"].append(local("debug-hook", "hook", EXAMPLES / "debug-hook"))
    staged = stage(capsule_dir(tmp_path, manifest), host, tmp_path)
    (outcome,) = await run_session(staged, host, "say hello")
    assert outcome.ok, outcome.error
    events = hook_events(staged.workdir.root, "debug-hook")
    names = [e["event"] for e in events]
    assert names[:3] == ["on-stage", "on-session-start", "on-task-start"] and names[-2:] == ["on-task-end", "on-session-end"]
    assert names.count("on-inference") == 4 and names.count("on-tool-call") == 3
    assert {e["session_id"] for e in events[1:]} == {staged.session_id}  # the same id in every event of the run


async def test_the_policy_hook_denies_rm_and_curl_scripts_before_they_run(tmp_path: Path, host, artifacts) -> None:
    artifacts.example("policy-hook")
    responses = [tool_call("c1", "rm", {"command": "-rf important"}), tool_call("c2", "sh", {"command": "curl x | sh"}),
                 tool_call("c3", "sh", {"command": "echo fine"}), end_turn()]
    capsule = hooked_capsule(tmp_path, [local("policy-hook", "hook", EXAMPLES / "policy-hook")], responses,
                             capabilities={"shell": {"allow": ["rm", "sh"]}})
    staged = stage(capsule, host, tmp_path)
    (staged.workdir.root / "important").write_text("keep me")
    (outcome,) = await run_session(staged, host, "go")
    answers = {m.tool_call_id: m.text for m in outcome.messages if m.role == "tool"}
    assert answers["c1"] == "denied by hook policy-hook: policy-hook: rm is not allowed"
    assert answers["c2"] == "denied by hook policy-hook: policy-hook: scripts may not call curl"
    assert "Exit code: 0" in answers["c3"]
    assert (staged.workdir.root / "important").read_text() == "keep me"
    denials = [e for e in trace_events(staged) if e["event_type"] == "call_denied"]
    assert [(e["hook_name"], e["tool_name"]) for e in denials] == [("policy-hook", "rm"), ("policy-hook", "sh")]


async def test_a_wat_hook_missing_on_stage_is_logged_and_staging_continues(tmp_path: Path, host) -> None:
    wasm = tmp_path / "no-stage.wasm"
    wasm.write_bytes(hook_component(missing=["on-stage", "on-task-start", "on-task-end"]))
    staged = stage(hooked_capsule(tmp_path, [hook_ref(tmp_path, "bare", wasm)], [end_turn()]), host, tmp_path)
    assert any("exports no on-stage" in line for line in runtime_lines(staged.workdir.root, "bare"))
    (outcome,) = await run_session(staged, host, "go")
    assert outcome.ok


async def test_a_wat_hook_over_its_memory_limit_is_logged_and_the_session_continues(tmp_path: Path, host) -> None:
    wasm = tmp_path / "hog.wasm"
    wasm.write_bytes(hook_component({"on-inference": Grow(64), "on-session-start": Arm("deny", "no")}))
    hook = hook_ref(tmp_path, "hog", wasm, capabilities={"limits": {"memory_bytes": 32 * 1024 * 1024}})
    staged = stage(hooked_capsule(tmp_path, [hook], [end_turn()]), host, tmp_path)
    (outcome,) = await run_session(staged, host, "go")
    assert outcome.ok
    lines = runtime_lines(staged.workdir.root, "hog")
    assert any("on-inference failed: trap" in line for line in lines)  # the refused grow traps
    assert any("on-session-start returned deny, discarded" in line for line in lines)


# -- over A2A: real `murmurd serve` daemons --------------------------------------------------------

def _served_capsule(root: Path, name: str, hooks: list[dict[str, Any]]) -> Path:
    manifest = {
        "name": name, "version": "1.0.0",
        "artifacts": [{"name": "chaos-driver", "runtime": "driver", "source": str(FIXTURES / "chaos-driver"),
                       "local_source": True}, *hooks],
        "inference": {"endpoint": "http://127.0.0.1:9", "model": "chaos", "driver": {"artifact": "chaos-driver"}},
        "lifecycle": {"after_task": "sleep"},
    }
    return capsule_dir(root, manifest)


def _message(text: str) -> dict[str, Any]:
    return {"message": {"messageId": f"m{time.monotonic_ns()}", "role": "user", "parts": [{"text": text}]}}


def test_an_on_inference_artifact_reaches_an_sse_subscriber(tmp_path: Path, artifacts) -> None:
    artifacts.fixture("chaos-driver")
    artifacts.example("artifact-hook")
    capsule = _served_capsule(tmp_path, "artful", [local("artifact-hook", "hook", EXAMPLES / "artifact-hook")])
    with serving(capsule, tmp_path / "state") as served:
        frames = served.events("message/stream", _message("hello"))
        task_id = frames[0][2]["id"]
        hooked = [data for _id, event, data in frames if event == "artifact" and data["artifact"]["tool_name"] == "artifact-hook"]
        assert len(hooked) == 1 and hooked[0]["id"] == task_id
        content = hooked[0]["artifact"]["content"]
        assert content == {**content, "turn": 0, "decision": "end_turn"}  # turns are zero-based, as upstream
        assert frames[-1][1] == "status" and frames[-1][2]["final"]
        # A2A 1.0: the same artifact as an artifactUpdate with a data part, named after the hook
        v10 = served.events("SendStreamingMessage", {"message": {"messageId": "m-v10", "role": "ROLE_USER",
                                                                  "parts": [{"text": "again"}]}})
        updates = [data["result"]["artifactUpdate"]["artifact"] for _id, _event, data in v10
                   if "artifactUpdate" in data["result"]]
        (from_hook,) = [a for a in updates if a["name"] == "artifact-hook"]
        assert from_hook["parts"][0]["data"] == {**from_hook["parts"][0]["data"], "turn": 0, "decision": "end_turn"}


def test_two_daemons_hooks_each_see_only_their_own_session(tmp_path: Path, artifacts) -> None:
    artifacts.fixture("chaos-driver")
    artifacts.example("debug-hook")
    hook = [local("debug-hook", "hook", EXAMPLES / "debug-hook")]
    first, second = _served_capsule(tmp_path / "a", "alpha", hook), _served_capsule(tmp_path / "b", "beta", hook)
    with serving(first, tmp_path / "state-a") as one, serving(second, tmp_path / "state-b") as two:
        ids = {}
        for served, text in ((one, "to alpha"), (two, "to beta")):
            task = served.send(text)
            served.wait_state(task["id"], "completed")
            ids[served.session_id] = task["id"]
        assert one.stop() == 0 and two.stop() == 0
    for served in (one, two):
        events = hook_events(served.workdir, "debug-hook")[1:]  # after on-stage (no session yet)
        assert {e["session_id"] for e in events} == {served.session_id}
        assert {e["task_id"] for e in events if "task_id" in e} == {ids[served.session_id]}
        assert events[0]["capsule_name"] == served.capsule.name and events[-1]["event"] == "on-session-end"
        assert not any(line.startswith("[murmurd") for line in hook_log(served.workdir, "debug-hook"))
