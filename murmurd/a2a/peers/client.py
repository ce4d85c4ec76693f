"""Client commands: `murmurd send` and `murmurd watch`, speaking the upstream dialect.

`token` (from `--token-file`, $MURMUR_TOKEN_FILE or $MURMUR_TOKEN) is sent as a bearer token."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
from httpx_sse import ServerSentEvent, connect_sse

from murmurd.terminal import safe, safe_text

Write = Callable[[str], None]


class ClientError(RuntimeError):
    """The peer could not be reached, or answered with a JSON-RPC error; the message says which."""


def _request(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": secrets.token_hex(4), "method": method, "params": params}


def _message(text: str, context_id: str | None, task_id: str | None) -> dict[str, Any]:
    message: dict[str, Any] = {"messageId": "msg_" + secrets.token_hex(16), "role": "user", "parts": [{"text": text}]}
    if context_id:
        message["contextId"] = context_id
    if task_id:
        message["taskId"] = task_id
    return message


def _auth(token: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"} if token else {}


def _unwrap(url: str, response: httpx.Response) -> Any:
    try:
        payload = response.json()
    except ValueError:
        raise ClientError(f"{url}: HTTP {response.status_code}, not a JSON-RPC response") from None
    if isinstance(payload, dict) and payload.get("error"):
        error = payload["error"]
        raise ClientError(f"{url}: JSON-RPC error {safe(error.get('code'))}: {safe(error.get('message'))}")
    return payload.get("result") if isinstance(payload, dict) else payload


def send(url: str, text: str, *, context_id: str | None = None, task_id: str | None = None, timeout: float = 30,
         token: str | None = None) -> Any:
    """`message/send`; returns the task JSON."""
    try:
        response = httpx.post(url, json=_request("message/send", {"message": _message(text, context_id, task_id)}),
                              timeout=timeout, headers=_auth(token))
    except httpx.HTTPError as exc:
        raise ClientError(f"{url}: unreachable ({type(exc).__name__}: {exc})") from None
    return _unwrap(url, response)


@dataclass
class Rendered:
    text: str
    final_state: str | None = None


def render_frame(event: ServerSentEvent) -> Rendered:
    """One upstream SSE frame as terminal text: chunks as they came, tools and statuses as lines.
    Everything in a frame is a component's or a peer's text: escaped (`murmurd.terminal`)."""
    try:
        data = json.loads(event.data) if event.data else {}
    except ValueError:
        return Rendered(f"[{safe(event.event)}] {safe(event.data)}\n")
    if not isinstance(data, dict):
        return Rendered(f"[{safe(event.event)}] {safe(event.data)}\n")
    if event.event == "text":
        return Rendered(safe_text(data.get("text", "")) + ("\n" if data.get("final") else ""))
    if event.event == "thinking":
        return Rendered("")
    if event.event == "artifact":
        artifact = data.get("artifact", {})
        content = artifact.get("content")
        shown = content if isinstance(content, str) else json.dumps(content)
        return Rendered(f"\n[{safe(artifact.get('tool_name'))}] {safe_text(shown.strip()[:300])}\n")
    if event.event == "status":
        status = data.get("status", {})
        state, message = status.get("state"), status.get("message")
        line = f"[{safe(data.get('id'))}] {safe(state)}"
        if message and state != "completed":
            # one prefix: a refusal's message already reads "rejected: ..."
            shown = message.removeprefix(f"{state}: ") if isinstance(message, str) else message
            line += f": {safe(shown)}"
        final = state if data.get("final") else None
        return Rendered(line + "\n", final if isinstance(final, str) else None)
    if event.event == "gap":
        return Rendered(f"[gap: events before {safe(data.get('first_available_id'))} were dropped]\n")
    return Rendered(f"[{safe(event.event)}] {safe(event.data)}\n")


def _frames(url: str, method: str, params: dict[str, Any], timeout: float,
            token: str | None) -> Iterator[ServerSentEvent]:
    try:
        with httpx.Client(timeout=httpx.Timeout(timeout, read=None), headers=_auth(token)) as client:
            with connect_sse(client, "POST", url, json=_request(method, params)) as source:
                if "text/event-stream" not in source.response.headers.get("content-type", ""):
                    source.response.read()
                    _unwrap(url, source.response)
                    raise ClientError(f"{url}: expected an event stream")
                yield from source.iter_sse()
    except httpx.HTTPError as exc:
        raise ClientError(f"{url}: unreachable ({type(exc).__name__}: {exc})") from None


def stream(url: str, text: str, write: Write, *, context_id: str | None = None, task_id: str | None = None,
           timeout: float = 30, token: str | None = None) -> str | None:
    """`message/stream`: write chunks live; return the final state."""
    final = None
    for event in _frames(url, "message/stream", {"message": _message(text, context_id, task_id)}, timeout, token):
        rendered = render_frame(event)
        write(rendered.text)
        final = rendered.final_state or final
    return final


def watch(url: str, write: Write, *, timeout: float = 30, token: str | None = None) -> None:
    """`stream/watch`: render the capsule's live stream until it closes."""
    for event in _frames(url, "stream/watch", {}, timeout, token):
        write(render_frame(event).text)
