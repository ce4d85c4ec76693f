"""The bundled examples, built by `murmurd build` and run through the host."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from murmurd.host import (
    CallGrant,
    ComponentHost,
    ImportFailed,
    SessionContext,
    ToolInput,
    ToolResult,
    ToolStatus,
)
from murmurd.host.context import NO_ACTIVE_TASK


@pytest.fixture(scope="module")
def echo(host: ComponentHost, artifacts):
    return host.load(artifacts.example("echo"))


def test_echo_round_trips_data_and_metadata(host: ComponentHost, echo) -> None:
    payload = json.dumps({"text": "hi", "metadata": {"resource_id": "sym:Foo", "state_effect": "read"}})
    chunks: list[str] = []
    result = host.call_tool_sync(echo, ToolInput(data=payload), on_chunk=chunks.append)
    assert result.status is ToolStatus.PASSED
    assert result.data == payload
    assert result.metadata == [("resource_id", "sym:Foo"), ("state_effect", "read")]
    assert chunks == ["echo: hi"]


def test_echo_keeps_absent_data_absent(host: ComponentHost, echo) -> None:
    assert host.call_tool_sync(echo, ToolInput()).data is None


def _driver_env(responses: list[dict]) -> dict[str, str]:
    return {"MURMUR_INFERENCE_DRIVER_CONFIG": json.dumps({"responses": responses})}


def test_scripted_driver_streams_its_chunks_in_order(host: ComponentHost, artifacts) -> None:
    driver = host.load(artifacts.example("scripted-driver"))
    text = "The answer is forty two, said the driver."
    responses = [
        {"stop_reason": "tool_call", "content": [{"type": "tool_call", "id": "c1", "name": "echo", "input": {}}]},
        {"stop_reason": "end_turn", "thinking": "let me think", "content": [{"type": "text", "text": text}]},
    ]
    request = {
        "model": "scripted",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "q"}]},
            {"role": "assistant", "content": [{"type": "tool_call", "id": "c1", "name": "echo", "input": {}}]},
            {"role": "tool", "tool_call_id": "c1", "is_error": False, "content": [{"type": "text", "text": "r"}]},
        ],
    }
    chunks: list[str] = []
    thinking: list[str] = []
    result = host.call_tool_sync(
        driver, ToolInput(data=json.dumps(request)), grant=CallGrant(env=_driver_env(responses)),
        on_chunk=chunks.append, on_thinking=thinking.append,
    )
    assert result.status is ToolStatus.PASSED
    assert len(chunks) > 3 and "".join(chunks) == text
    assert "".join(thinking) == "let me think"
    assert json.loads(result.data) == {"stop_reason": "end_turn", "content": [{"type": "text", "text": text}]}


def test_scripted_driver_without_a_response_for_the_turn_errors(host: ComponentHost, artifacts) -> None:
    driver = host.load(artifacts.example("scripted-driver"))
    request = {"messages": [{"role": "user", "content": [{"type": "text", "text": "q"}]}]}
    result = host.call_tool_sync(driver, ToolInput(data=json.dumps(request)), grant=CallGrant(env=_driver_env([])))
    assert result.status is ToolStatus.ERROR
    assert "no response for turn 1" in (result.summary or "")


def test_write_file_returns_its_result_through_data_path(host: ComponentHost, artifacts, tmp_path: Path) -> None:
    tool = host.load(artifacts.example("write-file"))
    data = json.dumps({"path": "out/note.txt", "content": "hello file"})
    result = host.call_tool_sync(tool, ToolInput(data=data), grant=CallGrant(preopen=tmp_path))
    assert result.status is ToolStatus.PASSED
    assert result.data is None and result.data_path == "out/note.txt"
    assert (tmp_path / "out" / "note.txt").read_text() == "hello file"


class EchoRegistry(SessionContext):
    """A session whose tool registry holds exactly the echo tool."""

    def __init__(self, host: ComponentHost, echo) -> None:
        self.host, self.echo, self.calls = host, echo, []

    def invoke_tool(self, name: str, tool_input: ToolInput) -> ToolResult:
        self.calls.append(name)
        if name != "echo":
            raise ImportFailed(f"tool-registry: {name!r} is not declared")
        return self.host.call_tool_sync(self.echo, tool_input)


def test_capsule_component_reaches_the_echo_tool_through_invoke(host: ComponentHost, artifacts, echo, tmp_path: Path) -> None:
    capsule = host.load(artifacts.example("invoke-capsule"))
    (tmp_path / "task.md").write_text("ping from the task")
    session = EchoRegistry(host, echo)
    host.run_capsule_sync(capsule, grant=CallGrant(preopen=tmp_path), session=session)
    assert session.calls == ["echo"]
    assert json.loads((tmp_path / "out" / "result.txt").read_text()) == {"text": "ping from the task"}


@pytest.mark.anyio
async def test_capsule_runs_on_the_pool_too(host: ComponentHost, artifacts, echo, tmp_path: Path) -> None:
    capsule = host.load(artifacts.example("invoke-capsule"))
    await host.run_capsule(capsule, grant=CallGrant(preopen=tmp_path), session=EchoRegistry(host, echo))
    assert json.loads((tmp_path / "out" / "result.txt").read_text()) == {"text": "hello from capsule"}


def test_request_input_without_a_task_answers_with_the_seed_error(host: ComponentHost, artifacts) -> None:
    ask = host.load(artifacts.fixture("ask"))
    assert host.call_tool_sync(ask, ToolInput(data="approve?")).data == NO_ACTIVE_TASK


class Supervisor(SessionContext):
    def __init__(self) -> None:
        self.prompts: list[str] = []

    def request_input(self, prompt: str) -> str:
        self.prompts.append(prompt)
        return "approved"


def test_request_input_reaches_the_session_context(host: ComponentHost, artifacts) -> None:
    ask = host.load(artifacts.fixture("ask"))
    supervisor = Supervisor()
    assert host.call_tool_sync(ask, ToolInput(data="approve?"), session=supervisor).data == "approved"
    assert supervisor.prompts == ["approve?"]


def test_the_debug_hook_loads_as_a_hook_with_every_handler(host: ComponentHost, artifacts) -> None:
    from murmurd.contract import Role
    from murmurd.host.hook_values import HANDLERS

    hook = host.load(artifacts.example("debug-hook"), expected=Role.HOOK)
    assert hook.role is Role.HOOK
    assert "murmur:hook/lifecycle@0.8.0" in hook.exports
    assert hook.handlers == frozenset(HANDLERS)
    assert {"murmur:runtime/inference@0.3.0", "murmur:runtime/tokens@0.3.0"} <= set(hook.imports)
