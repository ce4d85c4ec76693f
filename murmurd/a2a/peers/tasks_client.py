"""The daemon's tasks as a terminal client sees them: list, get, reply, cancel (JSON-RPC), and a
task's upstream event stream as plain dicts. `murmurd tasks`, `reply`, `cancel`, `send` and
`chat` call these; the A2A 1.0 methods are used where only they exist (`ListTasks`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx

from murmurd.a2a.peers.client import ClientError, _auth, _frames, _message, _request, _unwrap

TIMEOUT = 30.0


def _call(url: str, method: str, params: dict[str, Any], token: str | None) -> Any:
    try:
        response = httpx.post(url, json=_request(method, params), timeout=TIMEOUT, headers=_auth(token))
    except httpx.HTTPError as exc:
        raise ClientError(f"{url}: unreachable ({type(exc).__name__}: {exc})") from None
    return _unwrap(url, response)


def list_tasks(url: str, token: str | None, *, state: str | None = None, context_id: str | None = None,
               page_size: int = 100) -> list[dict[str, Any]]:
    """The tasks this credential may see, newest first (A2A 1.0 `ListTasks`)."""
    params: dict[str, Any] = {"pageSize": page_size}
    if context_id:
        params["contextId"] = context_id
    if state:
        params["status"] = "TASK_STATE_" + state.upper().replace("-", "_")
    result = _call(url, "ListTasks", params, token)
    return list(result.get("tasks") or []) if isinstance(result, dict) else []


def get_task(url: str, task_id: str, token: str | None) -> dict[str, Any]:
    """One task in full: history, status, artifacts (A2A 1.0 `GetTask`)."""
    return _call(url, "GetTask", {"id": task_id}, token)


def reply(url: str, task_id: str, text: str, token: str | None) -> dict[str, Any]:
    """Answer a task that waits in `input-required` (a message on the same task)."""
    return _call(url, "message/send", {"message": _message(text, None, task_id)}, token)


def cancel(url: str, task_id: str, token: str | None) -> dict[str, Any]:
    return _call(url, "tasks/cancel", {"id": task_id}, token)


@dataclass(frozen=True)
class Frame:
    """One upstream SSE frame: `text` (a chunk), `thinking`, `artifact` (a tool's result),
    `status` (state changes; `final` on the last), `gap`."""

    kind: str
    data: dict[str, Any]

    @property
    def state(self) -> str | None:
        status = self.data.get("status") if self.kind == "status" else None
        return status.get("state") if isinstance(status, dict) else None


def message_frames(url: str, text: str, token: str | None, *, context_id: str | None = None,
                   task_id: str | None = None) -> Iterator[Frame]:
    """`message/stream`: the frames of the task it starts (or answers), heartbeats left out."""
    params = {"message": _message(text, context_id, task_id)}
    for event in _frames(url, "message/stream", params, TIMEOUT, token):
        if not event.data:
            continue  # a heartbeat comment
        try:
            data = json.loads(event.data)
        except ValueError:
            continue
        if isinstance(data, dict):
            yield Frame(event.event, data)
