"""Stream events for the A2A dialects (V02, V03, V10); upstream SSE frames are rendered by
`murmurd.a2a.core.stream`.

The lead feeds the same domain events it publishes upstream:

| event_type  | payload                                      | V03 / V10 result               | V02 result            |
|-------------|----------------------------------------------|--------------------------------|-----------------------|
| `task`      | -                                            | Task / `{"task"}`              | status update         |
| `status`    | -                                            | status-update / `{"statusUpdate"}` | status update     |
| `text`      | `{"text", "final", "append"?, "index"?}`     | artifact-update of `result`    | artifact update       |
| `artifact`  | `{"tool_name", "content", "artifact_id"?, "index"?}` | artifact-update (tool name) | artifact update   |
| `gap`       | `{"first_available_id", "after_id"?}`        | status-update, `metadata.murmurd.gap` | status update  |
| `thinking`, `error` | -                                    | None (not sent)                | None                  |

A `gap` (the subscriber fell further behind than the replay buffer reaches, or resumed from an
evicted id) renders as a non-final status-update in the task's current state whose message says
which event ids were dropped, with `metadata: {"murmurd": {"gap": {"firstAvailableId",
"afterId"}}}` for a program to read: a stream never loses chunks silently (issue 29).

An empty text chunk renders to None. Every returned dict is a JSON-RPC `result`: wrap it with
`jsonrpc.result_response(request_id, event)` and send it as one SSE `data:` line.

The streamed answer is the stored answer (issue 24): a text chunk a tool emitted (`"source":
"tool"`) goes to an artifact of its own, `tool-output`, never into `result`; and a completed
task's final status is preceded by the `result` artifact whole (`append: false`, `lastChunk:
true`), the text `tasks/get` returns, which replaces whatever earlier turns streamed into it
(`StreamRenderer.render_frames`).

`append` matters to a2a-sdk: an `append: true` chunk for an artifact the client has not seen is
dropped, so the first chunk of a stream must say `append: false`. `StreamRenderer` (one per
SSE connection) keeps that state; `render_stream_event` is the stateless form where the caller
supplies `append`/`index` in the payload (default: `append` false, `index` 0).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from murmurd.a2a.core.tasks import TaskRecord, TaskState
from murmurd.a2a.wire import v02, v03, v10
from murmurd.a2a.wire.common import RESULT_ARTIFACT, is_final_state
from murmurd.a2a.wire.dialects import Dialect
from murmurd.ids import random_hex

STREAM_EVENT_TYPES = frozenset({"task", "status", "text", "thinking", "artifact", "gap", "error"})
_SILENT = frozenset({"thinking", "error"})
TOOL_OUTPUT_ARTIFACT = "tool-output"  # tools' live chunks, apart from the answer


class _EventCodec(Protocol):
    """What the V02, V03 and V10 modules provide for streams."""

    def render_status_event(self, record: TaskRecord) -> dict[str, Any]: ...

    def render_text_chunk(self, record: TaskRecord, text: str, *, append: bool, last_chunk: bool,
                          index: int, name: str = ...) -> dict[str, Any]: ...

    def render_tool_artifact(self, record: TaskRecord, tool_name: str, content: Any, *, artifact_id: str,
                             index: int) -> dict[str, Any]: ...


_CODECS: dict[Dialect, _EventCodec] = {Dialect.V02: v02, Dialect.V03: v03, Dialect.V10: v10}


def new_artifact_id() -> str:
    return "art_" + random_hex(8)


def render_stream_event(dialect: Dialect, event_type: str, record: TaskRecord,
                        payload: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """One stream event as the dialect's JSON-RPC `result` object, or None when the dialect has
    nothing to send for it."""
    if dialect is Dialect.UPSTREAM:
        raise ValueError("upstream SSE frames are rendered by murmurd.a2a.core.stream")
    if event_type not in STREAM_EVENT_TYPES:
        raise ValueError(f"unknown stream event type {event_type!r}")
    if event_type in _SILENT:
        return None
    payload = payload or {}
    if event_type == "gap":
        return render_gap(dialect, record, int(payload.get("first_available_id", 0)), payload.get("after_id"))
    if event_type == "task":
        if dialect is Dialect.V10:
            return v10.render_task_event(record)
        if dialect is Dialect.V03:
            return v03.render_task(record)
        return v02.render_status_event(record)  # 0.1 streams carry no task objects
    module = _CODECS[dialect]
    if event_type == "status":
        return module.render_status_event(record)
    index = int(payload.get("index", 0))
    if event_type == "text":
        text = payload.get("text")
        if not isinstance(text, str) or text == "":
            return None
        name = TOOL_OUTPUT_ARTIFACT if payload.get("source") == "tool" else RESULT_ARTIFACT
        return module.render_text_chunk(record, text, append=bool(payload.get("append", False)),
                                        last_chunk=bool(payload.get("final", False)), index=index, name=name)
    tool_name = payload.get("tool_name")
    return module.render_tool_artifact(record, str(tool_name) if tool_name is not None else "artifact",
                                       payload.get("content"),
                                       artifact_id=str(payload.get("artifact_id") or new_artifact_id()), index=index)


def gap_text(first_available_id: int, after_id: int | None) -> str:
    """What a gap frame's status message says was lost (capsule-wide ids: which of them were
    this task's is not known)."""
    if after_id is None:
        lost = (f"the events before id {first_available_id} (the stream resumed from an earlier daemon run's id)"
                " were dropped")
    elif after_id + 1 >= first_available_id - 1:
        lost = f"event {after_id + 1} of this capsule's stream was dropped"
    else:
        lost = f"events {after_id + 1} to {first_available_id - 1} of this capsule's stream were dropped"
    return (f"murmurd: this stream fell behind its replay buffer and {lost}; this task's events may be among"
            " them, and the task itself holds its complete result")


