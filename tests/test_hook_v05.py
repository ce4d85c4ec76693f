"""A hook built against the published layout (`murmur:hook@0.5.0`, `murmur:runtime@0.2.0`, the
fixture `hook-v05`, compiled here with componentize-py against that WIT) is installed as a
`.mur.zip`, loads beside the seed's layout, receives its events in the 0.5.0 shapes, runs a
completion through `runtime/inference@0.2.0`, and has its `artifact` committed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from conftest import EXAMPLES, FIXTURES
from hookkit import Recorder, end_turn, hook_events, run_session, tool_call
from loopkit import local
from murmurd.contract import Role
from murmurd.host import ComponentHost
from murmurd.host.roles import ContractViolation, check_contract
from murmurd.paths import cache_dir
from murmurd.staging.stage import stage_capsule
from registrykit import make_zip, sha

pytestmark = pytest.mark.anyio
HOOK = "hook-v05"


@pytest.fixture
def hook_wasm(artifacts) -> Path:
    return artifacts.fixture(HOOK)


def test_the_0_5_0_layout_loads_with_every_handler(hook_wasm: Path, host: ComponentHost) -> None:
    loaded = host.load(hook_wasm, expected=Role.HOOK)
    assert loaded.legacy_hook and "murmur:hook/lifecycle@0.5.0" in loaded.exports
    assert "murmur:runtime/inference@0.2.0" in loaded.imports
    assert len(loaded.handlers) == 9


def test_the_two_layouts_are_never_mixed() -> None:
    with pytest.raises(ContractViolation, match="may import only murmur:runtime/inference@0.2.0"):
        check_contract(["murmur:runtime/tokens@0.3.0"], ["murmur:hook/lifecycle@0.5.0"], Role.HOOK)
    with pytest.raises(ContractViolation, match="may import only"):
        check_contract(["murmur:runtime/inference@0.3.0"], ["murmur:hook/lifecycle@0.5.0"], Role.HOOK)
    with pytest.raises(ContractViolation, match="the hook@0.5.0 layout, but the hook exports the seed's"):
        check_contract(["murmur:runtime/inference@0.2.0"], ["murmur:hook/lifecycle@0.8.0"], Role.HOOK)
    with pytest.raises(ContractViolation, match="served to hooks only"):
        check_contract(["murmur:runtime/inference@0.2.0"], ["murmur:tool/run@0.1.0"], Role.TOOL)
    with pytest.raises(ContractViolation, match="found version 0.4.0"):
        check_contract([], ["murmur:hook/lifecycle@0.4.0"], Role.HOOK)


def _project(tmp_path: Path, hook_wasm: Path) -> Path:
    """A capsule declaring the hook by name and version, installed as upstream packs it."""
    manifest = yaml.safe_load((FIXTURES / HOOK / "murmur.yaml").read_text())
    manifest.update(version="0.5.1", requires_files=["hook_v05.wasm"])
    for key in ("wit", "world"):
        manifest.pop(key)
    archive = make_zip({"murmur.yaml": yaml.safe_dump(manifest).encode(), "hook_v05.wasm": hook_wasm.read_bytes()})
    responses = [tool_call("c1", "echo", {"text": "ping"}), tool_call("c2", "printf", {"command": "hi"}), end_turn("ok")]
    capsule = {
        "name": "legacy-hooked", "version": "1.0.0",
        "artifacts": [local("scripted-driver", "driver", EXAMPLES / "scripted-driver"),
                      local("echo", "tool", EXAMPLES / "echo"),
                      {"name": HOOK, "version": "0.5.1", "runtime": "hook"}],
        "inference": {"endpoint": "http://127.0.0.1:9", "model": "scripted", "driver": {
            "artifact": "scripted-driver",
            "config": {"responses": responses, "rules": [{"when": "hook-question", "response": end_turn("hook-answer")}]}}},
        "capabilities": {"shell": {"allow": ["printf"]}},
    }
    project = tmp_path / "project"
    store = project / ".murmur" / "artifacts" / HOOK / "0.5.1"
    store.mkdir(parents=True)
    (store / f"{HOOK}-0.5.1.mur.zip").write_bytes(archive)
    (store / f"{HOOK}-0.5.1.sha256").write_text(sha(archive))
    (project / "murmur.yaml").write_text(yaml.safe_dump(capsule, sort_keys=False))
    return project


async def test_a_published_0_5_0_hook_receives_its_events_and_commits(tmp_path: Path, hook_wasm: Path,
                                                                      host: ComponentHost, monkeypatch) -> None:
    monkeypatch.setenv("MURMUR_CACHE_DIR", str(cache_dir()))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MURMUR_REGISTRY", str(tmp_path / "no-registry"))
    project = _project(tmp_path, hook_wasm)
    staged = stage_capsule(project, host=host, env=dict(os.environ))
    assert staged.artifacts[HOOK].component.legacy_hook
    assert staged.artifacts[HOOK].resolved.origin.startswith("project:")
    recorder = Recorder()
    (outcome,) = await run_session(staged, host, "go", events=recorder)
    assert outcome.exit_status == "ok", outcome.error
    assert outcome.result_text == "ok"

    seen = hook_events(staged.workdir.root, HOOK)
    kinds = [e["event"] for e in seen if "event" in e]
    assert kinds[0] == "on-stage" and kinds[1] == "on-session-start" and kinds[2] == "on-task-start"
    assert kinds[-2:] == ["on-task-end", "on-session-end"]
    start = next(e for e in seen if e.get("event") == "on-task-start")
    assert set(start) == {"event", "n", "task_id", "context_id", "source", "input_bytes"}  # the 0.5.0 shape
    assert start["input_bytes"] == 2
    inferred = next(e["inferred"] for e in seen if "inferred" in e)
    assert inferred["text"] == "hook-answer" and inferred["model_used"] == "scripted"
    tools = [e for e in seen if e.get("event") == "on-tool-call"]
    # one dispatch per call, after it (0.5.0 has no decision point), flat fields; a shell
    # command is its on-shell
    assert [t["tool_name"] for t in tools] == ["echo", "printf"]  # a shell call is a tool call too
    assert set(tools[0]) == {"event", "n", "turn", "tool_name", "input_bytes", "output_bytes", "duration_ms", "status"}
    assert tools[0]["status"] == "ok" and tools[0]["output_bytes"] > 0
    (shell,) = [e for e in seen if e.get("event") == "on-shell"]
    assert shell["binary"].endswith("/printf") and shell["exit_code"] == 0 and shell["stdout"] == "hi"
    assert "argv" not in shell and "outcome" not in shell
    inference = [e for e in seen if e.get("event") == "on-inference"]
    assert [e["decision"] for e in inference] == ["tool_call", "tool_call", "end_turn"]
    # the artifact arm it returned at on-inference was committed, one per turn
    assert [content for _name, content in recorder.artifacts] == [
        {"turn": 0, "decision": "tool_call"}, {"turn": 1, "decision": "tool_call"}, {"turn": 2, "decision": "end_turn"}]
    # on-stage has an instance of its own at staging; the session's instance keeps its state throughout
    counted = [e["n"] for e in seen if "n" in e and e["event"] != "on-stage"]
    assert counted == list(range(1, len(counted) + 1))



def test_the_adaptation_maps_each_record_as_documented() -> None:
    from wasmtime.component import Record, Variant

    from murmurd.host import hook_legacy
    from murmurd.host.hook_values import (CompactionEvent, HookMessage, ShellEvent, ShellOutcome, StageEvent,
                                          TaskStartEvent, ToolEvent, ToolOutcome)

    def fields(record: Record) -> dict:
        return dict(vars(record))

    start = hook_legacy.event_to_wasm(TaskStartEvent("tsk_1", "ctx_1", "a2a", 5, 1000, 900, 10))
    assert fields(start) == {"task-id": "tsk_1", "context-id": "ctx_1", "source": "a2a", "input-bytes": 5}
    assert hook_legacy.event_to_wasm(ToolEvent(0, "echo", "{}", 2)) is hook_legacy.SKIP
    assert hook_legacy.event_to_wasm(ShellEvent(0, "/bin/ls", "-l", ["-l"])) is hook_legacy.SKIP
    tool = hook_legacy.event_to_wasm(ToolEvent(1, "echo", "{}", 2, ToolOutcome(7, 3, "ok")))
    assert list(fields(tool)) == ["turn", "tool-name", "input-bytes", "output-bytes", "duration-ms", "status"]
    shell = hook_legacy.event_to_wasm(ShellEvent(1, "/bin/ls", "-l", ["-l"], None, None,
                                                 ShellOutcome(0, "out", "", 3, 0, 4)))
    assert list(fields(shell)) == ["turn", "binary", "command", "exit-code", "stdout", "stderr", "stdout-bytes",
                                   "stderr-bytes", "duration-ms"]
    compaction = hook_legacy.event_to_wasm(CompactionEvent([HookMessage("user", "hi", "msg_1", "s")], 10, 1))
    assert [fields(m) for m in fields(compaction)["messages"]] == [{"role": "user", "content": "hi"}]
    assert isinstance(fields(compaction)["threshold"], float)
    assert fields(hook_legacy.event_to_wasm(StageEvent(["ls"]))) == {"shell-allow": ["ls"]}

    kept = Record()
    kept.role, kept.content = "user", "summary"
    output = hook_legacy.handler_result_from_wasm(Variant("replace-context", [kept]))
    (message,) = output.value
    assert (message.role, message.content, message.source_id) == ("user", "summary", None)
    assert message.id.startswith("msg_") and len(message.id) == 36  # minted, never the hook's claim
    assert hook_legacy.handler_result_from_wasm("it failed") == "it failed"
    with pytest.raises(TypeError):
        hook_legacy.handler_result_from_wasm(Variant("deny", "no"))


def test_a_0_5_0_hooks_task_start_context_is_its_seed_and_json_text_is_decoded() -> None:
    """murmur's default memory hook (hook@0.5.0) seeds a task by returning `replace-context` from
    `on-task-start`, and its compaction hook JSON-encodes its summary because the 0.5.0 host parses
    returned content as JSON: the adaptation makes the first the seed's `seed-context` (measured
    against the seed budget as any seed), and gives the model the decoded text."""
    from wasmtime.component import Record, Variant

    from murmurd.host import hook_legacy

    memory, summary, odd = Record(), Record(), Record()
    memory.role, memory.content = "user", "Memory Log — 2 prior turn(s)"
    summary.role, summary.content = "user", '"the task: fix the parser\\nnext: run the tests"'
    odd.role, odd.content = "user", '"not one string" "but two"'
    seeded = hook_legacy.handler_result_from_wasm(Variant("replace-context", [memory]), "on-task-start")
    assert seeded.arm == "seed-context" and seeded.value[0].content == "Memory Log — 2 prior turn(s)"
    compacted = hook_legacy.handler_result_from_wasm(Variant("replace-context", [summary, odd]), "on-compaction")
    assert compacted.arm == "replace-context"
    assert [m.content for m in compacted.value] == ["the task: fix the parser\nnext: run the tests",
                                                    '"not one string" "but two"']
