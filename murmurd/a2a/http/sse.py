"""The edge's SSE streams: the slots that cap how many are open, and the responses themselves
(the watch stream, a task's upstream-framed stream, a task's A2A stream in its dialect).

`server.Router` decides which stream a request gets and holds its slot; this module only builds
the response from the daemon's event log.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from fastapi import Request
from fastapi.responses import Response
from sse_starlette import EventSourceResponse, ServerSentEvent

from murmurd.a2a import wire
from murmurd.a2a.core.intake import TaskNotFound
from murmurd.a2a.core.stream import HEARTBEAT_SECONDS, StreamEvent, sse_frame
from murmurd.a2a.core.tasks import TaskRecord, TaskState
from murmurd.a2a.http import get_streams
from murmurd.a2a.http.auth.principal import Principal
from murmurd.a2a.http.auth.visibility import creator_filter, may_read
from murmurd.a2a.http.route import HoldsSlot
from murmurd.a2a.wire import Dialect, jsonrpc

if TYPE_CHECKING:
    from murmurd.a2a.core.daemon import CapsuleDaemon

A2A_HEARTBEAT_SECONDS = 4.0  # a2a-sdk clients time out after 5 s of silence
MAX_WATCH_VERDICTS = 10_000  # per watch stream: whose task each task id is, remembered
_EVENT_ID = re.compile(r"[0-9]{1,19}")  # ASCII digits only, below the 4300-digit int() limit


class StreamSlots:
    """Counts open SSE streams, in all and per client address. A stream's response never
    completes, so its connection is never evictable: without a cap of their own below the
    connection cap, streams could take every connection and leave ordinary requests a 503."""

    def __init__(self, limit: int, per_client: int) -> None:
        self.limit, self.per_client = limit, per_client
        self._open: dict[str, int] = {}
        self.total = 0

    def take(self, client: str) -> jsonrpc.JsonRpcError | None:
        """Take a slot for `client`, or the error refusing it (nothing taken then)."""
        if self.total >= self.limit or self._open.get(client, 0) >= self.per_client:
            which = "max_streams" if self.total >= self.limit else "max_streams_per_client"
            logging.getLogger("murmurd.connections").warning(
                "stream refused: the --%s limit is reached", which.replace("_", "-"),
                extra={"client": client, "limit": which})
        if self.total >= self.limit:
            return jsonrpc.JsonRpcError.server_limit(f"{self.limit} streams are open; try again later",
                                                     {"limit_streams": self.limit})
        if self._open.get(client, 0) >= self.per_client:
            return jsonrpc.JsonRpcError.server_limit(
                f"this client has {self.per_client} streams open; close one first",
                {"limit_streams_per_client": self.per_client})
        self._open[client] = self._open.get(client, 0) + 1
        self.total += 1
        return None

    def give_back(self, client: str) -> None:
        left = self._open.get(client, 0) - 1
        if left > 0:
            self._open[client] = left
        else:
            self._open.pop(client, None)
        self.total -= 1


class SlotStream(HoldsSlot, EventSourceResponse):
    """An SSE response holding a stream slot until the response ends, however it ends (the
    stream finished, the client went away, the connection was closed under it)."""


def heartbeat() -> ServerSentEvent:
    return ServerSentEvent(comment="heartbeat")


def watch_stream(daemon: CapsuleDaemon, after: int, release: Callable[[], None], reader: Principal,
                 retry: bool = False) -> Response:
    """The watch stream: every task's events, or for a peer credential only those of the
    tasks it created (auth/visibility.py; gap frames name no task and pass)."""
    readable: dict[str, bool] = {}  # task id -> may `reader` read it (asked once per task)

    async def may_see(event: StreamEvent) -> bool:
        if event.task_id is None or creator_filter(reader) is None:
            return True
        if event.task_id not in readable:
            if len(readable) >= MAX_WATCH_VERDICTS:  # a console left open for weeks
                readable.clear()
            try:
                creator = (await daemon.get(event.task_id)).principal
            except TaskNotFound:
                creator = None
            readable[event.task_id] = may_read(reader, creator)
        return readable[event.task_id]

    async def frames() -> AsyncIterator[bytes]:
        if retry:
            yield RETRY_FRAME
        async for batch in daemon.log.follow_batches(after_id=after, task_id=None, close_on_final=False):
            shown = [sse_frame(event) for event in batch if await may_see(event)]
            if shown:
                yield encode(shown)

    return SlotStream(frames(), ping=HEARTBEAT_SECONDS, ping_message_factory=heartbeat, release=release)


def upstream_stream(daemon: CapsuleDaemon, record: TaskRecord, after: int, release: Callable[[], None],
                    retry: bool = False) -> Response:
    log = daemon.log

    async def frames() -> AsyncIterator[bytes]:
        if retry:
            yield RETRY_FRAME
        if record.state.terminal and not any(e.task_id == record.id and e.id > after for e in log.buffered()):
            yield encode([_closing_status(record)])
            return
        async for batch in log.follow_batches(after_id=after, task_id=record.id, close_on_final=True):
            out = [sse_frame(event) for event in batch]
            try:
                ended = await ended_in_gap(daemon, record.id, batch)
            except TaskNotFound:  # removed while the stream lagged: its end is not known any more
                out.append({"event": "error", "data": json.dumps(_gone(record.id).to_json())})
                yield encode(out)
                return
            if ended is not None and not ended.state.terminal:
                ended = None  # input-required is not final in this framing: the stream goes on
            if ended is not None:  # its final status went with what the gap dropped
                out.append(_closing_status(ended))
            yield encode(out)
            if ended is not None:
                return

    return SlotStream(frames(), ping=HEARTBEAT_SECONDS, ping_message_factory=heartbeat, release=release)


def _closing_status(record: TaskRecord) -> dict[str, str]:
    """The upstream framing's last frame for a task that has ended: its final status."""
    return sse_frame(StreamEvent(None, "status", record.id, record.status_frame(True), True))


