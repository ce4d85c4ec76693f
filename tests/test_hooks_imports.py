"""What a hook's imports reach in a real session: task-io, conversation, tokens, run-inference."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from a2akit import script_capsule
from hookkit import end_turn, hook_log, hook_ref, hooked_capsule, run_session
from loopkit import driver_capsule, stage, trace_events
from murmurd.session.messages import Message, user_message
from murmurd.session.session import TaskSpec
from murmurd.session.tokens import count_tokens

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def arm(artifacts) -> Path:  # type: ignore[no-untyped-def]
    return artifacts.fixture("arm-hook")


def _capsule(tmp_path: Path, arm: Path, monkeypatch, config: dict[str, Any], responses=None, **extra: Any) -> Path:
    monkeypatch.setenv("ARM_HOOK", json.dumps(config))
    hook = hook_ref(tmp_path, "reader", arm, config_var="ARM_HOOK")
    return hooked_capsule(tmp_path, [hook], responses or [end_turn("the answer")], **extra)


def _logged(root: Path, key: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in hook_log(root, "reader") if line.startswith("{") and key in json.loads(line)]


async def test_task_io_reads_the_task_input_and_the_result_once_there_is_one(tmp_path: Path, host, arm, monkeypatch) -> None:
    config = {"on-session-start": {"do": "io"}, "on-task-start": {"do": "io"}, "on-task-end": {"do": "io"}}
    staged = stage(_capsule(tmp_path, arm, monkeypatch, config), host, tmp_path)
    await run_session(staged, host, "what is the answer?")
    at_session_start, at_start, at_end = _logged(staged.workdir.root, "io")
    # upstream nests the session inside the task: on-session-start already sees it
    assert (at_session_start["input"], at_session_start["result"]) == ("what is the answer?", None)
    assert (at_start["input"], at_start["result"]) == ("what is the answer?", None)
    assert (at_end["input"], at_end["result"]) == ("what is the answer?", "the answer")
    assert at_start["tokens"] == count_tokens("hello world")
    assert at_start["history"] == [] and at_end["history"] == []  # stateless


async def test_task_io_outside_a_task_is_an_error(tmp_path: Path, host, arm, monkeypatch) -> None:
    """Every dispatch but a late async delivery is inside a task now; the import still says so."""
    from murmurd.host import ImportFailed
    from murmurd.session.hook_services import HookServices
    from murmurd.session.session import Session

    staged = stage(_capsule(tmp_path, arm, monkeypatch, {}), host, tmp_path)
    session = Session(staged, host)
    await session.open()
    await session.run_task(TaskSpec("tsk_" + "4" * 32, "go"))
    await session.close()
    services = HookServices(session.hooks, "reader", {}, None)
    for read in (services.task_input, services.task_result):
        with pytest.raises(ImportFailed, match="task-io: no task is running"):
            read()


async def test_conversation_read_is_the_contexts_durable_history_oldest_first(tmp_path: Path, host, arm, monkeypatch) -> None:
    staged = stage(_capsule(tmp_path, arm, monkeypatch, {"on-task-start": {"do": "io"}},
                            lifecycle={"conversation": "threaded"}), host, tmp_path)
    earlier = [user_message("first question", source_id="a2a:m1"), Message("assistant", [{"type": "text", "text": "first answer"}])]
    history_dir = staged.workdir.root / "contexts" / "ctx_t"
    history_dir.mkdir(parents=True)
    (history_dir / "history.json").write_text(json.dumps([m.__dict__ for m in earlier]))
    await run_session(staged, host, TaskSpec("tsk_t", "second question", context_id="ctx_t", history=earlier))
    (read,) = _logged(staged.workdir.root, "io")
    assert [(m["role"], m["content"], m["id"], m["source_id"]) for m in read["history"]] == [
        (m.role, m.text, m.id, m.source_id) for m in earlier]


async def test_run_inference_is_one_completion_through_the_capsules_driver(tmp_path: Path, host, arm, monkeypatch) -> None:
    config = {"on-task-end": {"do": "infer", "text": "summarize", "system": "be brief"}}
    staged = stage(_capsule(tmp_path, arm, monkeypatch, config), host, tmp_path)
    (outcome,) = await run_session(staged, host, "go")
    assert outcome.ok
    (answer,) = _logged(staged.workdir.root, "inferred")
    inferred = answer["inferred"]
    assert (inferred["text"], inferred["model_used"]) == ("the answer", "scripted")
    trace = trace_events(staged)
    loop_turn, hook_turn = [e for e in trace if e["event_type"] == "inference"]
    assert "origin" not in loop_turn
    assert (hook_turn["origin"], hook_turn["model"], hook_turn["turn"]) == ("hook:reader", "scripted", loop_turn["turn"])
    assert (hook_turn["input_tokens"], hook_turn["output_tokens"]) == (inferred["input_tokens"], inferred["output_tokens"])
    (task_end,) = [e for e in trace if e["event_type"] == "task_end"]
    (session_end,) = [e for e in trace if e["event_type"] == "session_end"]
    assert task_end["turns"] == session_end["total_turns"] == 2  # a hook completion counts as a turn
    assert session_end["total_input_tokens"] == loop_turn["input_tokens"] + hook_turn["input_tokens"]


async def test_run_inference_is_refused_past_the_spend_ceiling(tmp_path: Path, host, arm, monkeypatch) -> None:
    config = {"on-task-end": {"do": "infer"}}
    staged = stage(_capsule(tmp_path, arm, monkeypatch, config, inference={"max_session_tokens": 10}), host, tmp_path)
    (outcome,) = await run_session(staged, host, "go")
    (refused,) = _logged(staged.workdir.root, "inference_error")
    assert "session token ceiling (10) is reached" in refused["inference_error"]
    assert [e for e in trace_events(staged) if e["event_type"] == "inference" and "origin" in e] == []


async def test_a_model_the_driver_rejects_is_an_error_never_a_fallback(tmp_path: Path, host, arm, monkeypatch) -> None:
    monkeypatch.setenv("ARM_HOOK", json.dumps({"on-task-end": {"do": "infer", "text": "mode:error", "model": "no-such-model"}}))
    hook = hook_ref(tmp_path, "reader", arm, config_var="ARM_HOOK")
    staged = stage(driver_capsule(tmp_path, "chaos-driver", {}, extra_artifacts=[hook]), host, tmp_path)
    (outcome,) = await run_session(staged, host, "hello")
    assert outcome.ok and outcome.result_text == "answer: hello"
    (refused,) = _logged(staged.workdir.root, "inference_error")
    assert "the driver refused model 'no-such-model'" in refused["inference_error"]
    hook_line = [e for e in trace_events(staged) if e.get("origin") == "hook:reader"]
    assert [e["model"] for e in hook_line] == ["no-such-model"]  # traced as asked: no silent fallback


async def test_a_script_capsule_without_a_driver_refuses_run_inference(tmp_path: Path, host, arm, monkeypatch,
                                                                       artifacts) -> None:
    monkeypatch.setenv("ARM_HOOK", json.dumps({"on-session-start": {"do": "infer"}}))
    capsule = script_capsule(tmp_path, "scripted", artifacts.fixture("pull-capsule"),
                             artifacts=[hook_ref(tmp_path, "reader", arm, config_var="ARM_HOOK")])
    staged = stage(capsule, host, tmp_path)
    await run_session(staged, host, "go")
    (refused,) = _logged(staged.workdir.root, "inference_error")
    assert "declares no inference driver" in refused["inference_error"]


async def test_a_hook_without_capabilities_gets_no_directory(tmp_path: Path, host, arm, monkeypatch) -> None:
    staged = stage(_capsule(tmp_path, arm, monkeypatch, {"on-session-start": {"do": "write", "path": "x.txt"}}),
                   host, tmp_path)
    await run_session(staged, host, "go")
    (refused,) = _logged(staged.workdir.root, "write_error")
    assert refused and not (staged.workdir.root / "x.txt").exists()


async def test_a_granted_scope_is_the_hooks_dot(tmp_path: Path, host, arm, monkeypatch) -> None:
    monkeypatch.setenv("ARM_HOOK", json.dumps({"on-session-start": {"do": "write", "path": "x.txt"}}))
    hook = hook_ref(tmp_path, "reader", arm, config_var="ARM_HOOK", capabilities={"filesystem": {"scope": "audit"}})
    staged = stage(hooked_capsule(tmp_path, [hook], [end_turn()]), host, tmp_path)
    await run_session(staged, host, "go")
    assert _logged(staged.workdir.root, "wrote") == [{"wrote": "x.txt"}]
    assert (staged.workdir.root / "audit" / "x.txt").read_text() == "written by arm-hook\n"
    assert not (staged.workdir.root / "x.txt").exists()


async def test_a_hook_completion_is_a_capsule_inference_span(tmp_path: Path, host, arm, monkeypatch) -> None:
    from test_otel import Collector

    collector = Collector()
    try:
        staged = stage(_capsule(tmp_path, arm, monkeypatch, {"on-task-end": {"do": "infer"}},
                                observability={"otel_endpoint": collector.url}), host, tmp_path)
        (outcome,) = await run_session(staged, host, "go")
        assert outcome.ok
        spans = collector.named("capsule.inference")
        origins = [s["attributes"]["origin"].string_value for s in spans if "origin" in s["attributes"]]
        models = [s["attributes"]["model"].string_value for s in spans if "model" in s["attributes"]]
        assert len(spans) == 2 and origins == ["hook:reader"] and models == ["scripted"]
        (session,) = collector.named("capsule.session")  # upstream's span per run; no capsule.task span
        assert all(s["parent"] == session["span_id"] for s in spans)
    finally:
        collector.close()
