"""Provider stand-ins on loopback: real HTTP servers speaking the Anthropic and OpenAI wire formats.

Every request body is validated against the official SDK's own request type (a `TypedDict` read by
pydantic, with unknown top-level fields refused, as the Anthropic API refuses them), and every
streamed event is built as a dict, validated into the SDK's own stream-event model and serialised
from it, so a stand-in cannot drift from the API the SDK describes. A request that fails
validation is answered 400 with the API's error shape and recorded in `problems`.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError


# --------------------------------------------------------------------------- replies


@dataclass(frozen=True)
class Stream:
    """A 200 `text/event-stream` of (event name or None, data) pairs, sent one write per event."""

    events: list[tuple[str | None, str]]


@dataclass(frozen=True)
class Status:
    """A non-streamed answer: an error status with the API's JSON error body, say."""

    code: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


Reply = Stream | Status


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float = field(default_factory=time.monotonic)


class StandIn:
    """One server; `replies` are served in order, the last one again once they run out."""

    def __init__(self, path: str, validate: Callable[[dict[str, Any]], None]) -> None:
        self.path = path
        self.validate = validate
        self.replies: list[Reply] = []
        self.requests: list[Seen] = []
        self.problems: list[str] = []
        self.lock = threading.Lock()
        self.server = _Server(self)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def bodies(self) -> list[dict[str, Any]]:
        with self.lock:
            return [seen.body for seen in self.requests]

    def next_reply(self, seen: Seen) -> Reply:
        with self.lock:
            index = len(self.requests)
            self.requests.append(seen)
            return self.replies[min(index, len(self.replies) - 1)]


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, standin: StandIn) -> None:
        self.standin = standin
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        standin: StandIn = self.server.standin  # type: ignore[attr-defined]
        raw = self._body()
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            body = json.loads(raw)
        except ValueError as exc:
            body = {"unparsable": raw.decode("utf-8", "replace")[:200]}
            self._record_problem(standin, f"body is not JSON: {exc}")
        seen = Seen(self.path, headers, body)
        reply = standin.next_reply(seen)
        problem = None
        if self.path != standin.path:
            problem = f"POST {self.path}, expected {standin.path}"
        elif "unparsable" not in body:
            try:
                standin.validate(body)
            except (ValidationError, ValueError) as exc:
                problem = str(exc)
        if problem is not None:
            self._record_problem(standin, problem)
            reply = Status(400, {"type": "error", "error": {"type": "invalid_request_error", "message": problem[:500]}})
        self._send(reply)

    def _record_problem(self, standin: StandIn, problem: str) -> None:
        with standin.lock:
            standin.problems.append(problem)

    def _body(self) -> bytes:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("content-length") or 0))

    def _send(self, reply: Reply) -> None:
        if isinstance(reply, Status):
            payload = (reply.body if isinstance(reply.body, str) else json.dumps(reply.body)).encode()
            self.send_response(reply.code)
            self.send_header("content-type", "application/json")
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.end_headers()
        for name, data in reply.events:
            frame = (f"event: {name}\n" if name else "") + f"data: {data}\n\n"
            self.wfile.write(frame.encode())
            self.wfile.flush()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet
        pass


@contextmanager
def serving(path: str, validate: Callable[[dict[str, Any]], None]) -> Iterator[StandIn]:
    standin = StandIn(path, validate)
    standin.thread.start()
    try:
        yield standin
    finally:
        standin.server.shutdown()
        standin.server.server_close()
        standin.thread.join(5)


def strict_validator(params_type: Any) -> Callable[[dict[str, Any]], None]:
    """Validate a body against an SDK params TypedDict, refusing top-level fields it does not define."""

    class Strict(BaseModel):
        model_config = ConfigDict(extra="forbid")
        body: params_type  # type: ignore[valid-type]

    def validate(body: dict[str, Any]) -> None:
        Strict(body=body)

    return validate


def sdk_event(adapter: TypeAdapter, data: dict[str, Any]) -> str:
    """`data` validated into the SDK's model and serialised from it (fields never set stay out)."""
    model = adapter.validate_python(data)
    return model.model_dump_json(exclude_unset=True)


# --------------------------------------------------------------------------- Anthropic


def anthropic_standin() -> Any:
    from anthropic.types.message_create_params import MessageCreateParamsStreaming

    return serving("/v1/messages", strict_validator(MessageCreateParamsStreaming))


def anthropic_stream(content: list[dict[str, Any]], stop_reason: str, usage: dict[str, Any],
                     output_tokens: int = 9, model: str = "claude-test") -> Stream:
    """A Messages API stream answering `content` ({"type": "text"|"tool_use"|"thinking", ...}),
    every text, thinking and tool input split over two deltas as the API splits them."""
    from anthropic.types import RawMessageStreamEvent

    adapter = TypeAdapter(RawMessageStreamEvent)
    events: list[dict[str, Any]] = [{
        "type": "message_start",
        "message": {"id": "msg_standin", "type": "message", "role": "assistant", "model": model, "content": [],
                    "stop_reason": None, "stop_sequence": None, "usage": {"output_tokens": 1, **usage}},
    }]
    for index, block in enumerate(content):
        kind = block["type"]
        if kind == "text":
            start, deltas = {"type": "text", "text": ""}, [{"type": "text_delta", "text": t} for t in _halves(block["text"])]
        elif kind == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": t} for t in _halves(block["thinking"])]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        elif kind == "tool_use":
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": t} for t in _halves(json.dumps(block["input"]))]
        else:
            raise ValueError(kind)
        events.append({"type": "content_block_start", "index": index, "content_block": start})
        events.extend({"type": "content_block_delta", "index": index, "delta": d} for d in deltas)
        events.append({"type": "content_block_stop", "index": index})
    events.append({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                   "usage": {"output_tokens": output_tokens}})
    events.append({"type": "message_stop"})
    wire = [(e["type"], sdk_event(adapter, e)) for e in events]
    wire.insert(1, ("ping", json.dumps({"type": "ping"})))
    return Stream(wire)


def anthropic_error(code: int, kind: str, message: str, headers: dict[str, str] | None = None) -> Status:
    from anthropic.types import ErrorResponse

    body = ErrorResponse.model_validate({"type": "error", "error": {"type": kind, "message": message}})
    return Status(code, body.model_dump(mode="json", exclude_unset=True), headers or {})


def _halves(text: str) -> list[str]:
    cut = max(1, len(text) // 2)
    return [p for p in (text[:cut], text[cut:]) if p]
