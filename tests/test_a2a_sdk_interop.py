"""Interoperability with the official a2a-sdk CLIENT against a real `murmurd serve` on loopback.

Every test drives a served chaos capsule (tests/fixtures/chaos-driver) through the SDK's public
client API (`create_client`, `ClientFactory`, `Client`), once through its A2A 1.0
JSON-RPC transport and once through its v0.3 compatibility transport, the way each kind of client
discovers the capsule from `/.well-known/agent-card.json`:

- "1.0": `create_client(url)`; the SDK reads `supportedInterfaces` and prefers the 1.0 interface
  (`SendMessage`, `GetTask`, ...);
- "0.3": the card read as an A2A 0.3 card (`url`, `preferredTransport`, `protocolVersion`) and
  converted by the SDK, which then picks `CompatJsonRpcTransport` (`message/send`, `tasks/get`,
  ... with `A2A-Version: 0.3`).

The SDK clients keep their default httpx timeout (5 s): only the server's A2A heartbeats keep a
quiet stream open. The JSON-RPC methods each client really sent are recorded by an httpx hook.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from a2a.client import Client, ClientConfig, ClientFactory, create_client
from a2a.compat.v0_3 import conversions
from a2a.compat.v0_3 import types as types_v03
from a2a.helpers import get_artifact_text, get_message_text, new_text_message
from a2a.server.tasks.task_manager import append_artifact_to_task
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError

from a2akit import Served, chaos_capsule, serving

VERSIONS = ("1.0", "0.3")
METHODS = {
    "1.0": {"send": "SendMessage", "stream": "SendStreamingMessage", "get": "GetTask", "cancel": "CancelTask",
            "subscribe": "SubscribeToTask", "list": "ListTasks"},
    "0.3": {"send": "message/send", "stream": "message/stream", "get": "tasks/get", "cancel": "tasks/cancel",
            "subscribe": "tasks/resubscribe"},
}
S = pb.TaskState


@pytest.fixture(scope="module")
def served(tmp_path_factory, artifacts) -> Served:
    for name in ("chaos-driver", "ask"):
        artifacts.fixture(name)
    artifacts.example("echo")
    root = tmp_path_factory.mktemp("sdk-interop")
    capsule = chaos_capsule(root, deadline=600, lifecycle={"task_acceptance": "queue", "queue_depth": 100})
    with serving(capsule, root / "state") as running:
        yield running


@dataclass
class Wire:
    """What an SDK client put on the wire: (HTTP method, path, JSON-RPC method, A2A-Version)."""

    requests: list[tuple[str, str, str | None, str | None]] = field(default_factory=list)

    async def hook(self, request: httpx.Request) -> None:
        method = None
        if request.method == "POST" and request.content:
            method = json.loads(request.content).get("method")
        self.requests.append((request.method, request.url.path, method, request.headers.get("a2a-version")))

    @property
    def rpc_methods(self) -> list[str]:
        return [m for _, _, m, _ in self.requests if m is not None]

    @property
    def versions(self) -> set[str | None]:
        return {v for _, _, m, v in self.requests if m is not None}


@dataclass
class Sdk:
    """An a2a-sdk client for one transport, plus what it sent."""

    version: str
    client: Client
    card: pb.AgentCard
    wire: Wire

    def method(self, op: str) -> str:
        return METHODS[self.version][op]


def user(text: str, task_id: str | None = None, context_id: str | None = None) -> pb.SendMessageRequest:
    return pb.SendMessageRequest(message=new_text_message(text, role=pb.Role.ROLE_USER, task_id=task_id,
                                                          context_id=context_id))


async def discover(url: str, version: str, http: httpx.AsyncClient,
                   config: ClientConfig) -> tuple[Client, pb.AgentCard]:
    """The client a `version` SDK user gets for the capsule at `url`, from its agent card."""
    if version == "1.0":
        client = await create_client(url, config)
        card = await client.get_extended_agent_card(pb.GetExtendedAgentCardRequest())  # the card it holds
        return client, card
    response = await http.get(url.rstrip("/") + "/.well-known/agent-card.json")
    response.raise_for_status()
    card = conversions.to_core_agent_card(types_v03.AgentCard.model_validate(response.json()))
    return ClientFactory(config).create(card), card


@pytest.fixture
async def sdk(served: Served) -> AsyncIterator[Any]:
    """`await sdk(version, streaming=..., polling=...)` -> Sdk; all closed after the test."""
    opened: list[tuple[Client, httpx.AsyncClient]] = []

    async def make(version: str, *, streaming: bool = False, polling: bool = False) -> Sdk:
        wire = Wire()
        http = httpx.AsyncClient(event_hooks={"request": [wire.hook]})  # httpx's (and the SDK's) 5 s timeout
        assert http.timeout.read == 5.0
        config = ClientConfig(httpx_client=http, streaming=streaming, polling=polling)
        client, card = await discover(served.url, version, http, config)
        opened.append((client, http))
        return Sdk(version, client, card, wire)

    yield make
    for client, http in opened:
        await client.close()
        await http.aclose()


async def send_one(client: Client, request: pb.SendMessageRequest) -> pb.Task:
    """A non-streaming send: the SDK yields exactly one response, a task."""
    responses = [r async for r in client.send_message(request)]
    assert len(responses) == 1 and responses[0].HasField("task"), responses
    return responses[0].task


async def wait_state(client: Client, task_id: str, *states: int, timeout: float = 30) -> pb.Task:
    deadline = time.monotonic() + timeout
    while True:
        task = await client.get_task(pb.GetTaskRequest(id=task_id))
        if task.status.state in states:
            return task
        assert time.monotonic() < deadline, f"task {task_id} stayed {S.Name(task.status.state)}"
        await asyncio.sleep(0.05)


def answer(task: pb.Task) -> str:
    return get_message_text(task.status.message)


def state_names(events: list[pb.StreamResponse]) -> list[str]:
    names = []
    for event in events:
        if event.HasField("task"):
            names.append("task:" + S.Name(event.task.status.state))
        elif event.HasField("status_update"):
            names.append(S.Name(event.status_update.status.state))
    return names


# --- discovery --------------------------------------------------------------------------------

@pytest.mark.anyio
@pytest.mark.parametrize("version", VERSIONS)
async def test_card_discovery_picks_the_transport(sdk: Any, served: Served, version: str) -> None:
    s = await sdk(version)
    assert s.card.name == "chaos" and s.card.version == "1.0.0"
    assert s.card.capabilities.streaming is True
    assert {skill.name for skill in s.card.skills} == {"ask", "echo"}
    assert all(i.url == served.url and i.protocol_binding == "JSONRPC" for i in s.card.supported_interfaces)
    assert s.wire.requests[0][:2] == ("GET", "/.well-known/agent-card.json")
    if version == "1.0":
        assert [i.protocol_version for i in s.card.supported_interfaces] == ["1.0", "0.3"]
    else:
        assert s.card.supported_interfaces[0].protocol_version == "0.3.0"
    task = await send_one(s.client, user("discovered"))
    assert answer(task) == "answer: discovered"
    assert s.wire.rpc_methods == [s.method("send")]
    assert s.wire.versions == {version}


# --- send and get -----------------------------------------------------------------------------

@pytest.mark.anyio
@pytest.mark.parametrize("version", VERSIONS)
async def test_blocking_send_returns_the_completed_task_with_its_answer(sdk: Any, version: str) -> None:
    s = await sdk(version)
    task = await send_one(s.client, user("hello sdk"))
    assert task.status.state == S.TASK_STATE_COMPLETED
    assert answer(task) == "answer: hello sdk"
    assert task.status.message.role == pb.Role.ROLE_AGENT
    assert [a.name for a in task.artifacts] == ["result"]
    assert get_artifact_text(task.artifacts[0]) == "answer: hello sdk"
    assert [(m.role, get_message_text(m)) for m in task.history] == [
        (pb.Role.ROLE_USER, "hello sdk"), (pb.Role.ROLE_AGENT, "answer: hello sdk")]
    assert task.id.startswith("tsk_") and task.context_id.startswith("ctx_")


@pytest.mark.anyio
@pytest.mark.parametrize("version", VERSIONS)
async def test_get_task_and_task_not_found(sdk: Any, version: str) -> None:
    s = await sdk(version)
    sent = await send_one(s.client, user("fetch me"))
    fetched = await s.client.get_task(pb.GetTaskRequest(id=sent.id))
    assert fetched.id == sent.id and fetched.context_id == sent.context_id
    assert fetched.status.state == S.TASK_STATE_COMPLETED and answer(fetched) == "answer: fetch me"
    assert [a.artifact_id for a in fetched.artifacts] == [a.artifact_id for a in sent.artifacts]
    last = await s.client.get_task(pb.GetTaskRequest(id=sent.id, history_length=1))
    assert [get_message_text(m) for m in last.history] == ["answer: fetch me"]
    with pytest.raises(TaskNotFoundError):
        await s.client.get_task(pb.GetTaskRequest(id="tsk_" + "0" * 32))
    assert s.wire.rpc_methods == [s.method("send")] + [s.method("get")] * 3


# --- streaming --------------------------------------------------------------------------------

@pytest.mark.anyio
@pytest.mark.parametrize("version", VERSIONS)
async def test_streaming_send_delivers_snapshot_updates_and_the_completed_answer(sdk: Any, version: str) -> None:
    s = await sdk(version, streaming=True)
    events = [e async for e in s.client.send_message(user("stream me"))]
    assert s.wire.rpc_methods == [s.method("stream")]
    assert events[0].HasField("task"), "the stream opens with the task snapshot"
    task = pb.Task()
    task.CopyFrom(events[0].task)
    states = state_names(events)
    assert states[0] in ("task:TASK_STATE_SUBMITTED", "task:TASK_STATE_WORKING")
    assert "TASK_STATE_WORKING" in states
    if states[0] == "task:TASK_STATE_WORKING":  # created working: no update steps it back behind its snapshot
        assert "TASK_STATE_SUBMITTED" not in states
    assert states[-1] == "TASK_STATE_COMPLETED" and events[-1].HasField("status_update")
    final = events[-1].status_update
    assert final.task_id == task.id and final.context_id == task.context_id
    assert get_message_text(final.status.message) == "answer: stream me"
    chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
    assert chunks and all(c.task_id == task.id for c in chunks)
    for chunk in chunks:  # aggregate the way an SDK consumer does
        append_artifact_to_task(task, chunk)
    assert [a.name for a in task.artifacts] == ["result"]
    assert get_artifact_text(task.artifacts[0], "") == "answer: stream me"
    fetched = await s.client.get_task(pb.GetTaskRequest(id=task.id))
    assert fetched.status.state == S.TASK_STATE_COMPLETED
    # the answer streamed in chunks is the same artifact get shows (one artifact, not two)
    assert [a.artifact_id for a in fetched.artifacts] == [a.artifact_id for a in task.artifacts]


@pytest.mark.anyio
@pytest.mark.parametrize("version", VERSIONS)
async def test_subscribe_to_a_quiet_task_outlives_the_sdk_timeout_and_ends_canceled(sdk: Any, version: str) -> None:
    """A task that says nothing for longer than the SDK's 5 s read timeout: heartbeats keep the
    SDK's stream open; a cancel from another client ends it with the canceled state."""
    watcher = await sdk(version, streaming=True)
    control = await sdk(version, polling=True)
    submitted = await send_one(control.client, user("mode:hang"))
    assert submitted.status.state in (S.TASK_STATE_SUBMITTED, S.TASK_STATE_WORKING)
    try:
        await wait_state(control.client, submitted.id, S.TASK_STATE_WORKING)
        events: list[pb.StreamResponse] = []
        stream = watcher.client.subscribe(pb.SubscribeToTaskRequest(id=submitted.id))
        first = await anext(stream)
        events.append(first)
        assert first.HasField("task") and first.task.status.state == S.TASK_STATE_WORKING
        nothing = asyncio.ensure_future(anext(stream))
        await asyncio.sleep(6.5)  # longer than the SDK's 5 s timeout, with nothing to say
        assert not nothing.done(), f"the quiet stream gave {nothing.exception() or nothing.result()}"
        canceled = await control.client.cancel_task(pb.CancelTaskRequest(id=submitted.id))
        assert canceled.status.state == S.TASK_STATE_CANCELED
        events.append(await asyncio.wait_for(nothing, 10))
        events += [e async for e in stream]
    finally:
        with contextlib.suppress(TaskNotCancelableError):  # never leave the worker spinning
            await control.client.cancel_task(pb.CancelTaskRequest(id=submitted.id))
    assert state_names(events)[-1] == "TASK_STATE_CANCELED"
    assert get_message_text(events[-1].status_update.status.message) == "canceled by request"
    assert watcher.wire.rpc_methods == [watcher.method("subscribe")]


