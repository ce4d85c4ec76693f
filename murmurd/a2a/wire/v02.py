"""The A2A 0.1/0.2 dialect: `tasks/send` and `tasks/sendSubscribe` (plus the shared
`tasks/get` / `tasks/cancel` / `tasks/resubscribe` for tasks it created).

Request: `{"id", "sessionId"?, "message": {"role", "parts": [{"type": "text", "text"}, ...],
"metadata"?}, "historyLength"?, "acceptedOutputModes"?, "metadata"?}`. `id` is the client's
task id: it names the task to continue, or the task to create when it does not exist.

Task: `{"id", "sessionId", "status": {"state", "message"?: {"role", "parts"}, "timestamp"},
"artifacts"?: [{"name", "parts", "index"}], "history"?}`. Streams carry
`{"id", "status", "final"}` and `{"id", "artifact"}`. A2A 0.1 has no `rejected` state, so a
rejected task shows as `failed` (its status message says why).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, StrictBool, StrictInt, StrictStr, Tag

from murmurd.a2a.core.tasks import TaskMessage, TaskRecord, TaskState
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
    new_message_id,
    part_discriminator,
    require_id,
    rfc3339,
    task_view,
    tool_content_part,
    validate_params,
)
from murmurd.a2a.wire.dialects import Dialect

State = Literal["submitted", "working", "input-required", "completed", "canceled", "failed", "unknown"]


class TextPart(WireModel):
    type: Literal["text"] = "text"
    text: StrictStr
    metadata: dict[str, Any] | None = None


class FilePart(WireModel):
    type: Literal["file"] = "file"
    file: FileContent
    metadata: dict[str, Any] | None = None


class DataPart(WireModel):
    type: Literal["data"] = "data"
    data: dict[str, Any]
    metadata: dict[str, Any] | None = None


Part = Annotated[
    Annotated[TextPart, Tag("text")] | Annotated[FilePart, Tag("file")] | Annotated[DataPart, Tag("data")],
    Discriminator(part_discriminator("type")),
]


class Message(WireModel):
    role: Literal["user", "agent"] = "user"
    parts: list[Part] = Field(min_length=1)
    metadata: dict[str, Any] | None = None


class SendParams(WireModel):
    id: StrictStr
    session_id: StrictStr | None = None
    message: Message
    accepted_output_modes: list[StrictStr] | None = None
    history_length: StrictInt | None = Field(default=None, ge=0)
    metadata: dict[str, Any] | None = None


class IdParams(WireModel):
    id: StrictStr
    history_length: StrictInt | None = Field(default=None, ge=0)
    metadata: dict[str, Any] | None = None


class Status(WireModel):
    state: State
    message: Message | None = None
    timestamp: StrictStr


class Artifact(WireModel):
    name: StrictStr | None = None
    description: StrictStr | None = None
    parts: list[Part]
    index: StrictInt
    append: StrictBool | None = None
    last_chunk: StrictBool | None = None
    metadata: dict[str, Any] | None = None


class Task(WireModel):
    id: StrictStr
    session_id: StrictStr
    status: Status
    artifacts: list[Artifact] | None = None
    history: list[Message] | None = None
    metadata: dict[str, Any] | None = None


class StatusUpdateEvent(WireModel):
    id: StrictStr
    status: Status
    final: StrictBool
    metadata: dict[str, Any] | None = None


class ArtifactUpdateEvent(WireModel):
    id: StrictStr
    artifact: Artifact
    metadata: dict[str, Any] | None = None


def parse_send(params: Any) -> SendRequest:
    """The raw `params["message"]["parts"]` are kept verbatim, not the validated models."""
    p = validate_params(SendParams, params)
    task_id = require_id(p.id, "id")
    context_id = check_id(p.session_id, "sessionId")
    raw_parts = [dict(part) for part in params["message"]["parts"]]
    message = TaskMessage(message_id=new_message_id(), role=p.message.role, parts=raw_parts,
                          context_id=context_id, task_id=task_id, metadata=p.message.metadata)
    return SendRequest(
        dialect=Dialect.V02, message=message, task_id=task_id, context_id=context_id, blocking=True,
        history_length=p.history_length, accepted_output_modes=p.accepted_output_modes, metadata=p.metadata,
        client_task_id=True,
    )


def parse_task_query(params: Any) -> TaskQuery:
    p = validate_params(IdParams, params)
    return TaskQuery(require_id(p.id, "id"), p.history_length, p.metadata)


def _state(state: TaskState) -> State:
    return "failed" if state is TaskState.REJECTED else state.value


def _message(role: str, parts: list[dict[str, Any]], metadata: dict[str, Any] | None = None) -> Message:
    return Message.model_validate({"role": role, "parts": [wire_parts.to_v02(p) for p in parts],
                                   "metadata": metadata})


def _status(view: TaskView) -> Status:
    message = _message("agent", [wire_parts.text_part(view.status_text)]) if view.status_text is not None else None
    return Status(state=_state(view.state), message=message, timestamp=rfc3339(view.timestamp_ms))


def _artifact(artifact: ArtifactView, index: int, **chunk: bool | None) -> Artifact:
    return Artifact.model_validate({"name": artifact.name, "parts": [wire_parts.to_v02(p) for p in artifact.parts],
                                    "index": index, **chunk})


def render_task(record: TaskRecord, history_length: int | None = None,
                include_artifacts: bool = True) -> dict[str, Any]:
    """History only when asked for (`historyLength` > 0), as A2A 0.1 does."""
    view = task_view(record, with_result=True, history_length=history_length or 0,
                     include_artifacts=include_artifacts)
    artifacts = [_artifact(a, i) for i, a in enumerate(view.artifacts)]
    history = [_message(m.role, m.parts, m.metadata) for m in view.history]
    return Task(id=view.id, session_id=view.context_id, status=_status(view), artifacts=artifacts or None,
                history=history or None).dump()


def render_status_event(record: TaskRecord) -> dict[str, Any]:
    view = task_view(record, with_result=False, history_length=0, include_artifacts=False)
    return StatusUpdateEvent(id=view.id, status=_status(view), final=is_final_state(view.state)).dump()


def render_text_chunk(record: TaskRecord, text: str, *, append: bool, last_chunk: bool, index: int,
                      name: str = RESULT_ARTIFACT) -> dict[str, Any]:
    artifact = ArtifactView("", name, [wire_parts.text_part(text)])
    return ArtifactUpdateEvent(id=record.id, artifact=_artifact(artifact, index, append=append,
                                                                 last_chunk=last_chunk)).dump()


def render_tool_artifact(record: TaskRecord, tool_name: str, content: Any, *, index: int,
                         artifact_id: str = "") -> dict[str, Any]:
    del artifact_id  # 0.1 artifacts are addressed by index
    artifact = ArtifactView("", tool_name, [tool_content_part(content)])
    return ArtifactUpdateEvent(id=record.id, artifact=_artifact(artifact, index)).dump()
