"""The upstream murmur dialect (runtime-notes §6): A2A 0.3 method names, minimal task JSON.

Request: `message/send` params `{"message": {"messageId", "contextId"?, "taskId"?, "role",
"parts": [{"text": ...}]}, "configuration"?: {"blocking"?, "historyLength"?}, "metadata"?}`;
get/cancel/resubscribe params `{"id"}`. Parts are any objects (a text part is one with a string
`text`). A missing `messageId` is generated and a missing `role` means `user`.

Task: `{"id", "contextId", "status": {"state", "message"?, "response"?}, "artifacts"?}`, where
`status.message` is the status text (the prompt while input-required, an error, a cancel reason)
and `status.response` the answer once completed (the same status object as the upstream SSE
`status` frame), and `artifacts` are `{"name", "parts"}` (the prompt artifact is
`{"name": "prompt", "parts": [{"text": <prompt>}]}` while the task waits for input). Upstream
answers `message/send` at once (not blocking) unless `configuration.blocking` is true.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, StrictBool, StrictStr, field_validator

from murmurd.a2a.core.tasks import TaskMessage, TaskRecord, TaskState
from murmurd.a2a.wire import parts as wire_parts
from murmurd.a2a.wire.common import (
    SendRequest,
    TaskQuery,
    WireModel,
    check_id,
    new_message_id,
    require_id,
    task_view,
    validate_params,
)
from murmurd.a2a.wire.dialects import Dialect


class Message(WireModel):
    message_id: StrictStr | None = None
    context_id: StrictStr | None = None
    task_id: StrictStr | None = None
    role: Literal["user", "agent"] | None = None
    parts: list[dict[str, Any]] = Field(min_length=1)
    metadata: dict[str, Any] | None = None

    @field_validator("parts")
    @classmethod
    def _text_is_string(cls, parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for index, part in enumerate(parts):
            if "text" in part and not isinstance(part["text"], str):
                raise ValueError(f"parts[{index}].text must be a string")
        return parts


class Configuration(WireModel):
    blocking: StrictBool | None = None
    history_length: int | None = Field(default=None, ge=0)


class SendParams(WireModel):
    message: Message
    configuration: Configuration | None = None
    metadata: dict[str, Any] | None = None


class IdParams(WireModel):
    id: StrictStr
    history_length: int | None = Field(default=None, ge=0)
    metadata: dict[str, Any] | None = None


class Status(WireModel):
    state: StrictStr
    message: StrictStr | None = None
    response: StrictStr | None = None


class Artifact(WireModel):
    name: StrictStr
    parts: list[dict[str, Any]]


class Task(WireModel):
    id: StrictStr
    context_id: StrictStr
    status: Status
    artifacts: list[Artifact] | None = None


def parse_send(params: Any) -> SendRequest:
    p = validate_params(SendParams, params)
    m = p.message
    context_id = check_id(m.context_id, "message.contextId")
    task_id = check_id(m.task_id, "message.taskId")
    message = TaskMessage(
        message_id=check_id(m.message_id, "message.messageId") or new_message_id(), role=m.role or "user",
        parts=list(m.parts), context_id=context_id, task_id=task_id, metadata=m.metadata,
    )
    configuration = p.configuration or Configuration()
    return SendRequest(
        dialect=Dialect.UPSTREAM, message=message, task_id=task_id, context_id=context_id,
        blocking=bool(configuration.blocking), history_length=configuration.history_length,
        metadata=p.metadata,
    )


def parse_task_query(params: Any) -> TaskQuery:
    p = validate_params(IdParams, params)
    return TaskQuery(require_id(p.id, "id"), p.history_length, p.metadata)


def render_task(record: TaskRecord, history_length: int | None = None,
                include_artifacts: bool = True) -> dict[str, Any]:
    del history_length  # upstream task JSON carries no history
    view = task_view(record, with_result=False, history_length=0, include_artifacts=include_artifacts)
    waiting = view.state is TaskState.INPUT_REQUIRED
    status = Status(state=view.state.value, message=view.status_text if waiting else record.status_message,
                    response=view.result_text)
    artifacts = [Artifact(name=a.name, parts=[wire_parts.to_upstream(p) for p in a.parts]) for a in view.artifacts]
    return Task(id=view.id, context_id=view.context_id, status=status, artifacts=artifacts or None).dump()