# --- cancel -----------------------------------------------------------------------------------

@pytest.mark.anyio
@pytest.mark.parametrize("version", VERSIONS)
async def test_cancel_of_a_hanging_task_ends_it_canceled(sdk: Any, version: str) -> None:
    s = await sdk(version, polling=True)  # return at once: the task would outlast the SDK's timeout
    submitted = await send_one(s.client, user("mode:hang"))
    try:
        await wait_state(s.client, submitted.id, S.TASK_STATE_WORKING)
        await asyncio.sleep(0.3)  # the driver spins inside WASM now
        started = time.monotonic()
        canceled = await s.client.cancel_task(pb.CancelTaskRequest(id=submitted.id))
        assert time.monotonic() - started < 2.0
    finally:
        with contextlib.suppress(TaskNotCancelableError):
            await s.client.cancel_task(pb.CancelTaskRequest(id=submitted.id))
    assert canceled.id == submitted.id and canceled.status.state == S.TASK_STATE_CANCELED
    assert get_message_text(canceled.status.message) == "canceled by request"
    fetched = await s.client.get_task(pb.GetTaskRequest(id=submitted.id))
    assert fetched.status.state == S.TASK_STATE_CANCELED
    with pytest.raises(TaskNotCancelableError):
        await s.client.cancel_task(pb.CancelTaskRequest(id=submitted.id))
    sent = s.wire.rpc_methods
    assert sent[0] == s.method("send") and s.method("cancel") in sent
    # the worker is free again: the next task runs to completion
    blocking = await sdk(version)
    assert answer(await send_one(blocking.client, user("after cancel"))) == "answer: after cancel"


