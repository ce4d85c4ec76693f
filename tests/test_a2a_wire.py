"""A2A wire dialects and the agent card, checked against a2a-sdk's own types and client.

The SDK is a test dependency (`dev` extra). Rendered JSON is parsed with the SDK's 1.0 protobuf
types (strictly: unknown members fail) and its v0.3 pydantic types, and the last tests drive the
real SDK clients (1.0 JSON-RPC transport and the v0.3 compat transport) against a small in-test
router built from these modules over `httpx.MockTransport`.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory, create_client
from a2a.client.card_resolver import parse_agent_card
from a2a.client.transports.jsonrpc import JsonRpcTransport
from a2a.compat.v0_3 import conversions
from a2a.compat.v0_3 import types as types_v03
from a2a.compat.v0_3.jsonrpc_transport import CompatJsonRpcTransport
from a2a.helpers.proto_helpers import get_artifact_text, get_message_text, new_text_message
from a2a.server.tasks.task_manager import append_artifact_to_task
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError
from google.protobuf import json_format

from murmurd.a2a.wire import jsonrpc

from murmurd.a2a import wire
from murmurd.a2a.http.card import agent_card
from murmurd.a2a.wire.jsonrpc import JsonRpcError, JsonRpcRequest
from murmurd.a2a.core.tasks import TaskArtifact, TaskMessage, TaskRecord, TaskState, new_context_id, new_task_id
from murmurd.a2a.wire import Dialect, Operation, StreamRenderer

URL = "http://capsule.test/"
PNG = base64.b64encode(b"\x89PNG fake").decode()


def record(state: TaskState = TaskState.COMPLETED, **kwargs: Any) -> TaskRecord:
    defaults: dict[str, Any] = {"id": new_task_id(), "context_id": new_context_id(), "state": state}
    if state is TaskState.COMPLETED:
        defaults["result_text"] = "the answer"
    if state is TaskState.INPUT_REQUIRED:
        defaults["status_message"] = "Which branch?"
        defaults["artifacts"] = [TaskArtifact("prompt", [{"text": "Which branch?"}])]
    if state is TaskState.FAILED:
        defaults["status_message"] = "driver exploded"
    defaults["history"] = [TaskMessage("m1", "user", [{"text": "do it"}, {"kind": "data", "data": {"k": 1}}])]
    defaults.update(kwargs)
    return TaskRecord(**defaults)


def strict_v10(data: dict[str, Any], message: Any) -> Any:
    """Parse ProtoJSON the strict way (unknown members fail), as a conformance check."""
    return json_format.ParseDict(data, message, ignore_unknown_fields=False)


def invalid_params(excinfo: pytest.ExceptionInfo[JsonRpcError]) -> str:
    assert excinfo.value.code == -32602
    return excinfo.value.message


# --- methods and dialect detection ------------------------------------------------------------

def test_method_table_covers_the_three_dialects() -> None:
    assert wire.METHOD_TABLE["message/send"] == (Dialect.UPSTREAM, Operation.SEND)
    assert wire.METHOD_TABLE["stream/watch"] == (Dialect.UPSTREAM, Operation.WATCH)
    assert wire.METHOD_TABLE["tasks/send"] == (Dialect.V02, Operation.SEND)
    assert wire.METHOD_TABLE["tasks/sendSubscribe"] == (Dialect.V02, Operation.STREAM)
    v10 = {m: op for m, (d, op) in wire.METHOD_TABLE.items() if d is Dialect.V10}
    assert v10 == {"SendMessage": Operation.SEND, "SendStreamingMessage": Operation.STREAM, "GetTask": Operation.GET,
                   "CancelTask": Operation.CANCEL, "SubscribeToTask": Operation.RESUBSCRIBE,
                   "ListTasks": Operation.LIST, "GetExtendedAgentCard": Operation.EXTENDED_CARD,
                   **{f"{verb}TaskPushNotificationConfig": Operation.PUSH_CONFIG
                      for verb in ("Create", "Get", "List", "Delete")},
                   "ListTaskPushNotificationConfigs": Operation.PUSH_CONFIG}
    assert {op for op in Operation if op.streaming} == {Operation.STREAM, Operation.RESUBSCRIBE, Operation.WATCH}


def test_unknown_method_is_method_not_found() -> None:
    with pytest.raises(JsonRpcError) as caught:
        wire.resolve_dialect("tasks/explode", {})
    assert caught.value.code == -32601
    with pytest.raises(JsonRpcError):
        wire.lookup_method("sendmessage")


def test_upstream_and_v03_are_told_apart() -> None:
    upstream = {"message": {"messageId": "m", "role": "user", "parts": [{"text": "hi"}]}}
    tagged_message = {"message": {"kind": "message", "messageId": "m", "role": "user", "parts": [{"text": "hi"}]}}
    tagged_part = {"message": {"messageId": "m", "role": "user", "parts": [{"kind": "text", "text": "hi"}]}}
    assert wire.resolve_dialect("message/send", upstream) == (Dialect.UPSTREAM, Operation.SEND)
    assert wire.resolve_dialect("message/send", tagged_message) == (Dialect.V03, Operation.SEND)
    assert wire.resolve_dialect("message/stream", tagged_part) == (Dialect.V03, Operation.STREAM)
    assert wire.resolve_dialect("message/send", upstream, {"A2A-Version": "0.3"})[0] is Dialect.V03
    assert wire.resolve_dialect("tasks/get", {"id": "t"}, {"a2a-version": "0.3.0"})[0] is Dialect.V03
    assert wire.resolve_dialect("tasks/get", {"id": "t"}, {"a2a-version": "1.0"})[0] is Dialect.UPSTREAM
    assert wire.resolve_dialect("tasks/get", {"id": "t"})[0] is Dialect.UPSTREAM
    assert wire.resolve_dialect("tasks/get", {"id": "t"}, task_dialect=Dialect.V02)[0] is Dialect.V02
    assert wire.resolve_dialect("tasks/cancel", {"id": "t"}, task_dialect=Dialect.V03)[0] is Dialect.V03
    assert wire.resolve_dialect("tasks/get", {"id": "t"}, task_dialect=Dialect.V10)[0] is Dialect.UPSTREAM
    assert wire.resolve_dialect("GetTask", {"id": "t"}, {"A2A-Version": "0.3"})[0] is Dialect.V10
    assert wire.resolve_dialect("message/send", "garbage") == (Dialect.UPSTREAM, Operation.SEND)


# --- send params: each dialect, text joined, other parts kept verbatim ------------------------

def test_upstream_send_params() -> None:
    parts = [{"text": "hello "}, {"data": {"x": 1}}, {"text": "world"}]
    send = wire.parse_send_params(Dialect.UPSTREAM, {"message": {
        "messageId": "m1", "contextId": "ctx_1", "taskId": "tsk_1", "role": "user", "parts": parts}})
    assert send.text == "hello world"
    assert send.message.parts == parts
    assert (send.message.message_id, send.message.role) == ("m1", "user")
    assert (send.task_id, send.context_id) == ("tsk_1", "ctx_1")
    assert send.blocking is False and send.dialect is Dialect.UPSTREAM


def test_upstream_send_fills_message_id_and_role() -> None:
    send = wire.parse_send_params(Dialect.UPSTREAM, {"message": {"parts": [{"text": "x"}]},
                                                     "configuration": {"blocking": True}})
    assert send.message.message_id.startswith("msg_") and send.message.role == "user"
    assert send.blocking is True and send.task_id is None and send.context_id is None


def v03_params(parts: list[pb.Part], **message: Any) -> dict[str, Any]:
    """Exactly what a2a-sdk's v0.3 compat transport sends for message/send."""
    request = pb.SendMessageRequest(
        message=pb.Message(message_id="m-03", role=pb.Role.ROLE_USER, parts=parts, **message),
        configuration=pb.SendMessageConfiguration(history_length=3))
    compat = conversions.to_compat_send_message_request(request, request_id=0)
    return compat.params.model_dump(by_alias=True, exclude_none=True, mode="json")


