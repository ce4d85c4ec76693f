"""The A2A 0.3 dialect: kind-tagged objects, as a2a-sdk's v0.3 compatibility transport (and
other 0.3 clients) send and expect them, on the upstream method names.

Request: `message/send` params `{"message": {"kind": "message", "messageId", "role",
"parts": [{"kind": "text", "text"}, ...], "contextId"?, "taskId"?, "metadata"?},
"configuration"?: {"blocking"?, "historyLength"?, "acceptedOutputModes"?}, "metadata"?}`;
get `{"id", "historyLength"?}`, cancel/resubscribe `{"id"}`.

Results: `Task` `{"kind": "task", "id", "contextId", "status": {"state", "message"?, "timestamp"},
"artifacts"?, "history"?}`; stream events `{"kind": "status-update", "taskId", "contextId",
"status", "final"}` and `{"kind": "artifact-update", "taskId", "contextId", "artifact", "append",
"lastChunk"}`. `final` is true for terminal and input-required states. The answer of a completed
task is its status message (role agent) and its `result` artifact.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, StrictBool, StrictInt, StrictStr, Tag

from murmurd.a2a.core.tasks import TaskMessage, TaskRecord
from murmurd.a2a.wire import parts as wire_parts
from murmurd.a2a.wire.common import (
    FileContent,
    RESULT_ARTIFACT,
    ArtifactView,
    SendRequest,
    TaskQuery,
    TaskView,
    WireModel,
    check_id,
    is_final_state,
    part_discriminator,
    require_id,
    result_artifact_id,
    rfc3339,
    task_view,
    tool_content_part,
    validate_params,
)
from murmurd.a2a.wire.dialects import Dialect

State = Literal["submitted", "working", "input-required", "completed", "canceled", "failed", "rejected",
                "auth-required", "unknown"]


class TextPart(WireModel):
    kind: Literal["text"] = "text"
    text: StrictStr
    metadata: dict[str, Any] | None = None


class FilePart(WireModel):
    kind: Literal["file"] = "file"
    file: FileContent
    metadata: dict[str, Any] | None = None


class DataPart(WireModel):
    kind: Literal["data"] = "data"
    data: dict[str, Any]
    metadata: dict[str, Any] | None = None


Part = Annotated[
    Annotated[TextPart, Tag("text")] | Annotated[FilePart, Tag("file")] | Annotated[DataPart, Tag("data")],
    Discriminator(part_discriminator("kind")),
]


class Message(WireModel):
    kind: Literal["message"] = "message"
    message_id: StrictStr
    role: Literal["user", "agent"]
    parts: list[Part] = Field(min_length=1)
    context_id: StrictStr | None = None
    task_id: StrictStr | None = None
    reference_task_ids: list[StrictStr] | None = None
    extensions: list[StrictStr] | None = None
    metadata: dict[str, Any] | None = None


class Configuration(WireModel):
    accepted_output_modes: list[StrictStr] | None = None
    blocking: StrictBool | None = None
    history_length: StrictInt | None = Field(default=None, ge=0)
    push_notification_config: dict[str, Any] | None = None


class SendParams(WireModel):
    message: Message
    configuration: Configuration | None = None
    metadata: dict[str, Any] | None = None


class IdParams(WireModel):
    id: StrictStr
    history_length: StrictInt | None = Field(default=None, ge=0)
    metadata: dict[str, Any] | None = None


class Status(WireModel):
    state: State
    message: Message | None = None
    timestamp: StrictStr | None = None


class Artifact(WireModel):
    artifact_id: StrictStr
    name: StrictStr | None = None
    description: StrictStr | None = None
    parts: list[Part]
    metadata: dict[str, Any] | None = None
    extensions: list[StrictStr] | None = None


class Task(WireModel):
    kind: Literal["task"] = "task"
    id: StrictStr
    context_id: StrictStr
    status: Status
    artifacts: list[Artifact] | None = None
    history: list[Message] | None = None
    metadata: dict[str, Any] | None = None


class StatusUpdateEvent(WireModel):
    kind: Literal["status-update"] = "status-update"
    task_id: StrictStr
    context_id: StrictStr
    status: Status
    final: StrictBool
    metadata: dict[str, Any] | None = None


class ArtifactUpdateEvent(WireModel):
    kind: Literal["artifact-update"] = "artifact-update"
    task_id: StrictStr
    context_id: StrictStr
    artifact: Artifact
    append: StrictBool | None = None
    last_chunk: StrictBool | None = None
    metadata: dict[str, Any] | None = None


def parse_send(params: Any) -> SendRequest:
    """The raw `params["message"]["parts"]` are kept verbatim, not the validated models."""
    p = validate_params(SendParams, params)
    m = p.message
    context_id = check_id(m.context_id, "message.contextId")
    task_id = check_id(m.task_id, "message.taskId")
    message_id = require_id(m.message_id, "message.messageId")
    raw_parts = [dict(part) for part in params["message"]["parts"]]
    message = TaskMessage(message_id=message_id, role=m.role, parts=raw_parts, context_id=context_id,
                          task_id=task_id, metadata=m.metadata)
    configuration = p.configuration or Configuration()
    return SendRequest(
        dialect=Dialect.V03, message=message, task_id=task_id, context_id=context_id,
        blocking=configuration.blocking is not False, history_length=configuration.history_length,
        accepted_output_modes=configuration.accepted_output_modes, metadata=p.metadata,
    )


def parse_task_query(params: Any) -> TaskQuery:
    p = validate_params(IdParams, params)
    return TaskQuery(require_id(p.id, "id"), p.history_length, p.metadata)


def _message(view_id: str, context_id: str, message_id: str, role: str, parts: list[dict[str, Any]],
             metadata: dict[str, Any] | None = None) -> Message:
    return Message.model_validate({
        "messageId": message_id, "role": role, "parts": [wire_parts.to_v03(p) for p in parts],
        "taskId": view_id, "contextId": context_id, "metadata": metadata,
    })


def _status(view: TaskView) -> Status:
    message = None
    if view.status_text is not None:
        message = _message(view.id, view.context_id, view.status_message_id, "agent",
                           [wire_parts.text_part(view.status_text)])
    return Status(state=view.state.value, message=message, timestamp=rfc3339(view.timestamp_ms))


def _artifact(artifact: ArtifactView) -> Artifact:
    return Artifact.model_validate({"artifactId": artifact.artifact_id, "name": artifact.name,
                                    "parts": [wire_parts.to_v03(p) for p in artifact.parts]})


def task_model(record: TaskRecord, history_length: int | None = None, include_artifacts: bool = True) -> Task:
    view = task_view(record, with_result=True, history_length=history_length, include_artifacts=include_artifacts)
    history = [_message(view.id, view.context_id, m.message_id, m.role, m.parts, m.metadata) for m in view.history]
    return Task(id=view.id, context_id=view.context_id, status=_status(view),
                artifacts=[_artifact(a) for a in view.artifacts] or None, history=history or None)


def render_task(record: TaskRecord, history_length: int | None = None,
                include_artifacts: bool = True) -> dict[str, Any]:
    return task_model(record, history_length, include_artifacts).dump()


def render_status_event(record: TaskRecord) -> dict[str, Any]:
    view = task_view(record, with_result=False, history_length=0, include_artifacts=False)
    return StatusUpdateEvent(task_id=view.id, context_id=view.context_id, status=_status(view),
                             final=is_final_state(view.state)).dump()


def render_text_chunk(record: TaskRecord, text: str, *, append: bool, last_chunk: bool,
                      index: int = 0, name: str = RESULT_ARTIFACT) -> dict[str, Any]:
    """A chunk of the `result` artifact (or of another artifact streamed in chunks: `name`)."""
    del index
    artifact_id = result_artifact_id(record.id) if name == RESULT_ARTIFACT else f"{record.id}-{name}"
    artifact = ArtifactView(artifact_id, name, [wire_parts.text_part(text)])
    return ArtifactUpdateEvent(task_id=record.id, context_id=record.context_id, artifact=_artifact(artifact),
                               append=append, last_chunk=last_chunk).dump()


def render_tool_artifact(record: TaskRecord, tool_name: str, content: Any, *, artifact_id: str,
                         index: int = 0) -> dict[str, Any]:
    del index
    artifact = ArtifactView(artifact_id, tool_name, [tool_content_part(content)])
    return ArtifactUpdateEvent(task_id=record.id, context_id=record.context_id, artifact=_artifact(artifact),
                               append=False, last_chunk=True).dump()