@pytest.mark.anyio
@pytest.mark.parametrize("version", VERSIONS)
async def test_cancel_of_a_finished_task_is_the_sdk_not_cancelable_error(sdk: Any, version: str) -> None:
    s = await sdk(version)
    done = await send_one(s.client, user("already done"))
    assert done.status.state == S.TASK_STATE_COMPLETED
    with pytest.raises(TaskNotCancelableError) as caught:
        await s.client.cancel_task(pb.CancelTaskRequest(id=done.id))
    assert done.id in str(caught.value) and "completed" in str(caught.value)
    with pytest.raises(TaskNotFoundError):
        await s.client.cancel_task(pb.CancelTaskRequest(id="tsk_" + "f" * 32))
    assert (await s.client.get_task(pb.GetTaskRequest(id=done.id))).status.state == S.TASK_STATE_COMPLETED
    assert s.wire.rpc_methods == [s.method("send"), s.method("cancel"), s.method("cancel"), s.method("get")]


# --- ListTasks (1.0) --------------------------------------------------------------------------

@pytest.mark.anyio
async def test_list_tasks_filters_by_context_and_state_and_pages(sdk: Any) -> None:
    s = await sdk("1.0")
    first = await send_one(s.client, user("one"))
    context = first.context_id
    second = await send_one(s.client, user("two", context_id=context))
    other = await send_one(s.client, user("elsewhere"))
    assert second.context_id == context and other.context_id != context

    listed = await s.client.list_tasks(pb.ListTasksRequest(context_id=context))
    assert {t.id for t in listed.tasks} == {first.id, second.id}
    assert all(t.context_id == context and t.status.state == S.TASK_STATE_COMPLETED for t in listed.tasks)
    assert listed.total_size == 2 and listed.next_page_token == ""
    assert all(not t.artifacts for t in listed.tasks), "artifacts only with include_artifacts"
    with_artifacts = await s.client.list_tasks(pb.ListTasksRequest(context_id=context, include_artifacts=True))
    assert {get_artifact_text(t.artifacts[0]) for t in with_artifacts.tasks} == {"answer: one", "answer: two"}

    pages, token = [], ""
    for _ in range(5):
        page = await s.client.list_tasks(pb.ListTasksRequest(context_id=context, page_size=1, page_token=token))
        pages.append([t.id for t in page.tasks])
        token = page.next_page_token
        if not token:
            break
    assert len(pages) == 2 and all(len(p) == 1 for p in pages)
    assert {pages[0][0], pages[1][0]} == {first.id, second.id}

    everything = await s.client.list_tasks(pb.ListTasksRequest(status=S.TASK_STATE_COMPLETED, page_size=100))
    assert {first.id, second.id, other.id} <= {t.id for t in everything.tasks}
    assert all(t.status.state == S.TASK_STATE_COMPLETED for t in everything.tasks)
    none = await s.client.list_tasks(pb.ListTasksRequest(context_id=context, status=S.TASK_STATE_FAILED))
    assert list(none.tasks) == []
    assert set(s.wire.rpc_methods) == {"SendMessage", "ListTasks"}