def test_v03_send_params_from_the_sdk_compat_transport() -> None:
    params = v03_params([pb.Part(text="hello "), pb.Part(url="https://x.test/a.png", media_type="image/png"),
                         pb.Part(text="there")], context_id="ctx_c", task_id="tsk_t")
    assert wire.resolve_dialect("message/send", params)[0] is Dialect.V03
    send = wire.parse_send_params(Dialect.V03, params)
    assert send.text == "hello there"
    assert send.message.parts == params["message"]["parts"]
    assert send.message.parts[1] == {"kind": "file", "file": {"mimeType": "image/png", "uri": "https://x.test/a.png"}}
    assert (send.task_id, send.context_id, send.history_length, send.blocking) == ("tsk_t", "ctx_c", 3, True)
    assert send.message.message_id == "m-03"


def v10_params(parts: list[pb.Part], **configuration: Any) -> dict[str, Any]:
    """Exactly what a2a-sdk's 1.0 JSON-RPC transport sends for SendMessage."""
    request = pb.SendMessageRequest(message=pb.Message(message_id="m-10", role=pb.Role.ROLE_USER, parts=parts,
                                                       context_id="ctx_z"),
                                    configuration=pb.SendMessageConfiguration(**configuration))
    return json_format.MessageToDict(request)


