"""The A2A 1.0 dialect (what a2a-sdk >= 1.0 speaks): ProtoJSON of the `a2a.v1` messages.

Methods `SendMessage`, `SendStreamingMessage`, `GetTask`, `CancelTask`, `SubscribeToTask`,
`ListTasks`. Request params are the request messages (`SendMessageRequest` `{"message":
{"messageId", "role": "ROLE_USER", "parts": [{"text"}, {"raw"|"url"|"data", "mediaType"?,
"filename"?}], "contextId"?, "taskId"?}, "configuration"?: {"returnImmediately"?,
"historyLength"?, "acceptedOutputModes"?}}`, `GetTaskRequest` `{"id", "historyLength"?}`, ...).
camelCase and snake_case member names are both accepted, as ProtoJSON parsers do.

Results: `SendMessage` -> `{"task": Task}`; `GetTask` / `CancelTask` -> `Task` `{"id",
"contextId", "status": {"state": "TASK_STATE_COMPLETED", "message"?, "timestamp"}, "artifacts"?,
"history"?}`; stream events -> `StreamResponse` `{"task"}` / `{"statusUpdate": {"taskId",
"contextId", "status"}}` / `{"artifactUpdate": {"taskId", "contextId", "artifact", "append",
"lastChunk"}}` (1.0 has no `final`: the stream ends when the server closes it); `ListTasks` ->
`{"tasks", "nextPageToken", "pageSize", "totalSize"}`.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Literal, get_args

from pydantic import Field, StrictBool, StrictInt, StrictStr, field_validator, model_validator

from murmurd.a2a.wire.jsonrpc import JsonRpcError
from murmurd.a2a.core.tasks import TaskMessage, TaskRecord, TaskState
from murmurd.a2a.wire import parts as wire_parts
from murmurd.a2a.wire.common import (
    RESULT_ARTIFACT,
    ArtifactView,
    ListRequest,
    SendRequest,
    TaskQuery,
    TaskView,
    WireModel,
    check_id,
    parse_rfc3339_ms,
    require_id,
    result_artifact_id,
    rfc3339,
    task_view,
    tool_content_part,
    validate_params,
)
from murmurd.a2a.wire.dialects import Dialect

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 100

StateName = Literal["TASK_STATE_UNSPECIFIED", "TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED",
                    "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_INPUT_REQUIRED",
                    "TASK_STATE_REJECTED", "TASK_STATE_AUTH_REQUIRED"]
_STATE_NUMBERS: tuple[StateName, ...] = get_args(StateName)  # proto enum order: number == index
RoleName = Literal["ROLE_UNSPECIFIED", "ROLE_USER", "ROLE_AGENT"]
_ROLE_NUMBERS: tuple[RoleName, ...] = get_args(RoleName)


def state_name(state: TaskState) -> StateName:
    return f"TASK_STATE_{state.name}"  # type: ignore[return-value]


def domain_state(name: StateName) -> TaskState | None:
    """None for UNSPECIFIED and for AUTH_REQUIRED, which murmur never enters."""
    key = name.removeprefix("TASK_STATE_")
    return TaskState[key] if key in TaskState.__members__ else None


class Part(WireModel):
    text: StrictStr | None = None
    raw: StrictStr | None = None
    url: StrictStr | None = None
    data: Any = None
    metadata: dict[str, Any] | None = None
    filename: StrictStr | None = None
    media_type: StrictStr | None = None

    @model_validator(mode="after")
    def _one_content(self) -> Part:
        present = [name for name in ("text", "raw", "url") if getattr(self, name) is not None]
        if "data" in self.model_fields_set:
            present.append("data")
        if len(present) != 1:
            raise ValueError("a part needs exactly one of text, raw, url, data"
                             + (f" (got {', '.join(present)})" if present else ""))
        return self


class Message(WireModel):
    message_id: StrictStr | None = None
    context_id: StrictStr | None = None
    task_id: StrictStr | None = None
    role: RoleName | StrictInt | None = None
    parts: list[Part] = Field(min_length=1)
    metadata: dict[str, Any] | None = None
    extensions: list[StrictStr] | None = None
    reference_task_ids: list[StrictStr] | None = None

    @field_validator("role")
    @classmethod
    def _role_by_number(cls, role: RoleName | int | None) -> RoleName | None:
        if isinstance(role, int):
            if not 0 <= role < len(_ROLE_NUMBERS):
                raise ValueError(f"unknown role number {role}")
            return _ROLE_NUMBERS[role]
        return role


class Configuration(WireModel):
    accepted_output_modes: list[StrictStr] | None = None
    task_push_notification_config: dict[str, Any] | None = None
    history_length: StrictInt | None = Field(default=None, ge=0)
    return_immediately: StrictBool | None = None


class SendParams(WireModel):
    tenant: StrictStr | None = None
    message: Message
    configuration: Configuration | None = None
    metadata: dict[str, Any] | None = None


class IdParams(WireModel):
    tenant: StrictStr | None = None
    id: StrictStr | None = None
    name: StrictStr | None = None  # pre-1.0 drafts addressed tasks as "tasks/<id>"
    history_length: StrictInt | None = Field(default=None, ge=0)
    metadata: dict[str, Any] | None = None


class ListParams(WireModel):
    tenant: StrictStr | None = None
    context_id: StrictStr | None = None
    status: StateName | StrictInt | None = None
    page_size: StrictInt | None = Field(default=None, ge=1, le=MAX_PAGE_SIZE)
    page_token: StrictStr | None = None
    history_length: StrictInt | None = Field(default=None, ge=0)
    status_timestamp_after: StrictStr | None = None
    include_artifacts: StrictBool | None = None

    @field_validator("status", mode="before")
    @classmethod
    def _unspecified_is_no_filter(cls, status: Any) -> Any:
        """The enum's unset values mean "no filter": `TASK_STATE_UNSPECIFIED` (0), and
        ts-proto's `UNRECOGNIZED` (-1), which @a2a-js/sdk's `listTasks()` sends by default."""
        if status in ("TASK_STATE_UNSPECIFIED", "UNRECOGNIZED", "") or (
                isinstance(status, int) and not isinstance(status, bool) and status in (0, -1)):
            return None
        return status

    @field_validator("status")
    @classmethod
    def _status_by_number(cls, status: StateName | int | None) -> StateName | None:
        if isinstance(status, int):
            if not 0 <= status < len(_STATE_NUMBERS):
                raise ValueError(f"unknown task state number {status}")
            return _STATE_NUMBERS[status]
        return status


class Status(WireModel):
    state: StateName
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
    id: StrictStr
    context_id: StrictStr
    status: Status
    artifacts: list[Artifact] | None = None
    history: list[Message] | None = None
    metadata: dict[str, Any] | None = None


class StatusUpdateEvent(WireModel):
    task_id: StrictStr
    context_id: StrictStr
    status: Status
    metadata: dict[str, Any] | None = None


class ArtifactUpdateEvent(WireModel):
    task_id: StrictStr
    context_id: StrictStr
    artifact: Artifact
    append: StrictBool | None = None
    last_chunk: StrictBool | None = None
    metadata: dict[str, Any] | None = None


class SendMessageResponse(WireModel):
    task: Task | None = None
    message: Message | None = None

    @model_validator(mode="after")
    def _one_payload(self) -> SendMessageResponse:
        if (self.task is None) == (self.message is None):
            raise ValueError("exactly one of task, message")
        return self


class StreamResponse(WireModel):
    task: Task | None = None
    message: Message | None = None
    status_update: StatusUpdateEvent | None = None
    artifact_update: ArtifactUpdateEvent | None = None

    @model_validator(mode="after")
    def _one_payload(self) -> StreamResponse:
        if sum(x is not None for x in (self.task, self.message, self.status_update, self.artifact_update)) != 1:
            raise ValueError("exactly one of task, message, statusUpdate, artifactUpdate")
        return self


class ListTasksResponse(WireModel):
    tasks: list[Task]
    next_page_token: StrictStr
    page_size: StrictInt
    total_size: StrictInt


# --- requests ---------------------------------------------------------------------------------

def _role(role: RoleName | int | None) -> str:
    return "agent" if role == "ROLE_AGENT" else "user"


def parse_send(params: Any) -> SendRequest:
    """The raw `params["message"]["parts"]` are kept verbatim, not the validated models."""
    p = validate_params(SendParams, params)
    m = p.message
    context_id = check_id(m.context_id, "message.contextId")
    task_id = check_id(m.task_id, "message.taskId")
    raw_parts = [dict(part) for part in params["message"]["parts"]]
    message = TaskMessage(
        message_id=require_id(m.message_id, "message.messageId"), role=_role(m.role),  # required in 1.0
        parts=raw_parts, context_id=context_id, task_id=task_id, metadata=m.metadata,
    )
    configuration = p.configuration or Configuration()
    return SendRequest(
        dialect=Dialect.V10, message=message, task_id=task_id, context_id=context_id,
        blocking=not configuration.return_immediately, history_length=configuration.history_length,
        accepted_output_modes=configuration.accepted_output_modes, metadata=p.metadata,
    )


def parse_task_query(params: Any) -> TaskQuery:
    p = validate_params(IdParams, params)
    task_id = p.id
    if not task_id and p.name:
        task_id = p.name.removeprefix("tasks/")
    return TaskQuery(require_id(task_id, "id"), p.history_length, p.metadata)


def encode_page_token(offset: int) -> str:
    """An opaque page token for ListTasks (the store pages by offset)."""
    return base64.urlsafe_b64encode(f"offset:{offset}".encode()).decode().rstrip("=")


MAX_PAGE_OFFSET = 2**62
"""No store holds this many tasks; above it an offset (plus a page) would overflow SQLite's int64."""