# --- input-required ---------------------------------------------------------------------------

@pytest.mark.anyio
@pytest.mark.parametrize("version", VERSIONS)
async def test_input_required_round_trip_with_blocking_sends(sdk: Any, version: str) -> None:
    s = await sdk(version)
    asked = await send_one(s.client, user("mode:ask"))
    assert asked.status.state == S.TASK_STATE_INPUT_REQUIRED
    assert answer(asked) == "May I proceed?"
    assert [(a.name, get_artifact_text(a)) for a in asked.artifacts] == [("prompt", "May I proceed?")]
    waiting = await s.client.get_task(pb.GetTaskRequest(id=asked.id))
    assert waiting.status.state == S.TASK_STATE_INPUT_REQUIRED

    done = await send_one(s.client, user("yes, go ahead", task_id=asked.id))
    assert done.id == asked.id and done.context_id == asked.context_id
    assert done.status.state == S.TASK_STATE_COMPLETED, S.Name(done.status.state)
    assert answer(done) == "answer: yes, go ahead"
    assert [(a.name, get_artifact_text(a)) for a in done.artifacts] == [("result", "answer: yes, go ahead")]
    assert [get_message_text(m) for m in done.history] == ["mode:ask", "yes, go ahead", "answer: yes, go ahead"]
    assert s.wire.rpc_methods == [s.method("send"), s.method("get"), s.method("send")]