def test_v10_send_params_from_the_sdk_transport() -> None:
    data = json_format.ParseDict({"k": [1, 2]}, pb.Part().data)
    params = v10_params([pb.Part(text="a", media_type="text/plain"), pb.Part(raw=b"\x89PNG fake", filename="x.png"),
                         pb.Part(data=data), pb.Part(text="b")], return_immediately=True)
    assert params["message"]["role"] == "ROLE_USER"
    send = wire.parse_send_params(Dialect.V10, params)
    assert send.text == "ab"
    assert send.message.parts == params["message"]["parts"]
    assert send.message.parts[1] == {"raw": PNG, "filename": "x.png"}
    assert (send.context_id, send.task_id, send.blocking, send.message.role) == ("ctx_z", None, False, "user")
    assert wire.parse_send_params(Dialect.V10, v10_params([pb.Part(text="x")])).blocking is True


def test_v10_accepts_snake_case_and_numeric_enums() -> None:
    send = wire.parse_send_params(Dialect.V10, {"message": {"message_id": "m", "role": 2, "parts": [{"text": "hi"}],
                                                            "task_id": "tsk_9"}})
    assert (send.message.message_id, send.message.role, send.task_id) == ("m", "agent", "tsk_9")


def test_v02_send_params() -> None:
    parts = [{"type": "text", "text": "one "}, {"type": "file", "file": {"bytes": PNG, "mimeType": "image/png"}},
             {"type": "text", "text": "two"}]
    send = wire.parse_send_params(Dialect.V02, {"id": "client-task-1", "sessionId": "s1",
                                                "message": {"role": "user", "parts": parts}, "historyLength": 2})
    assert send.text == "one two" and send.message.parts == parts
    assert (send.task_id, send.context_id, send.client_task_id, send.blocking) == ("client-task-1", "s1", True, True)
    assert send.history_length == 2


@pytest.mark.parametrize(("dialect", "params", "field"), [
    (Dialect.UPSTREAM, {}, "message"),
    (Dialect.UPSTREAM, {"message": {"parts": []}}, "message.parts"),
    (Dialect.UPSTREAM, {"message": {"parts": "hi"}}, "message.parts"),
    (Dialect.UPSTREAM, {"message": {"parts": [{"text": 5}]}}, "message.parts"),
    (Dialect.UPSTREAM, {"message": {"parts": ["hi"]}}, "message.parts[0]"),
    (Dialect.UPSTREAM, {"message": {"role": "boss", "parts": [{"text": "x"}]}}, "message.role"),
    (Dialect.UPSTREAM, {"message": {"taskId": 7, "parts": [{"text": "x"}]}}, "message.taskId"),
    (Dialect.UPSTREAM, {"message": {"taskId": "t" * 300, "parts": [{"text": "x"}]}}, "message.taskId"),
    (Dialect.V03, {"message": {"kind": "message", "role": "user", "parts": [{"kind": "text", "text": "x"}]}},
     "message.messageId"),
    (Dialect.V03, {"message": {"messageId": "m", "role": "user", "parts": [{"kind": "image"}]}}, "message.parts[0]"),
    (Dialect.V03, {"message": {"messageId": "m", "role": "user",
                               "parts": [{"kind": "file", "file": {"name": "x"}}]}}, "message.parts[0]"),
    (Dialect.V10, {"message": {"role": "ROLE_USER", "parts": [{"text": "a", "url": "u"}]}}, "message.parts[0]"),
    (Dialect.V10, {"message": {"role": "ROLE_USER", "parts": [{}]}}, "message.parts[0]"),
    (Dialect.V10, {"message": {"role": "user", "parts": [{"text": "a"}]}}, "message.role"),
    (Dialect.V10, {"message": {"parts": [{"text": "a"}]}, "configuration": {"historyLength": -1}},
     "configuration.historyLength"),
    (Dialect.V02, {"message": {"role": "user", "parts": [{"type": "text", "text": "x"}]}}, "id"),
    (Dialect.V02, {"id": "t", "message": {"role": "user", "parts": [{"type": "data", "data": 3}]}},
     "message.parts[0]"),
])
def test_bad_send_params_name_the_field(dialect: Dialect, params: dict[str, Any], field: str) -> None:
    with pytest.raises(JsonRpcError) as caught:
        wire.parse_send_params(dialect, params)
    assert field in invalid_params(caught)


@pytest.mark.parametrize("params", [None, [1, 2], "x"])
def test_send_params_must_be_an_object(params: Any) -> None:
    for dialect in Dialect:
        with pytest.raises(JsonRpcError) as caught:
            wire.parse_send_params(dialect, params)
        assert caught.value.code == -32602


def test_task_id_params() -> None:
    for dialect in Dialect:
        assert wire.parse_task_id_params(dialect, {"id": "tsk_1"}) == "tsk_1"
        with pytest.raises(JsonRpcError):
            wire.parse_task_id_params(dialect, {})
        with pytest.raises(JsonRpcError):
            wire.parse_task_id_params(dialect, {"id": 5})
    assert wire.parse_task_query(Dialect.V03, {"id": "t", "historyLength": 2}).history_length == 2
    assert wire.parse_task_id_params(Dialect.V10, {"name": "tasks/tsk_2"}) == "tsk_2"
    get = json_format.MessageToDict(pb.GetTaskRequest(id="tsk_3", history_length=1))
    assert wire.parse_task_query(Dialect.V10, get) == wire.TaskQuery("tsk_3", 1)
    cancel = json_format.MessageToDict(pb.CancelTaskRequest(id="tsk_4"))
    assert wire.parse_task_id_params(Dialect.V10, cancel) == "tsk_4"


