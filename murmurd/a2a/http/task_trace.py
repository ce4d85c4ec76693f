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
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

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
_SESSION_ID = re.compile(r"ses_[0-9a-f]{32}")


def task_lines(lines: Iterable[str], task_id: str) -> list[dict[str, Any]]:
    """The events of one trace that belong to `task_id` (pure; a line that is not a JSON
    object is skipped, a trace being written may end mid-line)."""
    found: list[dict[str, Any]] = []
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
            found.append(event)
            if event.get("event_type") == "task_start":
                inside = True
            elif event.get("event_type") == "task_end":
                inside = False
        elif owner is None and inside:
            found.append(event)
    return found


def _read_lines(root: Path, rel: str) -> list[str]:
    try:
        return workdir_fs.read_text(root, rel, max_bytes=MAX_TRACE_BYTES, errors="replace").splitlines()
    except FileNotFoundError:
        return []


def read_task_trace(daemon_root: Path, daemon_rel: str, task_id: str) -> list[dict[str, Any]]:
    """The task's events from the daemon's trace and its own session's (blocking: a thread)."""
    events = task_lines(_read_lines(daemon_root, daemon_rel), task_id)
    sessions = {e.get("task_session_id") for e in events if e.get("event_type") == "a2a_task_session"}
    for session in sorted(s for s in sessions if isinstance(s, str) and _SESSION_ID.fullmatch(s)):
        if session != daemon_root.name:
            events += task_lines(_read_lines(daemon_root.parent, f"{session}/{TRACE}"), task_id)
    return events


def routes(router: RouteHost) -> APIRouter:
    """`GET /tasks/{task_id}/trace`, served by `router`."""
    api = APIRouter()

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
        workdir = router.daemon.staged.workdir
        try:
            # its own thread: a trace of up to 64 MiB takes a while, and the loop's executor is for
            # short work (an operator's reads, as many as their connections)
            events = await on_own_thread(read_task_trace, workdir.root, workdir.book(TRACE), checked)
        except OSError as exc:  # too large, not a regular file, a symlink: say so, never a 500
            return router.refuse(503, jsonrpc.JsonRpcError.internal_error(f"the trace cannot be read: {exc}"))
        events.sort(key=lambda e: e.get("timestamp") if isinstance(e.get("timestamp"), int) else 0)
        body = {"task_id": checked, "events": events[-MAX_EVENTS:], "truncated": len(events) > MAX_EVENTS}
        # ASCII-escaped: a trace line may hold a lone surrogate (`\\ud800`), which UTF-8 cannot carry
        return Response(json.dumps(body, ensure_ascii=True, separators=(",", ":"), default=str),
                        media_type="application/json", headers={"Cache-Control": "no-store"})

    return api
