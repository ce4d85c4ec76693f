"""Provider stand-ins on loopback: real HTTP servers speaking the Anthropic and OpenAI wire formats.

Every request body is validated against the official SDK's own request type (a `TypedDict` read by
pydantic, with unknown fields refused at any depth, as the Anthropic API refuses them), and every
streamed event is built as a dict, validated into the SDK's own stream-event model and serialised
from it, so a stand-in cannot drift from the API the SDK describes. A request that fails
validation is answered 400 with the API's error shape and recorded in `problems`.
"""

from __future__ import annotations

import collections.abc
import http.server
import json
import socket
import struct
import threading
import time
import types
import typing
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import typing_extensions
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


@dataclass(frozen=True)
class Reset:
    """Read the request, then reset the connection (RST) without a response."""


@dataclass(frozen=True)
class Stall:
    """Read the request, then send nothing for `seconds`."""

    seconds: float


Reply = Stream | Status | Reset | Stall


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
        if isinstance(reply, Reset):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
            return
        if isinstance(reply, Stall):
            time.sleep(reply.seconds)
            self.close_connection = True
            return
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
    """Validate a body against an SDK params TypedDict: pydantic checks types and required fields,
    and `unknown_fields` refuses any field, at any depth, that the type does not define."""

    class Strict(BaseModel):
        model_config = ConfigDict(extra="forbid")
        body: params_type  # type: ignore[valid-type]

    def validate(body: dict[str, Any]) -> None:
        Strict(body=body)
        unknown = unknown_fields(body, params_type, "body")
        if unknown:
            raise ValueError(f"fields the API does not define: {', '.join(unknown)}")

    return validate


_WRAPPERS = {typing.Required, typing.NotRequired, typing.Annotated, typing_extensions.Required,
             typing_extensions.NotRequired, typing_extensions.Annotated, typing_extensions.ReadOnly}
_SEQUENCES = {list, collections.abc.Iterable, collections.abc.Sequence}


def unknown_fields(value: Any, tp: Any, path: str) -> list[str]:
    """The paths of dict keys no TypedDict along `tp` defines. In a union the best-fitting member
    counts (a block's `type` literal picks it), and a free-form `Dict[str, object]` member (a
    JSON Schema, say) accepts anything."""
    while typing.get_origin(tp) in _WRAPPERS:
        tp = typing.get_args(tp)[0]
    if typing_extensions.is_typeddict(tp):
        if not isinstance(value, dict):
            return []
        hints = typing.get_type_hints(tp, include_extras=True)
        found = [f"{path}.{key}" for key in value if key not in hints]
        for key, item in value.items():
            if key in hints:
                found += unknown_fields(item, hints[key], f"{path}.{key}")
        return found
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        fits = [unknown_fields(value, member, path) for member in typing.get_args(tp) if _fits(value, member)]
        return min(fits, key=len) if fits else []
    if origin in _SEQUENCES and isinstance(value, list):
        (item_type,) = typing.get_args(tp) or (Any,)
        return [p for i, item in enumerate(value) for p in unknown_fields(item, item_type, f"{path}[{i}]")]
    return []


def _fits(value: Any, tp: Any) -> bool:
    while typing.get_origin(tp) in _WRAPPERS:
        tp = typing.get_args(tp)[0]
    if typing_extensions.is_typeddict(tp):
        if not isinstance(value, dict):
            return False
        kind = typing.get_type_hints(tp, include_extras=True).get("type")
        while typing.get_origin(kind) in _WRAPPERS:
            kind = typing.get_args(kind)[0]
        return "type" not in value or typing.get_origin(kind) is not typing.Literal or value["type"] in typing.get_args(kind)
    origin = typing.get_origin(tp)
    if origin in (dict, collections.abc.Mapping) or tp is dict:
        return isinstance(value, dict)
    if origin in _SEQUENCES:
        return isinstance(value, list)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, member) for member in typing.get_args(tp))
    return not isinstance(value, (dict, list))


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


# --------------------------------------------------------------------------- OpenAI Chat Completions


def chat_standin() -> Any:
    from openai.types.chat.completion_create_params import CompletionCreateParamsStreaming

    return serving("/v1/chat/completions", strict_validator(CompletionCreateParamsStreaming))


