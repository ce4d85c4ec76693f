"""Wire shapes of the A2A dialects and their mapping onto the one task model (`a2a.tasks`).

Router flow (the server owns transport, the store and execution):

    dialect, op = resolve_dialect(method, params, headers, task_dialect=...)   # -32601 if unknown
    send = parse_send_params(dialect, params)          # op SEND / STREAM   (-32602 on bad params)
    query = parse_task_query(dialect, params)          # op GET / CANCEL / RESUBSCRIBE
    listing = parse_list_params(dialect, params)       # op LIST (V10 only)
    result = render_send_result(dialect, record)       # SEND
    result = render_task(dialect, record, history_length=query.history_length)   # GET / CANCEL
    event = StreamRenderer(dialect).render(event_type, record, payload)          # STREAM (V02/V03/V10)
    result = render_list(dialect, records, next_page_token, ...)                 # LIST

Every render goes through the dialect's pydantic models (`Model.model_validate(...)` then
`model_dump(by_alias=True, exclude_none=True)`).
"""

from __future__ import annotations

from typing import Any, Protocol

from murmurd.a2a.core.tasks import TaskRecord
from murmurd.a2a.wire import upstream, v02, v03, v10
from murmurd.a2a.wire.common import ListRequest, SendRequest, TaskQuery, is_final_state, result_artifact_id
from murmurd.a2a.wire.dialects import METHOD_TABLE, Dialect, Operation, header_version, lookup_method, resolve_dialect
from murmurd.a2a.wire.events import StreamRenderer, render_stream_event
from murmurd.a2a.wire.v10 import decode_page_token, encode_page_token

__all__ = [
    "METHOD_TABLE", "Dialect", "ListRequest", "Operation", "SendRequest", "StreamRenderer", "TaskQuery",
    "decode_page_token", "encode_page_token", "header_version", "is_final_state", "lookup_method",
    "parse_list_params", "parse_send_params", "parse_task_id_params", "parse_task_query", "render_list",
    "render_send_result", "render_stream_event", "render_task", "resolve_dialect", "result_artifact_id",
]



class _Codec(Protocol):
    """What every dialect module provides."""

    def parse_send(self, params: Any) -> SendRequest: ...

    def parse_task_query(self, params: Any) -> TaskQuery: ...

    def render_task(self, record: TaskRecord, history_length: int | None = None,
                    include_artifacts: bool = True) -> dict[str, Any]: ...


_MODULES: dict[Dialect, _Codec] = {Dialect.UPSTREAM: upstream, Dialect.V02: v02, Dialect.V03: v03, Dialect.V10: v10}


def parse_send_params(dialect: Dialect, params: Any) -> SendRequest:
    """A send/stream request's params; JsonRpcError(-32602) naming the bad field otherwise."""
    return _MODULES[dialect].parse_send(params)


def parse_task_query(dialect: Dialect, params: Any) -> TaskQuery:
    """A get/cancel/resubscribe request's params (`{"id", "historyLength"?}`)."""
    return _MODULES[dialect].parse_task_query(params)


def parse_task_id_params(dialect: Dialect, params: Any) -> str:
    return parse_task_query(dialect, params).task_id


def parse_list_params(dialect: Dialect, params: Any) -> ListRequest:
    if dialect is not Dialect.V10:
        raise ValueError(f"{dialect.value} has no list operation")
    return v10.parse_list(params)


def render_task(dialect: Dialect, record: TaskRecord, history_length: int | None = None,
                include_artifacts: bool = True) -> dict[str, Any]:
    """The task as `tasks/get` / `GetTask` / `CancelTask` answer it in this dialect."""
    return _MODULES[dialect].render_task(record, history_length=history_length, include_artifacts=include_artifacts)


def render_send_result(dialect: Dialect, record: TaskRecord, history_length: int | None = None) -> dict[str, Any]:
    """The `result` of a send: the task itself, except V10's `{"task": Task}` wrapper."""
    if dialect is Dialect.V10:
        return v10.render_send_result(record, history_length=history_length)
    return render_task(dialect, record, history_length=history_length)


def render_list(dialect: Dialect, records: list[TaskRecord], next_page_token: str | None = None, *,
                page_size: int | None = None, total_size: int | None = None, history_length: int | None = None,
                include_artifacts: bool = False) -> dict[str, Any]:
    """`ListTasks`' result; tasks carry artifacts only with `include_artifacts` (as a2a-sdk does)."""
    if dialect is not Dialect.V10:
        raise ValueError(f"{dialect.value} has no list operation")
    return v10.render_list(records, next_page_token, page_size=page_size, total_size=total_size,
                           history_length=history_length, include_artifacts=include_artifacts)
