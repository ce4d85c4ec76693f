"""What every dialect module shares: the parsed-request types, the pydantic base model, the
params-error conversion, and `TaskView`, the one reading of a `TaskRecord` every dialect renders.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, StrictStr, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from murmurd.a2a.wire.jsonrpc import JsonRpcError
from murmurd.a2a.wire.problems import describe as describe_problems
from murmurd.a2a.wire.problems import summary as problem_summary
from murmurd.a2a.core.tasks import TaskMessage, TaskRecord, TaskState, new_message_id, result_artifact_id
from murmurd.a2a.wire.dialects import Dialect

MAX_ID_CHARS = 256
"""Task, context and message ids longer than this are rejected as invalid params."""

RESULT_ARTIFACT = "result"
PROMPT_ARTIFACT = "prompt"


class WireModel(BaseModel):
    """A wire object: snake_case fields, camelCase on the wire (snake_case accepted too, as
    ProtoJSON parsers do); unknown members ignored (forward compatibility)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    def dump(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


M = TypeVar("M", bound=BaseModel)


class FileContent(WireModel):
    """A file part's content in the A2A 0.2 and 0.3 shapes: exactly one of `bytes` or `uri`."""

    name: StrictStr | None = None
    mime_type: StrictStr | None = None
    bytes: StrictStr | None = None
    uri: StrictStr | None = None

    @model_validator(mode="after")
    def _one_source(self) -> FileContent:
        if (self.bytes is None) == (self.uri is None):
            raise ValueError("a file needs exactly one of bytes or uri")
        return self


def validate_params(model: type[M], params: Any, what: str = "params") -> M:
    """`params` as `model`, or JsonRpcError(-32602) naming the first bad fields."""
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise JsonRpcError.invalid_params(f"{what} must be a JSON object")
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        problems = describe_problems(exc.errors(include_url=False), params)
        raise JsonRpcError.invalid_params(problem_summary(problems), {"errors": problems}) from None


def check_id(value: str | None, field_name: str) -> str | None:
    """An optional id: empty means absent (ProtoJSON's default), over-long is invalid."""
    if value is None or value == "":
        return None
    if len(value) > MAX_ID_CHARS:
        raise JsonRpcError.invalid_params(f"{field_name}: longer than {MAX_ID_CHARS} characters")
    return value


def require_id(value: str | None, field_name: str) -> str:
    checked = check_id(value, field_name)
    if checked is None:
        raise JsonRpcError.invalid_params(f"{field_name}: a non-empty id is required")
    return checked


@dataclass
class SendRequest:
    """A parsed `message/send`-family request, dialect-neutral.

    `task_id` is the task the message names (a reply to it). For V02 it is the client-chosen
    `id` of `tasks/send`, which names the task to create when it does not exist yet
    (`client_task_id` is then True). `blocking` is already resolved against the dialect's
    default (UPSTREAM answers at once; V02, V03 and V10 wait for a terminal or
    input-required state unless told otherwise)."""

    dialect: Dialect
    message: TaskMessage
    task_id: str | None
    context_id: str | None
    blocking: bool
    history_length: int | None = None
    accepted_output_modes: list[str] | None = None
    metadata: dict[str, Any] | None = None
    client_task_id: bool = False

    @property
    def text(self) -> str:
        return self.message.text


@dataclass(frozen=True)
class TaskQuery:
    """A parsed get/cancel/resubscribe request."""

    task_id: str
    history_length: int | None = None
    metadata: dict[str, Any] | None = None


@dataclass(frozen=True)
class ListRequest:
    """A parsed `ListTasks` request. `offset` is decoded from `page_token` (0 without one)."""

    context_id: str | None = None
    state: TaskState | None = None
    page_size: int = 50
    page_token: str | None = None
    offset: int = 0
    history_length: int | None = None
    status_timestamp_after_ms: int | None = None
    include_artifacts: bool = False


# --- one reading of a TaskRecord -------------------------------------------------------------

def rfc3339(ms: int) -> str:
    """Milliseconds since the epoch as RFC 3339 UTC (`2025-01-02T03:04:05.678Z`)."""
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def parse_rfc3339_ms(value: str, field_name: str) -> int:
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise JsonRpcError.invalid_params(f"{field_name}: not an RFC 3339 timestamp") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def is_final_state(state: TaskState) -> bool:
    """A2A streams end here: terminal states, and input-required (the client must send a reply)."""
    return state.terminal or state is TaskState.INPUT_REQUIRED


def status_message_id(record: TaskRecord) -> str:
    return f"{record.id}-status-{record.updated_at}"


@dataclass(frozen=True)
class ArtifactView:
    artifact_id: str
    name: str
    parts: list[dict[str, Any]]


@dataclass(frozen=True)
class TaskView:
    """What every dialect shows of a task.

    - `status_text`: the status message text: the prompt while input-required, the answer once
      completed, otherwise the record's status message (an error, a cancel reason).
    - `artifacts`: the record's artifacts, with `prompt` artifacts only while input-required;
      with `with_result`, a completed task's answer as a `result` artifact (unless the record
      already has one) so A2A clients find it where they look.
    - `history`: the last `history_length` messages (None: all, 0: none)."""

    id: str
    context_id: str
    state: TaskState
    status_text: str | None
    result_text: str | None
    status_message_id: str
    timestamp_ms: int
    artifacts: list[ArtifactView] = field(default_factory=list)
    history: list[TaskMessage] = field(default_factory=list)


def status_text(record: TaskRecord) -> str | None:
    if record.state is TaskState.INPUT_REQUIRED:
        return record.status_message or record.prompt
    if record.state is TaskState.COMPLETED:
        return record.result_text if record.result_text is not None else record.status_message
    return record.status_message


def task_view(record: TaskRecord, *, with_result: bool, history_length: int | None = None,
              include_artifacts: bool = True) -> TaskView:
    artifacts: list[ArtifactView] = []
    if include_artifacts:
        for artifact in record.artifacts:
            if artifact.name == PROMPT_ARTIFACT and record.state is not TaskState.INPUT_REQUIRED:
                continue
            artifacts.append(ArtifactView(artifact.artifact_id, artifact.name, list(artifact.parts)))
        if (with_result and record.state is TaskState.COMPLETED and record.result_text is not None
                and not any(a.name == RESULT_ARTIFACT for a in artifacts)):
            artifacts.append(ArtifactView(result_artifact_id(record.id), RESULT_ARTIFACT,
                                          [{"text": record.result_text}]))
    if history_length is None:
        history = list(record.history)
    elif history_length <= 0:
        history = []
    else:
        history = list(record.history[-history_length:])
    return TaskView(
        id=record.id, context_id=record.context_id, state=record.state, status_text=status_text(record),
        result_text=record.result_text, status_message_id=status_message_id(record),
        timestamp_ms=record.updated_at, artifacts=artifacts, history=history,
    )


def tool_content_part(content: Any) -> dict[str, Any]:
    """A tool-call artifact's content as a neutral part: text when it is a string, data otherwise."""
    return {"text": content} if isinstance(content, str) else {"data": content}


def part_discriminator(tag_field: str) -> Callable[[Any], str | None]:
    """A pydantic discriminator for `kind`/`type`-tagged parts that also accepts an untagged part
    by its content (`text` -> text, `file` -> file, `data` -> data), as lenient peers send it."""

    def discriminate(value: Any) -> str | None:
        if isinstance(value, BaseModel):
            return getattr(value, tag_field, None)
        if not isinstance(value, dict):
            return None
        tag = value.get(tag_field)
        if isinstance(tag, str):
            return tag
        for inferred in ("text", "file", "data"):
            if inferred in value:
                return inferred
        return None

    return discriminate