def decode_page_token(token: str) -> int:
    """The offset a token this server issued encodes; -32602 for anything else."""
    refused = JsonRpcError.invalid_params("pageToken: not a token this server issued")
    try:
        text = base64.urlsafe_b64decode(token.encode("ascii") + b"=" * (-len(token) % 4)).decode("ascii")
    except (binascii.Error, UnicodeError, ValueError):
        raise refused from None
    prefix, _, number = text.partition(":")
    if prefix != "offset" or not number.isascii() or not number.isdigit() or len(number) > 19:
        raise refused
    offset = int(number)
    if offset > MAX_PAGE_OFFSET:
        raise refused
    return offset


def parse_list(params: Any) -> ListRequest:
    p = validate_params(ListParams, params)
    state = None
    if p.status not in (None, "TASK_STATE_UNSPECIFIED"):
        state = domain_state(p.status)  # type: ignore[arg-type]
        if state is None:
            raise JsonRpcError.invalid_params(f"status: murmur tasks are never {p.status}")
    after = parse_rfc3339_ms(p.status_timestamp_after, "statusTimestampAfter") if p.status_timestamp_after else None
    token = p.page_token or None
    return ListRequest(
        context_id=check_id(p.context_id, "contextId"), state=state, page_size=p.page_size or DEFAULT_PAGE_SIZE,
        page_token=token, offset=decode_page_token(token) if token else 0, history_length=p.history_length,
        status_timestamp_after_ms=after, include_artifacts=bool(p.include_artifacts),
    )


