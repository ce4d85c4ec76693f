"""`GET /tasks/{id}/trace`: one task's trace events, for operators only (the console's task view).

Which lines are a task's: in the daemon's own session trace and, when the task ran in a context
session of its own (`a2a_task_session` names it), in that session's trace, every line that
carries `task_id` equal to the task's, and every line without a `task_id` written between that
task's `task_start` and its `task_end` (a session runs one task at a time; its inference, tool
and hook events carry no task id). Lines of the daemon's earlier runs are not searched.

Who may read them: a caller whose credential is an operator credential (its principal's origin,
whatever `x-murmur-task-origin` narrows a task to). A peer credential gets 403: trace lines hold
prompts, tool inputs and outputs of every trust class. With no credential configured every
caller is the operator, as everywhere else.

What a read may hold: a trace (up to `MAX_TRACE_BYTES`) is read a line at a time, a line longer
than `MAX_KEPT_BYTES` skipped unread, and of the task's events only the latest `MAX_EVENTS`,
at most `MAX_KEPT_BYTES` of them, are kept as they are read; the answer is made on the read's
thread. At most `TRACE_READERS` reads run at once per app, each holding its slot until its
answer is sent, and one more is refused with 503 and `Retry-After`: a console polling many
tasks, or clients that never read their answers, cannot hold the daemon's memory at many
times that.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from fastapi import APIRouter, Request
from fastapi.responses import Response

from murmurd import workdir_fs
from murmurd.a2a.wire import jsonrpc
from murmurd.a2a.http.auth.edge import forbidden
from murmurd.a2a.http.auth.principal import OPERATOR
from murmurd.a2a.core.intake import TaskNotFound
from murmurd.a2a.http.stream_paths import BadStreamRequest, check_task_id
from murmurd.a2a.http.route import HoldsSlot, RouteHost
from murmurd.session.own_thread import on_own_thread
from murmurd.workdir import TRACE

MAX_TRACE_BYTES = 64 * 1024 * 1024  # a trace this large is not read for the console
MAX_EVENTS = 1000  # the task's latest events; `truncated` says when others were left out
MAX_KEPT_BYTES = 8 * 1024 * 1024  # the kept events' lines in all; a longer line is skipped
TRACE_READERS = 2  # trace reads (and their answers being sent) at once; one more gets 503
_SESSION_ID = re.compile(r"ses_[0-9a-f]{32}")
T = TypeVar("T")
_Line = str | bytes | None  # None: a line too long to read (`workdir_fs.read_lines`)


def task_lines(lines: Iterable[_Line], task_id: str) -> list[dict[str, Any]]:
    """The events of one trace that belong to `task_id` (pure; a line that is not a JSON
    object is skipped, a trace being written may end mid-line)."""
    return [event for event, _size in _task_events(lines, task_id)]


def _task_events(lines: Iterable[_Line], task_id: str) -> Iterator[tuple[dict[str, Any], int]]:
    """(event, its line's length) of each of the task's events."""
    inside = False
    for line in lines:
        if line is None:
            continue
        try:
            event = json.loads(line.decode("utf-8", "replace") if isinstance(line, bytes) else line)
        except ValueError:
            continue
        if not isinstance(event, dict):
            continue
        owner = event.get("task_id")
        if owner == task_id:
            yield event, len(line)
            if event.get("event_type") == "task_start":
                inside = True
            elif event.get("event_type") == "task_end":
                inside = False
        elif owner is None and inside:
            yield event, len(line)


@dataclass
class TaskTrace:
    """A task's events as read from its traces: the latest `MAX_EVENTS` by timestamp (file
    order among equals, as the traces are added), at most `MAX_KEPT_BYTES` of lines of them,
    kept while they are read: what a read holds is bounded whatever the traces hold."""

    total: int = 0  # the task's events found
    skipped: int = 0  # lines too long to read, anyone's
    _kept: list[tuple[int, int, int, dict[str, Any]]] = field(default_factory=list)  # heap: time, order, size
    _bytes: int = 0

    def add(self, lines: Iterable[_Line], task_id: str, sessions: set[str] | None = None) -> None:
        """The task's events of one trace; with `sessions`, the session ids its
        `a2a_task_session` lines name are added there (from every line, kept or not)."""
        for event, size in _task_events(self._counted(lines), task_id):
            self.total += 1
            stamp = event.get("timestamp")
            heapq.heappush(self._kept, (stamp if isinstance(stamp, int) else 0, self.total, size, event))
            self._bytes += size
            while len(self._kept) > MAX_EVENTS or self._bytes > MAX_KEPT_BYTES:
                self._bytes -= heapq.heappop(self._kept)[2]
            if sessions is not None and event.get("event_type") == "a2a_task_session":
                session = event.get("task_session_id")
                if isinstance(session, str) and _SESSION_ID.fullmatch(session):
                    sessions.add(session)

    def _counted(self, lines: Iterable[_Line]) -> Iterator[_Line]:
        for line in lines:
            self.skipped += line is None
            yield line

    @property
    def truncated(self) -> bool:
        """Events were left out: past the count or the bytes kept, or in a line too long to read."""
        return self.total > len(self._kept) or self.skipped > 0

    def ordered(self) -> list[dict[str, Any]]:
        """The kept events, by timestamp."""
        return [entry[3] for entry in sorted(self._kept, key=lambda entry: entry[:2])]


def _trace_lines(root: Path, rel: str) -> Iterator[bytes | None]:
    try:
        yield from workdir_fs.read_lines(root, rel, max_bytes=MAX_TRACE_BYTES, max_line=MAX_KEPT_BYTES)
    except FileNotFoundError:
        return


def read_task_trace(daemon_root: Path, daemon_rel: str, task_id: str) -> TaskTrace:
    """The task's events from the daemon's trace and its own session's (blocking: a thread)."""
    found, sessions = TaskTrace(), set()
    found.add(_trace_lines(daemon_root, daemon_rel), task_id, sessions)
    for session in sorted(sessions - {daemon_root.name}):
        found.add(_trace_lines(daemon_root.parent, f"{session}/{TRACE}"), task_id)
    return found