def test_list_params() -> None:
    request = pb.ListTasksRequest(context_id="ctx_1", status=pb.TaskState.TASK_STATE_WORKING, page_size=10,
                                  page_token=wire.encode_page_token(20), include_artifacts=True)
    listing = wire.parse_list_params(Dialect.V10, json_format.MessageToDict(request))
    assert (listing.context_id, listing.state, listing.page_size, listing.offset, listing.include_artifacts) == (
        "ctx_1", TaskState.WORKING, 10, 20, True)
    default = wire.parse_list_params(Dialect.V10, {})
    assert (default.page_size, default.offset, default.state) == (50, 0, None)
    for bad in ({"pageSize": 0}, {"pageSize": 101}, {"pageToken": "garbage!"}, {"status": "TASK_STATE_AUTH_REQUIRED"},
                {"statusTimestampAfter": "yesterday"}):
        with pytest.raises(JsonRpcError) as caught:
            wire.parse_list_params(Dialect.V10, bad)
        assert caught.value.code == -32602


# --- task rendering ---------------------------------------------------------------------------

def test_upstream_task_is_minimal() -> None:
    done = record(TaskState.COMPLETED)
    assert wire.render_task(Dialect.UPSTREAM, done) == {
        "id": done.id, "contextId": done.context_id, "status": {"state": "completed", "response": "the answer"}}
    waiting = record(TaskState.INPUT_REQUIRED)
    assert wire.render_task(Dialect.UPSTREAM, waiting) == {
        "id": waiting.id, "contextId": waiting.context_id,
        "status": {"state": "input-required", "message": "Which branch?"},
        "artifacts": [{"name": "prompt", "parts": [{"text": "Which branch?"}]}]}
    working = record(TaskState.WORKING, artifacts=[TaskArtifact("prompt", [{"text": "old"}])])
    assert wire.render_task(Dialect.UPSTREAM, working) == {
        "id": working.id, "contextId": working.context_id, "status": {"state": "working"}}


@pytest.mark.parametrize("state", list(TaskState))
def test_v10_task_parses_strictly_with_the_sdk(state: TaskState) -> None:
    rec = record(state)
    task = strict_v10(wire.render_task(Dialect.V10, rec), pb.Task())
    assert task.id == rec.id and task.context_id == rec.context_id
    assert pb.TaskState.Name(task.status.state) == f"TASK_STATE_{state.name}"
    assert task.status.HasField("timestamp")
    assert [m.role for m in task.history] == [pb.Role.ROLE_USER]
    assert task.history[0].parts[1].data.struct_value["k"] == 1
    send = strict_v10(wire.render_send_result(Dialect.V10, rec), pb.SendMessageResponse())
    assert send.HasField("task") and send.task.id == rec.id


def test_v10_answer_prompt_and_error_are_where_sdk_clients_look() -> None:
    done = strict_v10(wire.render_task(Dialect.V10, record(TaskState.COMPLETED)), pb.Task())
    assert get_message_text(done.status.message) == "the answer"
    assert done.status.message.role == pb.Role.ROLE_AGENT
    assert [(a.name, get_artifact_text(a)) for a in done.artifacts] == [("result", "the answer")]
    waiting = strict_v10(wire.render_task(Dialect.V10, record(TaskState.INPUT_REQUIRED)), pb.Task())
    assert get_message_text(waiting.status.message) == "Which branch?"
    assert [(a.name, get_artifact_text(a)) for a in waiting.artifacts] == [("prompt", "Which branch?")]
    failed = strict_v10(wire.render_task(Dialect.V10, record(TaskState.FAILED)), pb.Task())
    assert get_message_text(failed.status.message) == "driver exploded" and not failed.artifacts


def test_history_length_and_include_artifacts() -> None:
    rec = record(history=[TaskMessage(f"m{i}", "user", [{"text": str(i)}]) for i in range(5)])
    assert [m["messageId"] for m in wire.render_task(Dialect.V10, rec, history_length=2)["history"]] == ["m3", "m4"]
    assert "history" not in wire.render_task(Dialect.V10, rec, history_length=0)
    assert len(wire.render_task(Dialect.V03, rec)["history"]) == 5
    assert "history" not in wire.render_task(Dialect.V02, rec)
    assert "artifacts" not in wire.render_task(Dialect.V10, rec, include_artifacts=False)