def _gone(task_id: str) -> jsonrpc.JsonRpcError:
    """What a stream says, and then ends, when its task was removed (finished tasks' retention)
    while the stream was behind, so neither the replay nor the store holds its end."""
    found = jsonrpc.JsonRpcError.task_not_found(task_id)
    return jsonrpc.JsonRpcError(found.code, f"{found.message}: it ended and was removed while this stream "
                                "was behind, and its final status is no longer kept", found.data)


async def ended_in_gap(daemon: CapsuleDaemon, task_id: str, batch: list[StreamEvent]) -> TaskRecord | None:
    """After a gap in `batch`: the task's record if it has ended and its final status is no
    longer in the replay buffer (it went with what the gap dropped, and nothing would follow),
    else None. Raises `TaskNotFound` when the task itself is gone from the store (a task is
    removed only after it ended: finished tasks' retention)."""
    if not any(event.type == "gap" for event in batch):
        return None
    if any(e.task_id == task_id and e.type == "status" and e.final for e in daemon.log.buffered()):
        return None  # the replay still brings it
    live = await daemon.get(task_id)
    return live if wire.is_final_state(live.state) else None


def a2a_stream(daemon: CapsuleDaemon, dialect: Dialect, request_id: Any, record: TaskRecord, after: int,
               release: Callable[[], None], retry: bool = False, joining: bool = False) -> Response:
    """A task's A2A stream: its snapshot, then its events after `after`.

    `joining`: a subscriber arriving now (no `Last-Event-ID`), `after` taken just before
    `record` was read. The snapshot is then the record as it is at this call, not when the
    response starts, and a status it already shows is not sent again: the live record is saved
    before its status is published, so the event announcing what the snapshot shows can follow it.
    """
    renderer = wire.StreamRenderer(dialect)
    log = daemon.log
    taken = (renderer.render("task", record), dataclasses.replace(record)) if joining else None

    def data(result: dict[str, Any]) -> dict[str, str]:
        return {"data": json.dumps(jsonrpc.result_response(request_id, result))}

    async def frames() -> AsyncIterator[bytes]:
        if retry:
            yield RETRY_FRAME
        snapshot, shown = taken if taken is not None else (renderer.render("task", record), record)
        if snapshot is not None:
            yield encode([data(snapshot)])
        if wire.is_final_state(shown.state):
            return
        current = shown  # as of the last status event: what a gap frame reports the task as
        async for batch in log.follow_batches(after_id=after, task_id=record.id, close_on_final=True):
            out: list[dict[str, str]] = []
            final = False
            for event in batch:
                if joining and repeats(current, event):
                    continue
                view = current = record_at(current, event)
                out += [data(rendered) for rendered in renderer.render_frames(event.type, view, renderer_payload(event))]
                if event.type == "status" and wire.is_final_state(view.state):
                    final = True
                    break
            try:
                ended = None if final else await ended_in_gap(daemon, record.id, batch)
            except TaskNotFound:  # removed while the stream lagged: its end is not known any more
                out.append({"data": json.dumps(jsonrpc.error_response(request_id, _gone(record.id)))})
                yield encode(out)
                return
            if ended is not None:  # its final status went with what the gap dropped
                out += [data(rendered) for rendered in renderer.render_frames("status", ended, ended.status_frame(True))]
                final = True
            if out:
                yield encode(out)
            if final:
                return

    return SlotStream(frames(), ping=A2A_HEARTBEAT_SECONDS, ping_message_factory=heartbeat, release=release)


RETRY_FRAME = ServerSentEvent(retry=get_streams.RETRY_MS).encode()


def encode(frames: list[dict[str, str]]) -> bytes:
    """Several SSE frames as one write (sse-starlette's encoder; bytes pass through unchanged)."""
    return b"".join(ServerSentEvent(**frame).encode() for frame in frames)


def last_event_id(request: Request, default: int) -> int:
    """The `Last-Event-ID` to resume after; anything but a plain event id (at most 19 ASCII
    digits) is ignored, as an absent header is. (An id past the log's end means a gap frame.)"""
    value = (request.headers.get("last-event-id") or "").strip()
    return int(value) if _EVENT_ID.fullmatch(value) else default


def renderer_payload(event: StreamEvent) -> dict[str, Any]:
    """The event's data as `wire.StreamRenderer` takes it: an upstream `artifact` frame nests the
    tool artifact (`{"id", "artifact": {"tool_name", "content"}}`), the renderer wants it flat."""
    if event.type == "artifact" and isinstance(event.data.get("artifact"), dict):
        return event.data["artifact"]
    if event.type == "gap":
        return {**event.data, "after_id": event.after_id}
    return event.data


def repeats(record: TaskRecord, event: StreamEvent) -> bool:
    """A non-final status event that tells nothing the client's view of the task does not."""
    if event.type != "status" or event.final:
        return False
    status = event.data.get("status", {})
    return status.get("state") == record.state.value and status.get("message") == record.status_message


def record_at(record: TaskRecord, event: StreamEvent) -> TaskRecord:
    """The record as it was when a status event was published (the live record moves on)."""
    if event.type != "status":
        return record
    status = event.data.get("status", {})
    return dataclasses.replace(record, state=TaskState(status.get("state", record.state.value)),
                               status_message=status.get("message"), result_text=status.get("response"))
