"""GET streams for a browser's `EventSource`: `GET /tasks/{id}/stream` and `GET /stream`.

`EventSource` can only GET, cannot set headers on its first request, and reconnects by itself
sending `Last-Event-ID`. So what the JSON-RPC POST streams take from the body and headers comes
here from the path and the query: the task id (hostile, checked before use), where to resume
(`?after=N` on the first connection; the `Last-Event-ID` header wins on a reconnection) and the
framing (`?framing=upstream`, the default, or `?framing=a2a`). The frames are the POST streams'
own; a GET stream adds one `retry:` hint first so a browser reconnects quickly.

Errors are plain HTTP statuses with a JSON-RPC error object as the body (an `EventSource` treats
any non-200 answer as final and stops reconnecting, which is what a bad id or an unknown task
deserves).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from fastapi import APIRouter, Request
from fastapi.responses import Response

from murmurd.a2a.wire import jsonrpc
from murmurd.a2a.wire import Dialect
from murmurd.a2a.http.route import RouteHost
from murmurd.a2a.http.stream_paths import BadStreamRequest, check_task_id

RETRY_MS = 2000
"""The `retry:` hint sent first on every GET stream: reconnect after two seconds."""

FRAMINGS = ("upstream", "a2a")
_DIGITS = re.compile(r"[0-9]{1,19}")  # ASCII digits only, below the 4300-digit int() limit


@dataclass(frozen=True)
class StreamQuery:
    """What a GET stream asked for, checked."""

    after: int | None  # None: the stream's default start
    framing: str  # "upstream" or "a2a"


def parse_query(last_event_id: str | None, after: str | None, framing: str | None) -> StreamQuery:
    """The resume point and framing of a GET stream.

    `Last-Event-ID` (sent by `EventSource` itself on a reconnection) wins over `?after=`; a
    `Last-Event-ID` that is not a plain event id is ignored, as on the POST streams, while a bad
    `?after=` or `?framing=` is refused (the page's author wrote it)."""
    chosen = (framing or "upstream").strip().lower()
    if chosen not in FRAMINGS:
        raise BadStreamRequest(f"framing must be one of {', '.join(FRAMINGS)}, not {framing[:40]!r}")
    header = (last_event_id or "").strip()
    if _DIGITS.fullmatch(header):
        return StreamQuery(int(header), chosen)
    if after is not None:
        if not _DIGITS.fullmatch(after):
            raise BadStreamRequest("after must be an event id (ASCII digits, at most 19)")
        return StreamQuery(int(after), chosen)
    return StreamQuery(None, chosen)


def a2a_dialect(task_dialect: Dialect | None) -> Dialect:
    """The A2A framing of a task's stream: the dialect the task was created in when that is an
    A2A one (0.2, 0.3 or 1.0), else A2A 1.0."""
    return task_dialect if task_dialect in (Dialect.V02, Dialect.V03, Dialect.V10) else Dialect.V10


class StreamHost(RouteHost, Protocol):
    """What the GET streams need of the router besides a refusal: the streams themselves."""

    async def get_watch_stream(self, request: Request, query: StreamQuery) -> Response: ...

    async def get_task_stream(self, request: Request, task_id: str, query: StreamQuery) -> Response: ...


def routes(router: StreamHost) -> APIRouter:
    """`GET /stream` and `GET /tasks/{task_id}/stream`, served by `router`."""
    api = APIRouter()

    @api.get("/stream")
    async def watch_stream(request: Request) -> Response:
        try:
            query = parse_query(request.headers.get("last-event-id"), request.query_params.get("after"),
                                request.query_params.get("framing"))
            if query.framing != "upstream":
                raise BadStreamRequest("the watch stream has upstream frames only (there is no A2A watch)")
        except BadStreamRequest as exc:
            return router.refuse(400, jsonrpc.JsonRpcError.invalid_params(str(exc)))
        return await router.get_watch_stream(request, query)

    @api.get("/tasks/{task_id}/stream")
    async def task_stream(task_id: str, request: Request) -> Response:
        try:
            checked = check_task_id(task_id)
            query = parse_query(request.headers.get("last-event-id"), request.query_params.get("after"),
                                request.query_params.get("framing"))
        except BadStreamRequest as exc:
            return router.refuse(400, jsonrpc.JsonRpcError.invalid_params(str(exc)))
        return await router.get_task_stream(request, checked, query)

    return api