@pytest.mark.anyio
@pytest.mark.parametrize("version", VERSIONS)
async def test_input_required_round_trip_with_streams(sdk: Any, version: str) -> None:
    s = await sdk(version, streaming=True)
    asked = [e async for e in s.client.send_message(user("mode:ask"))]
    task_id = asked[0].task.id
    assert state_names(asked)[-1] == "TASK_STATE_INPUT_REQUIRED", "the stream ends where the client must answer"
    assert get_message_text(asked[-1].status_update.status.message) == "May I proceed?"

    replied = [e async for e in s.client.send_message(user("stream on", task_id=task_id))]
    assert replied[0].HasField("task") and replied[0].task.id == task_id
    assert replied[0].task.status.state == S.TASK_STATE_WORKING
    states = state_names(replied)
    assert "TASK_STATE_INPUT_REQUIRED" not in states and states[-1] == "TASK_STATE_COMPLETED"
    assert get_message_text(replied[-1].status_update.status.message) == "answer: stream on"
    artifacts = [e.artifact_update.artifact for e in replied if e.HasField("artifact_update")]
    # the ask tool's result, then the answer
    assert [(a.name, get_artifact_text(a, "")) for a in artifacts] == [("ask", "stream on"),
                                                                        ("result", "answer: stream on")]
    assert s.wire.rpc_methods == [s.method("stream")] * 2