def render_gap(dialect: Dialect, record: TaskRecord, first_available_id: int,
               after_id: int | None) -> dict[str, Any]:
    """The gap frame: a non-final status-update in the record's state, its message saying what
    was dropped, its metadata saying the same for a program."""
    state = record.state if not is_final_state(record.state) else TaskState.WORKING
    view = dataclasses.replace(record, state=state, status_message=gap_text(first_available_id, after_id))
    rendered = _CODECS[dialect].render_status_event(view)
    gap: dict[str, Any] = {"firstAvailableId": first_available_id}
    if after_id is not None:
        gap["afterId"] = after_id
    event = rendered["statusUpdate"] if dialect is Dialect.V10 else rendered
    event["metadata"] = {**(event.get("metadata") or {}), "murmurd": {"gap": gap}}
    return rendered


class StreamRenderer:
    """Renders one SSE connection's events, tracking per task whether the streamed `result`
    artifact exists on the client yet (`append`) and, for V02, artifact indexes."""

    def __init__(self, dialect: Dialect) -> None:
        if dialect is Dialect.UPSTREAM:
            raise ValueError("upstream SSE frames are rendered by murmurd.a2a.core.stream")
        self.dialect = dialect
        self._result_index: dict[str, int] = {}
        self._tool_output_index: dict[str, int] = {}
        self._streamed: dict[str, str] = {}  # task id -> the `result` text this connection sent
        self._next_index: dict[str, int] = {}

    def _index(self, task_id: str) -> int:
        index = self._next_index.get(task_id, 0)
        self._next_index[task_id] = index + 1
        return index

    def render(self, event_type: str, record: TaskRecord,
               payload: dict[str, Any] | None = None) -> dict[str, Any] | None:
        payload = dict(payload or {})
        if event_type == "task":
            # a snapshot replaces the client's copy of the task: the next chunk starts afresh
            self._result_index.pop(record.id, None)
            self._tool_output_index.pop(record.id, None)
            self._streamed.pop(record.id, None)
        elif event_type == "text":
            if not isinstance(payload.get("text"), str) or payload["text"] == "":
                return None
            indexes = self._tool_output_index if payload.get("source") == "tool" else self._result_index
            started = record.id in indexes
            if not started:
                indexes[record.id] = self._index(record.id)
            payload["append"] = started
            payload["index"] = indexes[record.id]
            if payload.get("source") != "tool":
                self._streamed[record.id] = self._streamed.get(record.id, "") + payload["text"]
        elif event_type == "artifact":
            payload["index"] = self._index(record.id)
        return render_stream_event(self.dialect, event_type, record, payload)

    def render_frames(self, event_type: str, record: TaskRecord,
                      payload: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """`render`, as the frames to send: a completed task's status comes after the `result`
        artifact whole (`append: false`, `lastChunk: true`: it replaces every earlier chunk) unless
        this connection streamed exactly that text, so what a client assembles from `result` is
        what `tasks/get` returns (also for a client that subscribed in the middle of the task)."""
        frames = []
        streamed = self._streamed.get(record.id)
        if event_type == "status" and record.state.terminal:
            self._streamed.pop(record.id, None)
        if (event_type == "status" and record.state is TaskState.COMPLETED and record.result_text is not None
                and streamed != record.result_text):
            index = self._result_index.get(record.id)
            if index is None:
                index = self._result_index[record.id] = self._index(record.id)
            frames.append(_CODECS[self.dialect].render_text_chunk(record, record.result_text, append=False,
                                                                  last_chunk=True, index=index))
        rendered = self.render(event_type, record, payload)
        return frames + ([rendered] if rendered is not None else [])
