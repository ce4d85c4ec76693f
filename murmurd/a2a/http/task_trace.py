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

What a read may hold: each trace is read whole (up to `MAX_TRACE_BYTES`), and of its task's
events only the last `MAX_EVENTS` are kept while it is parsed; at most `TRACE_READERS` reads run
at once per app, and one more is refused with 503 and `Retry-After` (a console polling many
tasks, or many consoles, cannot hold the daemon's memory at many times 64 MiB).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import deque
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
from murmurd.a2a.http.route import RouteHost
from murmurd.session.own_thread import on_own_thread
from murmurd.workdir import TRACE

MAX_TRACE_BYTES = 64 * 1024 * 1024  # a trace this large is not read for the console
MAX_EVENTS = 1000  # the task's last events; `truncated` says when earlier ones were left out
TRACE_READERS = 2  # trace reads running at once (each may hold a 64 MiB trace); one more gets 503
_SESSION_ID = re.compile(r"ses_[0-9a-f]{32}")
T = TypeVar("T")


def task_lines(lines: Iterable[str], task_id: str) -> list[dict[str, Any]]:
    """The events of one trace that belong to `task_id` (pure; a line that is not a JSON
    object is skipped, a trace being written may end mid-line)."""
    return list(_task_events(lines, task_id))


def _task_events(lines: Iterable[str], task_id: str) -> Iterator[dict[str, Any]]:
    inside = False
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict):
            continue
        owner = event.get("task_id")
        if owner == task_id:
            yield event
            if event.get("event_type") == "task_start":
                inside = True
            elif event.get("event_type") == "task_end":
                inside = False
        elif owner is None and inside:
            yield event


@dataclass
class TaskTrace:
    """A task's events as read: the last `MAX_EVENTS` of each trace, in timestamp order once
    `ordered`, and how many there were in all."""

    events: list[dict[str, Any]] = field(default_factory=list)
    total: int = 0

    def add(self, lines: Iterable[str], task_id: str, sessions: set[str] | None = None) -> None:
        """The task's events of one trace; with `sessions`, the session ids its
        `a2a_task_session` lines name are added there (from every line, kept or not)."""
        kept: deque[dict[str, Any]] = deque(maxlen=MAX_EVENTS)
        for event in _task_events(lines, task_id):
            self.total += 1
            kept.append(event)
            if sessions is not None and event.get("event_type") == "a2a_task_session":
                session = event.get("task_session_id")
                if isinstance(session, str) and _SESSION_ID.fullmatch(session):
                    sessions.add(session)
        self.events += kept

    def ordered(self) -> list[dict[str, Any]]:
        """The last `MAX_EVENTS` events of all, by timestamp."""
        self.events.sort(key=lambda e: e.get("timestamp") if isinstance(e.get("timestamp"), int) else 0)
        return self.events[-MAX_EVENTS:]


def _read_lines(root: Path, rel: str) -> list[str]:
    try:
        return workdir_fs.read_text(root, rel, max_bytes=MAX_TRACE_BYTES, errors="replace").splitlines()
    except FileNotFoundError:
        return []


def read_task_trace(daemon_root: Path, daemon_rel: str, task_id: str) -> TaskTrace:
    """The task's events from the daemon's trace and its own session's (blocking: a thread)."""
    found, sessions = TaskTrace(), set()
    found.add(_read_lines(daemon_root, daemon_rel), task_id, sessions)
    for session in sorted(sessions - {daemon_root.name}):
        found.add(_read_lines(daemon_root.parent, f"{session}/{TRACE}"), task_id)
    return found


class _ReadSlots:
    """The trace reads running, each on a thread of its own (a trace of up to 64 MiB takes a
    while, and the loop's executor is for short work). A read holds its slot until its thread
    ends: a caller that went away does not free it early."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.running = 0

    async def run(self, fn: Callable[..., T], /, *args: Any) -> T:
        self.running += 1
        job = asyncio.ensure_future(on_own_thread(fn, *args))
        job.add_done_callback(self._ended)
        return await asyncio.shield(job)

    def _ended(self, job: asyncio.Future[Any]) -> None:
        self.running -= 1
        if not job.cancelled():
            job.exception()  # retrieved: a read whose caller went away is not logged as lost


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
            found = await reads.run(read_task_trace, workdir.root, workdir.book(TRACE), checked)
        except OSError as exc:  # too large, not a regular file, a symlink: say so, never a 500
            return router.refuse(503, jsonrpc.JsonRpcError.internal_error(f"the trace cannot be read: {exc}"))
        body = {"task_id": checked, "events": found.ordered(), "truncated": found.total > MAX_EVENTS}
        # ASCII-escaped: a trace line may hold a lone surrogate (`\\ud800`), which UTF-8 cannot carry
        return Response(json.dumps(body, ensure_ascii=True, separators=(",", ":"), default=str),
                        media_type="application/json", headers={"Cache-Control": "no-store"})

    return api