# --- results ----------------------------------------------------------------------------------

def _message(view: TaskView, message_id: str, role: str, parts: list[dict[str, Any]],
             metadata: dict[str, Any] | None = None) -> Message:
    return Message.model_validate({
        "messageId": message_id, "role": "ROLE_AGENT" if role == "agent" else "ROLE_USER",
        "parts": [wire_parts.to_v10(p) for p in parts], "taskId": view.id, "contextId": view.context_id,
        "metadata": metadata,
    })


def _status(view: TaskView) -> Status:
    message = None
    if view.status_text is not None:
        message = _message(view, view.status_message_id, "agent", [wire_parts.text_part(view.status_text)])
    return Status(state=state_name(view.state), message=message, timestamp=rfc3339(view.timestamp_ms))


def _artifact(artifact: ArtifactView) -> Artifact:
    return Artifact.model_validate({"artifactId": artifact.artifact_id, "name": artifact.name,
                                    "parts": [wire_parts.to_v10(p) for p in artifact.parts]})


def task_model(record: TaskRecord, history_length: int | None = None, include_artifacts: bool = True) -> Task:
    view = task_view(record, with_result=True, history_length=history_length, include_artifacts=include_artifacts)
    history = [_message(view, m.message_id, m.role, m.parts, m.metadata) for m in view.history]
    return Task(id=view.id, context_id=view.context_id, status=_status(view),
                artifacts=[_artifact(a) for a in view.artifacts] or None, history=history or None,
                metadata={"murmurd": provenance(record)})


