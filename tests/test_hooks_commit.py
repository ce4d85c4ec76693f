"""The seed's "What each handler can commit" table, row by row, blocking and async: the committed
arm takes effect, any other arm is the loud, non-fatal fault (a log line naming hook, handler
and arm, and a `hook_dispatch_error` event, never for on-stage)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from hookkit import (
    Recorder,
    end_turn,
    faults,
    hook_events,
    hook_ref,
    hooked_capsule,
    run_session,
    runtime_lines,
    tool_call,
)
from loopkit import stage, trace_events
from murmurd.session.tools import model_tools

pytestmark = pytest.mark.anyio

SCRIPT = [tool_call("c1", "echo", {"text": "x"}), tool_call("c2", "printf", {"command": "hi"}), end_turn("all done")]


@pytest.fixture(scope="module")
def arm(artifacts) -> Path:  # type: ignore[no-untyped-def]
    return artifacts.fixture("arm-hook")


def _capsule(tmp_path: Path, arm: Path, monkeypatch, config: dict[str, Any], mode: str = "blocking", *,
             binding: str | None = None, policy: str = "none", responses: list[dict[str, Any]] | None = None,
             **extra: Any) -> Path:
    monkeypatch.setenv("ARM_HOOK", json.dumps(config))
    hook = hook_ref(tmp_path, "committer", arm, binding=binding, mode=mode, policy=policy, config_var="ARM_HOOK")
    extra.setdefault("capabilities", {"shell": {"allow": ["printf"]}})
    return hooked_capsule(tmp_path, [hook], responses or SCRIPT, **extra)


def _fault_logged(root: Path, handler: str, arm_name: str) -> bool:
    return any(f"hook committer: {handler} returned {arm_name}, discarded" in line for line in runtime_lines(root, "committer"))


# -- on-stage: write-manifests ---------------------------------------------------------------

MANIFEST = yaml.safe_dump({"name": "printf", "description": "Format text, like C's printf.", "version": "9.4"})


async def test_on_stage_commits_write_manifests_where_staging_put_the_shell_manifest(tmp_path: Path, host, arm, monkeypatch) -> None:
    config = {"on-stage": {"arm": "write-manifests", "value": [["printf", MANIFEST]]}}
    staged = stage(_capsule(tmp_path, arm, monkeypatch, config, binding="on-stage", policy="write-manifests"), host, tmp_path)
    written = yaml.safe_load((staged.workdir.root / "tools" / "printf" / "murmur.yaml").read_text())
    assert written["description"] == "Format text, like C's printf." and written["version"] == "9.4"
    assert written["runtime"] == "shell" and written["input_schema"]["required"] == ["command"]
    described = {t.name: t.description for t in model_tools(staged)}
    assert described["printf"] == "Format text, like C's printf."


@pytest.mark.parametrize("entry, rule", [
    (["sh", MANIFEST], "not in capabilities.shell.allow"),
    (["echo", MANIFEST], "not in capabilities.shell.allow"),  # never another artifact's directory
    (["printf", "name: other\n"], "names 'other'"),
    (["printf", "runtime: tool\n"], "not 'shell'"),
    (["printf", "- a list\n"], "not a mapping"),
    (["printf", "description: [1\n"], "not valid YAML"),
])
async def test_write_manifests_refuses_an_invalid_manifest_and_keeps_the_synthetic_one(
        tmp_path: Path, host, arm, monkeypatch, entry: list[str], rule: str) -> None:
    config = {"on-stage": {"arm": "write-manifests", "value": [entry]}}
    staged = stage(_capsule(tmp_path, arm, monkeypatch, config, binding="on-stage", policy="write-manifests"), host, tmp_path)
    written = yaml.safe_load((staged.workdir.root / "tools" / "printf" / "murmur.yaml").read_text())
    assert written["version"] == "native"
    assert yaml.safe_load((staged.workdir.root / "tools" / "echo" / "murmur.yaml").read_text())["runtime"] == "tool"
    assert any("write-manifests entry refused" in line and rule in line
               for line in runtime_lines(staged.workdir.root, "committer"))


async def test_on_stage_from_an_async_hook_commits_nothing_and_is_logged_not_traced(tmp_path: Path, host, arm, monkeypatch) -> None:
    config = {"on-stage": {"arm": "write-manifests", "value": [["printf", MANIFEST]]}}
    staged = stage(_capsule(tmp_path, arm, monkeypatch, config, "async"), host, tmp_path)
    assert yaml.safe_load((staged.workdir.root / "tools" / "printf" / "murmur.yaml").read_text())["version"] == "native"
    assert _fault_logged(staged.workdir.root, "on-stage", "write-manifests")
    await run_session(staged, host, "go")
    assert faults(trace_events(staged)) == []  # on-stage runs before the trace exists


@pytest.mark.parametrize("mode", ["blocking", "async"])
async def test_an_unhonoured_arm_at_on_stage_is_logged_only(tmp_path: Path, host, arm, monkeypatch, mode: str) -> None:
    staged = stage(_capsule(tmp_path, arm, monkeypatch, {"on-stage": {"arm": "artifact", "value": {"a": 1}}}, mode),
                   host, tmp_path)
    await run_session(staged, host, "go")
    assert _fault_logged(staged.workdir.root, "on-stage", "artifact")
    assert faults(trace_events(staged)) == []


# -- on-inference: artifact --------------------------------------------------------------------

async def test_on_inference_commits_an_artifact_to_the_task_stream(tmp_path: Path, host, arm, monkeypatch) -> None:
    config = {"on-inference": {"arm": "artifact", "value": {"kind": "note", "n": 1}}}
    staged = stage(_capsule(tmp_path, arm, monkeypatch, config, binding="on-inference", policy="artifact"), host, tmp_path)
    recorder = Recorder()
    await run_session(staged, host, "go", events=recorder)
    assert recorder.artifacts == [("committer", {"kind": "note", "n": 1})] * 3  # one per driver response
    assert faults(trace_events(staged)) == []


@pytest.mark.parametrize("value", ["not json", "[1, 2]", "\"a string\""])
async def test_an_artifact_that_is_not_a_json_object_is_a_fault(tmp_path: Path, host, arm, monkeypatch, value: str) -> None:
    config = {"on-inference": {"arm": "artifact", "value": value}}
    staged = stage(_capsule(tmp_path, arm, monkeypatch, config, binding="on-inference", policy="artifact"), host, tmp_path)
    recorder = Recorder()
    (outcome,) = await run_session(staged, host, "go", events=recorder)
    assert outcome.ok and recorder.artifacts == []
    assert faults(trace_events(staged)) == [("committer", "on-inference", "artifact")] * 3
    assert _fault_logged(staged.workdir.root, "on-inference", "artifact")


async def test_an_async_hook_artifact_is_a_fault_never_streamed(tmp_path: Path, host, arm, monkeypatch) -> None:
    staged = stage(_capsule(tmp_path, arm, monkeypatch, {"on-inference": {"arm": "artifact", "value": {"a": 1}}}, "async"),
                   host, tmp_path)
    recorder = Recorder()
    await run_session(staged, host, "go", events=recorder)
    assert recorder.artifacts == []
    assert faults(trace_events(staged)) == [("committer", "on-inference", "artifact")] * 3


# -- on-task-start: seed-context; on-task-end: reopen-task; on-compaction: replace-context -----

async def test_on_task_start_commits_seed_context_at_the_head_of_the_task(tmp_path: Path, host, arm, monkeypatch) -> None:
    config = {"on-task-start": {"arm": "seed-context", "value": [["user", "remember: tabs"], ["assistant", "noted"]]}}
    staged = stage(_capsule(tmp_path, arm, monkeypatch, config, binding="on-task-start", policy="seed-context",
                            responses=[end_turn()], context={"max_tokens": 1000, "seed_budget": 0.5}), host, tmp_path)
    (outcome,) = await run_session(staged, host, "go")
    head = outcome.messages[:3]
    assert [(m.role, m.text) for m in head] == [("user", "remember: tabs"), ("assistant", "noted"), ("user", "go")]
    assert head[0].source_id == "src:arm-hook" and head[0].id != "msg_from_hook"  # ids minted, source kept


async def test_on_task_end_commits_reopen_task(tmp_path: Path, host, arm, monkeypatch) -> None:
    config = {"on-task-end": {"arm": "reopen-task", "value": "also say goodbye"}}
    staged = stage(_capsule(tmp_path, arm, monkeypatch, config, binding="on-task-end", policy="reopen-task",
                            responses=[end_turn("hi"), end_turn("goodbye")]), host, tmp_path)
    (outcome,) = await run_session(staged, host, "go")
    reopened = [e for e in trace_events(staged) if e["event_type"] == "task_reopened"]
    assert [(e["hook_name"], e["reason"]) for e in reopened] == [("committer", "also say goodbye")]
    assert outcome.exit_status == "reopen_budget_exhausted"  # the hook asks every time; max_task_reopens is 1
    assert outcome.result_text == "goodbye"  # the last result stands


async def test_on_compaction_commits_replace_context(tmp_path: Path, host, arm, monkeypatch) -> None:
    config = {"on-compaction": {"arm": "replace-context", "value": [["user", "summary: echoed x"]]}}
    staged = stage(_capsule(tmp_path, arm, monkeypatch, config, binding="on-compaction", policy="replace-context",
                            context={"max_tokens": 200}, inference={"compaction": {"threshold": 0.5}}), host, tmp_path)
    await run_session(staged, host, "go")
    assert [e for e in trace_events(staged) if e["event_type"] == "compaction"]


@pytest.mark.parametrize("handler, arm_name, value, extra", [
    ("on-task-start", "seed-context", [["user", "seed"]], {}),
    ("on-task-end", "reopen-task", "again", {}),
    ("on-compaction", "replace-context", [["user", "summary"]], {"context": {"max_tokens": 200},
                                                                  "inference": {"compaction": {"threshold": 0.5}}}),
])
async def test_an_async_hook_never_commits_issue_10_arms(tmp_path: Path, host, arm, monkeypatch, handler: str,
                                                         arm_name: str, value: Any, extra: dict[str, Any]) -> None:
    config = {handler: {"arm": arm_name, "value": value}}
    staged = stage(_capsule(tmp_path, arm, monkeypatch, config, "async", **extra), host, tmp_path)
    (outcome,) = await run_session(staged, host, "go")
    assert outcome.ok and outcome.reopen_count == 0 and outcome.messages[0].text == "go"
    assert (("committer", handler, arm_name) in faults(trace_events(staged)))
    assert not [e for e in trace_events(staged) if e["event_type"] in ("compaction", "task_reopened")]


# -- on-tool-call / on-shell: deny, at the decision point only -----------------------------------

@pytest.mark.parametrize("binding, denied, survivor", [("on-tool-call", {"echo", "printf"}, set()),
                                                      ("on-shell", {"printf"}, {"echo"})])
async def test_deny_at_the_decision_point_refuses_the_call(tmp_path: Path, host, arm, monkeypatch, binding: str,
                                                          denied: set[str], survivor: set[str]) -> None:
    """A shell call is a tool call too: a deny bound at on-tool-call refuses it as well."""
    config = {f"{binding}@decision": {"arm": "deny", "value": "not on my watch"}}
    staged = stage(_capsule(tmp_path, arm, monkeypatch, config, binding=binding, policy="deny"), host, tmp_path)
    (outcome,) = await run_session(staged, host, "go")
    assert outcome.ok
    ids = {"echo": "c1", "printf": "c2"}
    for name in denied:
        answer = next(m for m in outcome.messages if m.role == "tool" and m.tool_call_id == ids[name])
        assert answer.is_error and answer.text == "denied by hook committer: not on my watch"
    trace = trace_events(staged)
    denials = [e for e in trace if e["event_type"] == "call_denied"]
    assert {e["tool_name"] for e in denials} == denied
    for denial in denials:
        assert denial == {**denial, "hook_name": "committer", "reason": "not on my watch"}
        assert isinstance(denial["turn"], int)
        assert denial["kind"] == ("shell" if denial["tool_name"] == "printf" else "tool")
    ran = {e.get("tool_name") or e.get("binary", "").rsplit("/", 1)[-1] for e in trace
           if e["event_type"] in ("tool_call", "shell")}
    assert not denied & ran and survivor <= ran  # the denied calls were never made
    observed = [e for e in hook_events(staged.workdir.root, "committer") if e["dispatch"] == "observation"]
    assert not [e for e in observed if e.get("tool_name") in denied or e["event"] == "on-shell" and "printf" in denied]


async def test_a_shell_call_is_dispatched_as_a_tool_call_then_as_a_shell_call(tmp_path: Path, host, arm,
                                                                               monkeypatch) -> None:
    """Upstream's order for a shell call: the tool-call event, then the shell event, at the
    decision point (deny hooks of both bindings) and at the observation."""
    tool_hook = hook_ref(tmp_path, "tools", arm, binding="on-tool-call", policy="deny", config_var="ARM_HOOK")
    shell_hook = hook_ref(tmp_path, "shells", arm, binding="on-shell", policy="deny", config_var="ARM_HOOK")
    watcher = hook_ref(tmp_path, "watcher", arm, config_var="ARM_HOOK")
    monkeypatch.setenv("ARM_HOOK", json.dumps({}))
    responses = [tool_call("c2", "printf", {"command": "hi"}), end_turn()]
    root = hooked_capsule(tmp_path, [tool_hook, shell_hook, watcher], responses,
                          capabilities={"shell": {"allow": ["printf"]}})
    staged = stage(root, host, tmp_path)
    (outcome,) = await run_session(staged, host, "go")
    assert outcome.ok
    tools = [(e["event"], e["dispatch"]) for e in hook_events(staged.workdir.root, "tools")
             if e["event"] in ("on-tool-call", "on-shell")]
    shells = [(e["event"], e["dispatch"]) for e in hook_events(staged.workdir.root, "shells")
              if e["event"] in ("on-tool-call", "on-shell")]
    seen = [(e["event"], e["dispatch"], e.get("tool_name")) for e in hook_events(staged.workdir.root, "watcher")
            if e["event"] in ("on-tool-call", "on-shell")]
    assert tools == [("on-tool-call", "decision"), ("on-tool-call", "observation")]
    assert shells == [("on-shell", "decision"), ("on-shell", "observation")]
    assert seen[0] == ("on-tool-call", "observation", "printf") and seen[1][:2] == ("on-shell", "observation")
    assert len(seen) == 2
    observed = next(e for e in hook_events(staged.workdir.root, "watcher") if e["event"] == "on-tool-call")
    assert json.loads(observed["input"]) == {"command": "hi"}


async def test_a_deny_at_on_tool_call_stops_a_shell_call_before_on_shell(tmp_path: Path, host, arm,
                                                                          monkeypatch) -> None:
    """The on-tool-call deny comes first: the on-shell policy never sees the call, nothing runs,
    and the trace says why (a `call_denied` naming the binary, no tool_call or shell line)."""
    monkeypatch.setenv("ARM_HOOK", json.dumps({"on-tool-call@decision": {"arm": "deny", "value": "no shells"}}))
    tool_hook = hook_ref(tmp_path, "tools", arm, binding="on-tool-call", policy="deny", config_var="ARM_HOOK")
    shell_hook = hook_ref(tmp_path, "shells", arm, binding="on-shell", policy="deny", config_var="ARM_HOOK")
    responses = [tool_call("c2", "printf", {"command": "hi"}), end_turn()]
    root = hooked_capsule(tmp_path, [tool_hook, shell_hook], responses, capabilities={"shell": {"allow": ["printf"]}})
    staged = stage(root, host, tmp_path)
    (outcome,) = await run_session(staged, host, "go")
    assert outcome.ok and outcome.messages[2].text == "denied by hook tools: no shells"
    assert not [e for e in hook_events(staged.workdir.root, "shells") if e["event"] == "on-shell"]
    order = [e["event_type"] for e in trace_events(staged)]
    assert "tool_call" not in order and "shell" not in order
    assert order.index("inference") < order.index("call_denied")
    (denial,) = [e for e in trace_events(staged) if e["event_type"] == "call_denied"]
    assert denial["kind"] == "shell" and denial["binary"].endswith("/printf") and denial["hook_name"] == "tools"


async def test_a_shell_denial_names_the_canonical_binary(tmp_path: Path, host, arm, monkeypatch) -> None:
    config = {"on-shell@decision": {"arm": "deny", "value": "no printing"}}
    staged = stage(_capsule(tmp_path, arm, monkeypatch, config, binding="on-shell", policy="deny"), host, tmp_path)
    await run_session(staged, host, "go")
    (denial,) = [e for e in trace_events(staged) if e["event_type"] == "call_denied"]
    assert denial["kind"] == "shell" and denial["binary"].endswith("/printf")


@pytest.mark.parametrize("binding", ["on-tool-call", "on-shell"])
async def test_deny_at_the_observation_dispatch_is_a_fault_the_call_already_ran(tmp_path: Path, host, arm, monkeypatch,
                                                                                binding: str) -> None:
    config = {f"{binding}@observation": {"arm": "deny", "value": "too late"}}
    staged = stage(_capsule(tmp_path, arm, monkeypatch, config, binding=binding, policy="deny"), host, tmp_path)
    (outcome,) = await run_session(staged, host, "go")
    trace = trace_events(staged)
    assert outcome.ok and not [e for e in trace if e["event_type"] == "call_denied"]
    assert {e["event_type"] for e in trace} >= {"tool_call", "shell"}
    # on-tool-call observes both calls (the shell call is a tool call too), on-shell the shell call
    assert faults(trace) == [("committer", binding, "deny")] * (2 if binding == "on-tool-call" else 1)
    assert _fault_logged(staged.workdir.root, binding, "deny")


async def test_a_policy_hook_never_sees_a_call_the_manifest_already_refuses(tmp_path: Path, host, arm, monkeypatch) -> None:
    responses = [tool_call("c1", "curl", {"command": "http://example.com"}), end_turn()]
    staged = stage(_capsule(tmp_path, arm, monkeypatch, {}, binding="on-tool-call", policy="deny", responses=responses),
                   host, tmp_path)
    (outcome,) = await run_session(staged, host, "go")
    assert "unknown tool 'curl'" in outcome.messages[2].text
    assert [e["dispatch"] for e in hook_events(staged.workdir.root, "committer")] == ["observation"]


@pytest.mark.parametrize("mode", ["blocking", "async"])
async def test_deny_from_an_unbound_hook_is_a_fault_everywhere(tmp_path: Path, host, arm, monkeypatch, mode: str) -> None:
    """A hook with no binding never gets a decision point (only `commit_policy: deny` on a gated
    binding does), so its deny lands at the observation: a fault, and the calls ran."""
    config = {"on-tool-call": {"arm": "deny", "value": "no"}, "on-shell": {"arm": "deny", "value": "no"}}
    staged = stage(_capsule(tmp_path, arm, monkeypatch, config, mode), host, tmp_path)
    await run_session(staged, host, "go")
    trace = trace_events(staged)
    assert ("committer", "on-tool-call", "deny") in faults(trace) and ("committer", "on-shell", "deny") in faults(trace)
    assert not [e for e in trace if e["event_type"] == "call_denied"]


# -- all others: only none is silent ----------------------------------------------------------------

@pytest.mark.parametrize("mode", ["blocking", "async"])
@pytest.mark.parametrize("handler", ["on-session-start", "on-session-end"])
async def test_session_handlers_commit_nothing(tmp_path: Path, host, arm, monkeypatch, handler: str, mode: str) -> None:
    staged = stage(_capsule(tmp_path, arm, monkeypatch, {handler: {"arm": "artifact", "value": {"a": 1}}}, mode),
                   host, tmp_path)
    recorder = Recorder()
    await run_session(staged, host, "go", events=recorder)
    trace = trace_events(staged)
    assert recorder.artifacts == [] and faults(trace) == [("committer", handler, "artifact")]
    assert _fault_logged(staged.workdir.root, handler, "artifact")
    order = [e["event_type"] for e in trace]
    if handler == "on-session-start" and mode == "blocking":  # traced as it happens: before any inference
        assert order.index("hook_dispatch_error") < order.index("inference")
    elif handler == "on-session-start":  # an async hook's fault is held until the first session_end
        assert order.index("hook_dispatch_error") < order.index("session_end")
    else:  # dispatched at the close: no later session_end to precede, so the trace's last line
        assert order[-3:] == ["session_end", "task_end", "hook_dispatch_error"]


@pytest.mark.parametrize("mode", ["blocking", "async"])
async def test_an_arm_another_handler_commits_is_a_fault(tmp_path: Path, host, arm, monkeypatch, mode: str) -> None:
    config = {"on-inference": {"arm": "reopen-task", "value": "nope"}, "on-task-end": {"arm": "write-manifests", "value": []}}
    staged = stage(_capsule(tmp_path, arm, monkeypatch, config, mode), host, tmp_path)
    (outcome,) = await run_session(staged, host, "go")
    assert outcome.ok and outcome.reopen_count == 0
    got = faults(trace_events(staged))
    assert got.count(("committer", "on-inference", "reopen-task")) == 3 and ("committer", "on-task-end", "write-manifests") in got
    assert _fault_logged(staged.workdir.root, "on-inference", "reopen-task")


async def test_none_is_always_silent(tmp_path: Path, host, arm, monkeypatch) -> None:
    staged = stage(_capsule(tmp_path, arm, monkeypatch, {}), host, tmp_path)
    await run_session(staged, host, "go")
    assert faults(trace_events(staged)) == [] and runtime_lines(staged.workdir.root, "committer") == []