@pytest.mark.parametrize("state", list(TaskState))
def test_v03_task_validates_with_the_sdk_and_converts(state: TaskState) -> None:
    rec = record(state)
    rendered = wire.render_task(Dialect.V03, rec)
    assert rendered["kind"] == "task" and rendered["status"]["state"] == state.value
    task = types_v03.Task.model_validate(rendered)
    assert task.model_dump(by_alias=True, exclude_none=True, mode="json") == rendered
    core = conversions.to_core_task(task)  # what the compat transport does with it
    assert pb.TaskState.Name(core.status.state) == f"TASK_STATE_{state.name}"


def test_v03_prompt_and_answer() -> None:
    waiting = types_v03.Task.model_validate(wire.render_task(Dialect.V03, record(TaskState.INPUT_REQUIRED)))
    assert waiting.artifacts is not None and waiting.artifacts[0].name == "prompt"
    assert waiting.artifacts[0].parts[0].root == types_v03.TextPart(text="Which branch?")
    done = wire.render_task(Dialect.V03, record(TaskState.COMPLETED))
    assert done["status"]["message"]["kind"] == "message" and done["status"]["message"]["role"] == "agent"
    assert done["status"]["message"]["parts"] == [{"kind": "text", "text": "the answer"}]


def test_non_text_parts_survive_every_dialect() -> None:
    parts: list[dict[str, Any]] = [{"text": "see "}, {"raw": PNG, "mediaType": "image/png", "filename": "a.png"},
             {"kind": "file", "file": {"uri": "https://x.test/b", "name": "b"}}, {"data": [1, 2]},
             {"type": "data", "data": {"k": "v"}}, {"weird": True}]
    rec = record(history=[TaskMessage("m1", "user", parts)])
    v10_parts = strict_v10(wire.render_task(Dialect.V10, rec), pb.Task()).history[0].parts
    assert v10_parts[1].raw == b"\x89PNG fake" and v10_parts[1].media_type == "image/png"
    assert v10_parts[2].url == "https://x.test/b" and v10_parts[2].filename == "b"
    assert list(v10_parts[3].data.list_value) == [1, 2]
    assert v10_parts[4].data.struct_value["k"] == "v"
    assert v10_parts[5].data.struct_value["weird"] is True
    v03 = types_v03.Task.model_validate(wire.render_task(Dialect.V03, rec))
    core_parts = conversions.to_core_task(v03).history[0].parts
    assert [json_format.MessageToDict(p) for p in core_parts] == [json_format.MessageToDict(p) for p in v10_parts]
    v02 = wire.render_task(Dialect.V02, rec, history_length=1)["history"][0]["parts"]
    assert [p["type"] for p in v02] == ["text", "file", "file", "data", "data", "data"]


def test_v02_task_shape() -> None:
    rec = record(TaskState.REJECTED, status_message="busy")
    rendered = wire.render_task(Dialect.V02, rec)
    assert set(rendered) == {"id", "sessionId", "status"}
    assert rendered["sessionId"] == rec.context_id
    assert rendered["status"]["state"] == "failed"  # 0.1 has no rejected
    assert rendered["status"]["message"] == {"role": "agent", "parts": [{"type": "text", "text": "busy"}]}
    done = wire.render_task(Dialect.V02, record(TaskState.COMPLETED))
    assert done["artifacts"] == [{"name": "result", "parts": [{"type": "text", "text": "the answer"}], "index": 0}]


# --- stream events ----------------------------------------------------------------------------

def feed(renderer: StreamRenderer, rec: TaskRecord) -> list[dict[str, Any]]:
    working = TaskRecord.from_json({**rec.to_json(), "state": "working", "result_text": None})
    events = [renderer.render("task", working), renderer.render("status", working),
              renderer.render("thinking", working, {"text": "hmm", "final": False}),
              renderer.render("text", working, {"text": "the ", "final": False}),
              renderer.render("artifact", working, {"tool_name": "grep", "content": "3 matches"}),
              renderer.render("text", working, {"text": "answer", "final": False}),
              renderer.render("text", working, {"text": "", "final": True}),
              renderer.render("status", rec)]
    return [e for e in events if e is not None]


def test_v10_stream_events_parse_and_aggregate_like_the_sdk() -> None:
    rec = record(TaskState.COMPLETED)
    events = [strict_v10(e, pb.StreamResponse()) for e in feed(StreamRenderer(Dialect.V10), rec)]
    assert [e.WhichOneof("payload") for e in events] == [
        "task", "status_update", "artifact_update", "artifact_update", "artifact_update", "status_update"]
    task = pb.Task()
    task.CopyFrom(events[0].task)
    for event in events[2:5]:
        append_artifact_to_task(task, event.artifact_update)
    texts = {a.name: get_artifact_text(a, "") for a in task.artifacts}
    assert texts == {"result": "the answer", "grep": "3 matches"}
    assert events[2].artifact_update.append is False and events[4].artifact_update.append is True
    final = events[-1].status_update
    assert final.status.state == pb.TaskState.TASK_STATE_COMPLETED
    assert get_message_text(final.status.message) == "the answer"
    assert final.task_id == rec.id and final.context_id == rec.context_id