def provenance(record: TaskRecord) -> dict[str, Any]:
    """When a task was created and by whom (what a supervisor weighs before answering it):
    under the task's `metadata.murmurd`, shown only to a caller who may read the task."""
    return {"createdAt": rfc3339(record.created_at), "origin": record.origin, "principal": record.principal}


def render_task(record: TaskRecord, history_length: int | None = None,
                include_artifacts: bool = True) -> dict[str, Any]:
    return task_model(record, history_length, include_artifacts).dump()


def render_send_result(record: TaskRecord, history_length: int | None = None) -> dict[str, Any]:
    return SendMessageResponse(task=task_model(record, history_length)).dump()


def render_task_event(record: TaskRecord, history_length: int | None = None) -> dict[str, Any]:
    return StreamResponse(task=task_model(record, history_length)).dump()


def render_status_event(record: TaskRecord) -> dict[str, Any]:
    view = task_view(record, with_result=False, history_length=0, include_artifacts=False)
    event = StatusUpdateEvent(task_id=view.id, context_id=view.context_id, status=_status(view))
    return StreamResponse(status_update=event).dump()


def render_text_chunk(record: TaskRecord, text: str, *, append: bool, last_chunk: bool,
                      index: int = 0, name: str = RESULT_ARTIFACT) -> dict[str, Any]:
    """A chunk of the `result` artifact (or of another artifact streamed in chunks: `name`)."""
    del index
    artifact_id = result_artifact_id(record.id) if name == RESULT_ARTIFACT else f"{record.id}-{name}"
    artifact = ArtifactView(artifact_id, name, [wire_parts.text_part(text)])
    event = ArtifactUpdateEvent(task_id=record.id, context_id=record.context_id, artifact=_artifact(artifact),
                                append=append, last_chunk=last_chunk)
    return StreamResponse(artifact_update=event).dump()


def render_tool_artifact(record: TaskRecord, tool_name: str, content: Any, *, artifact_id: str,
                         index: int = 0) -> dict[str, Any]:
    del index
    artifact = ArtifactView(artifact_id, tool_name, [tool_content_part(content)])
    event = ArtifactUpdateEvent(task_id=record.id, context_id=record.context_id, artifact=_artifact(artifact),
                                append=False, last_chunk=True)
    return StreamResponse(artifact_update=event).dump()


def render_list(records: list[TaskRecord], next_page_token: str | None, *, page_size: int | None = None,
                total_size: int | None = None, history_length: int | None = None,
                include_artifacts: bool = False) -> dict[str, Any]:
    tasks = [task_model(r, history_length, include_artifacts) for r in records]
    return ListTasksResponse(
        tasks=tasks, next_page_token=next_page_token or "",
        page_size=page_size if page_size is not None else len(tasks),
        total_size=total_size if total_size is not None else len(tasks),
    ).dump()