def chat_stream(*, text: str = "", tool_calls: list[dict[str, Any]] = (), finish_reason: str = "stop",
                usage: dict[str, Any] | None = None, reasoning: str = "", done: bool = True) -> Stream:
    """A Chat Completions chunk stream: the role, reasoning (as vLLM streams `reasoning_content`),
    text and each tool call's arguments over two chunks, the finish, then a usage chunk."""
    from openai.types.chat import ChatCompletionChunk

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> str:
        data = {"id": "chatcmpl-standin", "object": "chat.completion.chunk", "created": 1700000000,
                "model": "standin-model", "choices": choices, **extra}
        return ChatCompletionChunk.model_validate(data).model_dump_json(exclude_unset=True)

    def delta(d: dict[str, Any], finish: str | None = None) -> list[dict[str, Any]]:
        return [{"index": 0, "delta": d, "finish_reason": finish}]

    wire = [chunk(delta({"role": "assistant", "content": ""}))]
    wire += [chunk(delta({"reasoning_content": t})) for t in _halves(reasoning)] if reasoning else []
    wire += [chunk(delta({"content": t})) for t in _halves(text)] if text else []
    for index, call in enumerate(tool_calls):
        wire.append(chunk(delta({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                                 "function": {"name": call["name"], "arguments": ""}}]})))
        wire += [chunk(delta({"tool_calls": [{"index": index, "function": {"arguments": t}}]}))
                 for t in _halves(json.dumps(call["input"]))]
    wire.append(chunk(delta({}, finish_reason)))
    if usage is not None:
        wire.append(chunk([], usage=usage))
    if done:
        wire.append("[DONE]")
    return Stream([(None, data) for data in wire])


def openai_error(code: int, message: str, kind: str, headers: dict[str, str] | None = None) -> Status:
    from openai.types import ErrorObject

    error = ErrorObject.model_validate({"message": message, "type": kind, "param": None, "code": None})
    return Status(code, {"error": error.model_dump(mode="json", exclude_unset=True)}, headers or {})


# --------------------------------------------------------------------------- OpenAI Responses


def responses_standin() -> Any:
    from openai.types.responses.response_create_params import ResponseCreateParamsStreaming

    return serving("/v1/responses", strict_validator(ResponseCreateParamsStreaming))


def responses_stream(response_id: str, *, text: str = "", tool_calls: list[dict[str, Any]] = (),
                     usage: dict[str, Any] | None = None, reasoning: str = "", status: str = "completed",
                     incomplete_reason: str | None = None) -> Stream:
    """A Responses API event stream: created, reasoning summary and text deltas, function-call
    argument deltas, then the terminal event carrying the whole response (output and usage)."""
    from openai.types.responses import ResponseStreamEvent

    adapter = TypeAdapter(ResponseStreamEvent)
    output: list[dict[str, Any]] = []
    if text:
        output.append({"type": "message", "id": "msg_standin", "role": "assistant", "status": "completed",
                       "content": [{"type": "output_text", "text": text, "annotations": []}]})
    output += [{"type": "function_call", "id": f"fc_{c['id']}", "call_id": c["id"], "name": c["name"],
                "arguments": json.dumps(c["input"]), "status": "completed"} for c in tool_calls]

    def response(state: str, items: list[dict[str, Any]]) -> dict[str, Any]:
        body = {"id": response_id, "object": "response", "created_at": 1700000000, "model": "standin-model",
                "output": items, "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "status": state,
                "error": None, "incomplete_details": None}
        if state == "incomplete":
            body["incomplete_details"] = {"reason": incomplete_reason}
        if usage is not None and state != "in_progress":
            body["usage"] = usage
        return body

    events: list[dict[str, Any]] = [{"type": "response.created", "response": response("in_progress", [])}]
    events += [{"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "output_index": 0,
                "summary_index": 0, "delta": t} for t in _halves(reasoning)] if reasoning else []
    events += [{"type": "response.output_text.delta", "item_id": "msg_standin", "output_index": 0,
                "content_index": 0, "delta": t, "logprobs": []} for t in _halves(text)] if text else []
    for index, call in enumerate(tool_calls):
        events += [{"type": "response.function_call_arguments.delta", "item_id": f"fc_{call['id']}",
                    "output_index": index + 1, "delta": t} for t in _halves(json.dumps(call["input"]))]
    terminal = {"completed": "response.completed", "incomplete": "response.incomplete", "failed": "response.failed"}
    events.append({"type": terminal[status], "response": response(status, output)})
    wire = []
    for number, event in enumerate(events):
        event["sequence_number"] = number
        wire.append((event["type"], sdk_event(adapter, event)))
    return Stream(wire)


def responses_usage(input_tokens: int, output_tokens: int, cached: int) -> dict[str, Any]:
    from openai.types.responses import ResponseUsage

    usage = {"input_tokens": input_tokens, "output_tokens": output_tokens, "total_tokens": input_tokens + output_tokens,
             "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
             "output_tokens_details": {"reasoning_tokens": 0}}
    return ResponseUsage.model_validate(usage).model_dump(mode="json", exclude_unset=True)