def test_v03_stream_events_validate_with_the_sdk() -> None:
    rec = record(TaskState.COMPLETED)
    events = feed(StreamRenderer(Dialect.V03), rec)
    assert [e["kind"] for e in events] == ["task", "status-update", "artifact-update", "artifact-update",
                                           "artifact-update", "status-update"]
    assert [e.get("final") for e in events if e["kind"] == "status-update"] == [False, True]
    for event in events:
        result = types_v03.SendStreamingMessageSuccessResponse.model_validate({"id": 1, "result": event})
        assert result.result.model_dump(by_alias=True, exclude_none=True, mode="json") == event
        conversions.to_core_stream_response(result)
    chunk = events[2]
    assert chunk["artifact"]["artifactId"] == wire.result_artifact_id(rec.id)
    assert (chunk["append"], chunk["lastChunk"], chunk["taskId"], chunk["contextId"]) == (
        False, False, rec.id, rec.context_id)


def test_v03_input_required_status_is_final() -> None:
    event = wire.render_stream_event(Dialect.V03, "status", record(TaskState.INPUT_REQUIRED))
    assert event is not None and event["final"] is True and event["status"]["state"] == "input-required"
    assert wire.is_final_state(TaskState.INPUT_REQUIRED) and not wire.is_final_state(TaskState.WORKING)


def test_v02_stream_events() -> None:
    events = feed(StreamRenderer(Dialect.V02), record(TaskState.COMPLETED))
    assert [sorted(e) for e in events] == [["final", "id", "status"]] * 2 + [["artifact", "id"]] * 3 + [
        ["final", "id", "status"]]
    assert [e["artifact"]["index"] for e in events if "artifact" in e] == [0, 1, 0]
    assert events[2]["artifact"]["parts"] == [{"type": "text", "text": "the "}]
    assert events[-1]["final"] is True and events[-1]["status"]["state"] == "completed"


def test_stateless_stream_event_and_upstream_refusal() -> None:
    rec = record(TaskState.WORKING)
    event = wire.render_stream_event(Dialect.V10, "text", rec, {"text": "x", "final": True, "append": True})
    assert event is not None and event["artifactUpdate"]["append"] is True and event["artifactUpdate"]["lastChunk"]
    tool = wire.render_stream_event(Dialect.V10, "artifact", rec, {"tool_name": "t", "content": {"a": 1},
                                                                    "artifact_id": "art_1"})
    assert tool is not None and tool["artifactUpdate"]["artifact"] == {"artifactId": "art_1", "name": "t",
                                                                       "parts": [{"data": {"a": 1}}]}
    with pytest.raises(ValueError):
        wire.render_stream_event(Dialect.UPSTREAM, "status", rec)
    with pytest.raises(ValueError):
        wire.render_stream_event(Dialect.V10, "nonsense", rec)


def test_list_rendering_parses_with_the_sdk() -> None:
    records = [record(TaskState.COMPLETED), record(TaskState.WORKING)]
    rendered = wire.render_list(Dialect.V10, records, wire.encode_page_token(2), page_size=2, total_size=5)
    response = strict_v10(rendered, pb.ListTasksResponse())
    assert [t.id for t in response.tasks] == [r.id for r in records]
    assert (response.page_size, response.total_size) == (2, 5)
    assert wire.decode_page_token(response.next_page_token) == 2
    assert all(not t.artifacts for t in response.tasks)
    last = wire.render_list(Dialect.V10, records, None, include_artifacts=True)
    assert last["nextPageToken"] == "" and last["tasks"][0]["artifacts"]
    with pytest.raises(ValueError):
        wire.render_list(Dialect.V03, records)


# --- the agent card ---------------------------------------------------------------------------

def card(tools: list[str] | None = None) -> dict[str, Any]:
    return agent_card("echo", "1.2.0", "Echoes loudly.", URL, ["shout", "grep"] if tools is None else tools,
                      shell=True, network=False)


def test_card_has_the_upstream_fields() -> None:
    data = card()
    assert (data["name"], data["version"], data["url"]) == ("echo", "1.2.0", URL)
    assert data["capabilities"] == {"streaming": True, "pushNotifications": False, "tools": ["shout", "grep"],
                                    "shell": True, "network": False}


def test_card_parses_with_the_1_0_sdk_and_picks_the_1_0_jsonrpc_transport() -> None:
    parsed = parse_agent_card(card())
    assert [(i.url, i.protocol_binding, i.protocol_version) for i in parsed.supported_interfaces] == [
        (URL, "JSONRPC", "1.0"), (URL, "JSONRPC", "0.3")]
    assert parsed.capabilities.streaming
    assert [(s.id, list(s.tags)) for s in parsed.skills] == [("shout", ["tool"]), ("grep", ["tool"])]
    assert list(parsed.default_input_modes) == ["text/plain"] == list(parsed.default_output_modes)
    client = ClientFactory(ClientConfig(httpx_client=httpx.AsyncClient())).create(parsed)
    transport = client._transport  # type: ignore[attr-defined]  # the transport the factory chose
    assert isinstance(transport, JsonRpcTransport) and transport.url == URL