def task_trace_body(daemon_root: Path, daemon_rel: str, task_id: str) -> bytes:
    """The route's answer (blocking: a thread). ASCII-escaped: a trace line may hold a lone
    surrogate (`\\ud800`), which UTF-8 cannot carry."""
    found = read_task_trace(daemon_root, daemon_rel, task_id)
    body = {"task_id": task_id, "events": found.ordered(), "truncated": found.truncated}
    return json.dumps(body, ensure_ascii=True, separators=(",", ":"), default=str).encode()


class _ReadSlots:
    """The trace reads running, each on a thread of its own (a trace of up to 64 MiB takes a
    while, and the loop's executor is for short work), counted until their answer is sent or,
    for a caller that went away, until their thread ends."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.running = 0

    async def run(self, fn: Callable[..., T], /, *args: Any) -> tuple[T, Callable[[], None]]:
        """`fn(*args)`'s result, and the release of its slot for the caller to call once done
        with the result (its answer sent)."""
        self.running += 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.running -= 1

        job = asyncio.ensure_future(on_own_thread(fn, *args))
        try:
            return await asyncio.shield(job), release
        except asyncio.CancelledError:  # the thread reads on: its slot is free when it ends
            job.add_done_callback(lambda ended: (release(), ended.cancelled() or ended.exception()))
            raise
        except BaseException:
            release()
            raise


class _SlotResponse(HoldsSlot, Response):
    """The answer of a read, which frees its slot once sent (or once its sending failed)."""


def routes(router: RouteHost) -> APIRouter:
    """`GET /tasks/{task_id}/trace`, served by `router`."""
    api = APIRouter()
    reads = _ReadSlots(TRACE_READERS)  # this app's, on its one loop

    @api.get("/tasks/{task_id}/trace")
    async def task_trace(task_id: str, request: Request) -> Response:
        principal = router.caller(request).principal
        if principal.origin != OPERATOR:
            return router.refuse(403, forbidden(
                f"credential {principal.name!r} is a peer credential; trace events are for operator credentials"))
        try:
            checked = check_task_id(task_id)
        except BadStreamRequest as exc:
            return router.refuse(400, jsonrpc.JsonRpcError.invalid_params(str(exc)))
        try:
            await router.daemon.get(checked)
        except TaskNotFound:
            return router.refuse(404, jsonrpc.JsonRpcError.task_not_found(checked))
        if reads.running >= reads.limit:
            return router.refuse(503, jsonrpc.JsonRpcError.server_limit(
                f"{reads.running} trace reads are running; try again", {"limit_trace_reads": reads.limit}),
                headers={"Retry-After": "1"})
        workdir = router.daemon.staged.workdir
        try:
            body, release = await reads.run(task_trace_body, workdir.root, workdir.book(TRACE), checked)
        except OSError as exc:  # too large, not a regular file, a symlink: say so, never a 500
            return router.refuse(503, jsonrpc.JsonRpcError.internal_error(f"the trace cannot be read: {exc}"))
        return _SlotResponse(body, media_type="application/json", headers={"Cache-Control": "no-store"},
                             release=release)

    return api