def test_card_validates_as_a_0_3_card() -> None:
    legacy = types_v03.AgentCard.model_validate(card())
    assert (legacy.url, legacy.preferred_transport, legacy.protocol_version) == (URL, "JSONRPC", "0.3.0")
    assert legacy.capabilities.streaming is True
    core = conversions.to_core_agent_card(legacy)
    assert core.supported_interfaces[0].url == URL


def test_card_without_tools_still_has_a_skill() -> None:
    data = card(tools=[])
    assert data["capabilities"]["tools"] == []
    assert [s["id"] for s in data["skills"]] == ["echo"]
    assert parse_agent_card(data).skills[0].description == "Echoes loudly."


# --- end to end with the real SDK clients -----------------------------------------------------

class FakeCapsule:
    """A test-only router over these modules: uppercases the text; "ask" asks for input first."""

    def __init__(self) -> None:
        self.tasks: dict[str, TaskRecord] = {}
        self.dialects: dict[str, Dialect] = {}
        self.methods: list[tuple[str, Dialect]] = []

    def _run(self, send: wire.SendRequest) -> TaskRecord:
        rec = self.tasks.get(send.task_id or "")
        if rec is None:
            if send.task_id and not send.client_task_id:
                raise JsonRpcError.task_not_found(send.task_id)
            rec = TaskRecord(id=send.task_id or new_task_id(), context_id=send.context_id or new_context_id())
            self.tasks[rec.id] = rec
            self.dialects[rec.id] = send.dialect
        rec.history.append(send.message)
        if send.text == "ask":
            rec.state, rec.status_message = TaskState.INPUT_REQUIRED, "Which branch?"
            rec.artifacts = [TaskArtifact("prompt", [{"text": "Which branch?"}])]
        else:
            rec.state, rec.status_message, rec.result_text = TaskState.COMPLETED, None, send.text.upper()
            rec.artifacts = [a for a in rec.artifacts if a.name != "prompt"]
        rec.updated_at += 1
        return rec

    def _task(self, query: wire.TaskQuery) -> TaskRecord:
        rec = self.tasks.get(query.task_id)
        if rec is None:
            raise JsonRpcError.task_not_found(query.task_id)
        return rec

    def _stream(self, dialect: Dialect, request_id: Any, rec: TaskRecord) -> bytes:
        renderer = StreamRenderer(dialect)
        working = TaskRecord.from_json({**rec.to_json(), "state": "working", "result_text": None})
        events = [renderer.render("task", working), renderer.render("status", working)]
        if rec.result_text:
            half = len(rec.result_text) // 2
            events += [renderer.render("text", working, {"text": rec.result_text[:half], "final": False}),
                       renderer.render("text", working, {"text": rec.result_text[half:], "final": True})]
        events.append(renderer.render("status", rec))
        frames = [f"data: {json.dumps(jsonrpc.result_response(request_id, e))}\n\n" for e in events if e]
        return (": ping\n\n" + "".join(frames)).encode()

    async def _handle(self, request: JsonRpcRequest, headers: httpx.Headers) -> dict[str, Any] | bytes:
        task_dialect = None
        if isinstance(request.params, dict) and isinstance(request.params.get("id"), str):
            task_dialect = self.dialects.get(request.params["id"])
        dialect, operation = wire.resolve_dialect(request.method, request.params, headers, task_dialect)
        self.methods.append((request.method, dialect))
        if operation in (Operation.SEND, Operation.STREAM):
            rec = self._run(wire.parse_send_params(dialect, request.params))
            if operation is Operation.STREAM:
                return self._stream(dialect, request.id, rec)
            return jsonrpc.result_response(request.id, wire.render_send_result(dialect, rec))
        if operation is Operation.LIST:
            listing = wire.parse_list_params(dialect, request.params)
            records = [r for r in self.tasks.values() if listing.context_id in (None, r.context_id)]
            return jsonrpc.result_response(request.id, wire.render_list(dialect, records))
        query = wire.parse_task_query(dialect, request.params)
        rec = self._task(query)
        if operation is Operation.CANCEL:
            if rec.state.terminal:
                raise JsonRpcError.task_not_cancelable(rec.id, rec.state.value)
            rec.state = TaskState.CANCELED
        return jsonrpc.result_response(request.id, wire.render_task(dialect, rec, query.history_length))

    async def __call__(self, http: httpx.Request) -> httpx.Response:
        if http.method == "GET" and http.url.path in ("/.well-known/agent-card.json", "/.well-known/agent.json"):
            return httpx.Response(200, json=card())
        assert (http.method, http.url.path) == ("POST", "/")
        stream: list[bytes] = []

        async def handle(request: JsonRpcRequest) -> dict[str, Any]:
            answer = await self._handle(request, http.headers)
            if isinstance(answer, bytes):
                stream.append(answer)
                return {}
            return answer

        response = await jsonrpc.handle_body(await http.aread(), handle)
        if stream:
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=stream[0])
        return httpx.Response(200, json=response)


@pytest.fixture
def capsule() -> FakeCapsule:
    return FakeCapsule()


@pytest.fixture
def http(capsule: FakeCapsule) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.MockTransport(capsule))


def user_message(text: str, task_id: str | None = None) -> pb.SendMessageRequest:
    return pb.SendMessageRequest(message=new_text_message(text, role=pb.Role.ROLE_USER, task_id=task_id))


@pytest.mark.anyio
async def test_sdk_1_0_client_send_get_cancel_list(capsule: FakeCapsule, http: httpx.AsyncClient) -> None:
    client = await create_client(URL, ClientConfig(httpx_client=http, streaming=False))
    responses = [r async for r in client.send_message(user_message("hello"))]
    assert len(responses) == 1 and responses[0].HasField("task")
    task = responses[0].task
    assert task.status.state == pb.TaskState.TASK_STATE_COMPLETED
    assert get_message_text(task.status.message) == "HELLO"
    assert get_artifact_text(task.artifacts[0]) == "HELLO"
    assert capsule.methods == [("SendMessage", Dialect.V10)]

    fetched = await client.get_task(pb.GetTaskRequest(id=task.id))
    assert fetched.id == task.id and fetched.history[0].parts[0].text == "hello"
    with pytest.raises(TaskNotCancelableError):
        await client.cancel_task(pb.CancelTaskRequest(id=task.id))
    with pytest.raises(TaskNotFoundError):
        await client.get_task(pb.GetTaskRequest(id="tsk_missing"))
    listed = await client.list_tasks(pb.ListTasksRequest())
    assert [t.id for t in listed.tasks] == [task.id]
    await client.close()


@pytest.mark.anyio
async def test_sdk_1_0_client_input_required_round_trip(http: httpx.AsyncClient) -> None:
    client = await create_client(URL, ClientConfig(httpx_client=http, streaming=False))
    [first] = [r async for r in client.send_message(user_message("ask"))]
    assert first.task.status.state == pb.TaskState.TASK_STATE_INPUT_REQUIRED
    assert get_message_text(first.task.status.message) == "Which branch?"
    assert [a.name for a in first.task.artifacts] == ["prompt"]
    [reply] = [r async for r in client.send_message(user_message("main", task_id=first.task.id))]
    assert reply.task.id == first.task.id
    assert reply.task.status.state == pb.TaskState.TASK_STATE_COMPLETED
    assert [a.name for a in reply.task.artifacts] == ["result"]
    await client.close()


@pytest.mark.anyio
async def test_sdk_1_0_client_streaming(capsule: FakeCapsule, http: httpx.AsyncClient) -> None:
    client = await create_client(URL, ClientConfig(httpx_client=http, streaming=True))
    events = [e async for e in client.send_message(user_message("stream me"))]
    assert capsule.methods == [("SendStreamingMessage", Dialect.V10)]
    assert [e.WhichOneof("payload") for e in events] == [
        "task", "status_update", "artifact_update", "artifact_update", "status_update"]
    task = events[0].task
    for event in events:
        if event.HasField("artifact_update"):
            append_artifact_to_task(task, event.artifact_update)
    assert get_artifact_text(task.artifacts[0], "") == "STREAM ME"
    assert events[-1].status_update.status.state == pb.TaskState.TASK_STATE_COMPLETED
    await client.close()


@pytest.mark.anyio
async def test_sdk_0_3_compat_transport(capsule: FakeCapsule, http: httpx.AsyncClient) -> None:
    transport = CompatJsonRpcTransport(http, parse_agent_card(card()), URL)
    sent = await transport.send_message(user_message("compat"))
    assert sent.HasField("task") and sent.task.status.state == pb.TaskState.TASK_STATE_COMPLETED
    assert get_message_text(sent.task.status.message) == "COMPAT"
    fetched = await transport.get_task(pb.GetTaskRequest(id=sent.task.id))
    assert fetched.id == sent.task.id
    with pytest.raises(TaskNotCancelableError):
        await transport.cancel_task(pb.CancelTaskRequest(id=sent.task.id))
    events = [e async for e in transport.send_message_streaming(user_message("compat stream"))]
    assert [e.WhichOneof("payload") for e in events] == [
        "task", "status_update", "artifact_update", "artifact_update", "status_update"]
    assert events[-1].status_update.status.state == pb.TaskState.TASK_STATE_COMPLETED
    assert {d for _, d in capsule.methods} == {Dialect.V03}
    assert [m for m, _ in capsule.methods] == ["message/send", "tasks/get", "tasks/cancel", "message/stream"]
