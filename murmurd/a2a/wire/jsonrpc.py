"""JSON-RPC 2.0 framing for `POST /` (runtime-notes §6): parse a body, answer, run a batch.

Pure logic, no transport. The server reads the body (enforcing its size cap, see
`JsonRpcError.request_too_large`), calls `parse_body`, and hands the result to `run` together
with an async handler for single requests. Whatever the body holds, these functions return a
response (or nothing, for notifications) and never raise anything but `JsonRpcError` from
`parse_body`; `handle_body` never raises at all.

Rules:
- invalid JSON (bad syntax, not UTF-8, NaN/Infinity, a number too large for a float, nesting
  too deep for the parser) -> -32700, id null;
- a body that is neither an object nor an array, or an empty array -> -32600, id null;
- an entry that is not a valid request object (`jsonrpc` not exactly "2.0", `method` not a
  string, `params` neither object nor array, `id` not a string/integer/null, `id` or `method`
  text that is not valid Unicode, e.g. a lone surrogate) -> -32600 for that entry, echoing its id
  when the id itself is valid (an id that cannot be encoded is answered as null);
- a request without an `id` member is a notification: it is run but gets no response entry, and
  a batch of only notifications produces no body at all (the server answers 204/empty 200).
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, StrictInt, StrictStr, ValidationError

from murmurd.a2a.wire.problems import describe, summary
from murmurd.text import json_text

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
TASK_NOT_FOUND = -32001
TASK_NOT_CANCELABLE = -32002
PUSH_NOTIFICATION_NOT_SUPPORTED = -32003
UNSUPPORTED_OPERATION = -32004
EXTENDED_CARD_NOT_CONFIGURED = -32007
SERVER_LIMIT = -32000  # implementation-defined server error: a capacity limit of this server

RequestId = str | int | None
Response = dict[str, Any]


class JsonRpcError(Exception):
    """A JSON-RPC error object; raise it anywhere below the router to answer with it."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_json(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error

    def __repr__(self) -> str:
        return f"JsonRpcError({self.code}, {self.message!r}, data={self.data!r})"

    # The error shapes the daemon uses, in one place so their messages stay consistent.
    @classmethod
    def parse_error(cls, detail: str) -> JsonRpcError:
        return cls(PARSE_ERROR, f"Parse error: {detail}")

    @classmethod
    def invalid_request(cls, detail: str, data: Any = None) -> JsonRpcError:
        return cls(INVALID_REQUEST, f"Invalid request: {detail}", data)

    @classmethod
    def request_too_large(cls, limit_bytes: int) -> JsonRpcError:
        return cls(INVALID_REQUEST, f"Invalid request: body exceeds {limit_bytes} bytes",
                   {"limit_bytes": limit_bytes})

    @classmethod
    def method_not_found(cls, method: str) -> JsonRpcError:
        return cls(METHOD_NOT_FOUND, f"Method not found: {_clip(method)}")

    @classmethod
    def invalid_params(cls, detail: str, data: Any = None) -> JsonRpcError:
        return cls(INVALID_PARAMS, f"Invalid params: {detail}", data)

    @classmethod
    def internal_error(cls, detail: str = "the request could not be completed") -> JsonRpcError:
        return cls(INTERNAL_ERROR, f"Internal error: {detail}")

    @classmethod
    def task_not_found(cls, task_id: str) -> JsonRpcError:
        return cls(TASK_NOT_FOUND, f"Task not found: {_clip(task_id)}", {"id": task_id})

    @classmethod
    def task_not_cancelable(cls, task_id: str, state: str) -> JsonRpcError:
        return cls(TASK_NOT_CANCELABLE, f"Task cannot be canceled: {_clip(task_id)} is {state}",
                   {"id": task_id, "state": state})

    @classmethod
    def server_limit(cls, detail: str, data: dict[str, Any]) -> JsonRpcError:
        """A request refused for the server's capacity, not for anything wrong in it; `data`
        names the limit (`{"limit_streams": 128}`), so a client knows what to wait for."""
        return cls(SERVER_LIMIT, f"Server limit reached: {detail}", data)

    @classmethod
    def response_too_large(cls, limit_bytes: int, *, carried_out: bool) -> JsonRpcError:
        done = ("the request was carried out; ask for it alone to read its answer" if carried_out
                else "the request was not carried out; send it again in a smaller batch")
        return cls.server_limit(f"the batch's answers pass {limit_bytes} bytes; {done}",
                                {"limit_response_bytes": limit_bytes, "carried_out": carried_out})

    @classmethod
    def unsupported_operation(cls, detail: str) -> JsonRpcError:
        return cls(UNSUPPORTED_OPERATION, f"Unsupported operation: {detail}")

    @classmethod
    def push_notification_not_supported(cls) -> JsonRpcError:
        return cls(PUSH_NOTIFICATION_NOT_SUPPORTED, "Push Notification is not supported: the agent card says "
                   "pushNotifications: false")

    @classmethod
    def extended_card_not_configured(cls) -> JsonRpcError:
        """A2A 0.3's AuthenticatedExtendedCardNotConfiguredError."""
        return cls(EXTENDED_CARD_NOT_CONFIGURED, "Authenticated Extended Card is not configured")


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


class JsonRpcRequest(BaseModel):
    """One request object. `is_notification` is True when the `id` member is absent."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    jsonrpc: Literal["2.0"]
    method: StrictStr
    params: dict[str, Any] | list[Any] | None = None
    id: StrictStr | StrictInt | None = None

    @property
    def is_notification(self) -> bool:
        return "id" not in self.model_fields_set


@dataclass(frozen=True)
class InvalidEntry:
    """A body entry that is not a valid request: answered with `error`, never dispatched."""

    id: RequestId
    error: JsonRpcError


Entry = JsonRpcRequest | InvalidEntry


@dataclass(frozen=True)
class ParsedBody:
    entries: tuple[Entry, ...]
    is_batch: bool


def result_response(id: RequestId, result: Any) -> Response:
    return {"jsonrpc": "2.0", "id": id, "result": result}


def error_response(id: RequestId, error: JsonRpcError) -> Response:
    return {"jsonrpc": "2.0", "id": id, "error": error.to_json()}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(literal: str) -> float:
    """A JSON number as a float; `1e400` would become infinity, which no JSON answer can echo."""
    value = float(literal)
    if math.isinf(value):
        raise ValueError(f"number out of range: {_clip(literal, 40)}")
    return value


def encodable(text: str) -> bool:
    """True when `text` is valid Unicode (JSON's `\\ud800` escape yields a lone surrogate, which
    no UTF-8 answer, file or database can hold)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def decode_json(body: bytes | str) -> Any:
    """The body as JSON, or JsonRpcError(-32700)."""
    try:
        text = body.decode("utf-8") if isinstance(body, bytes | bytearray) else body
        return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except UnicodeDecodeError:
        raise JsonRpcError.parse_error("body is not UTF-8") from None
    except RecursionError:
        raise JsonRpcError.parse_error("JSON nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, NaN/Infinity, over-long integer literals
        raise JsonRpcError.parse_error(_clip(str(exc))) from None


def _valid_id(value: Any) -> RequestId:
    """The entry's id if it is a legal one to echo, else null."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    if isinstance(value, str) and not encodable(value):
        return None
    return value


def _describe(exc: ValidationError) -> str:
    problems = describe(exc.errors(include_url=False), limit=5)
    return summary([{**p, "field": "request" if p["field"] == "params" else p["field"]} for p in problems], 5)


def parse_entry(raw: Any) -> Entry:
    """One request object (an element of a batch, or the whole body)."""
    if not isinstance(raw, dict):
        return InvalidEntry(None, JsonRpcError.invalid_request("a request must be a JSON object"))
    request_id = _valid_id(raw.get("id"))
    if raw.get("jsonrpc") != "2.0":
        return InvalidEntry(request_id, JsonRpcError.invalid_request('"jsonrpc" must be exactly "2.0"'))
    if not isinstance(raw.get("method"), str):
        return InvalidEntry(request_id, JsonRpcError.invalid_request('"method" must be a string'))
    if not encodable(raw["method"]):
        return InvalidEntry(request_id, JsonRpcError.invalid_request('"method" is not valid Unicode'))
    if isinstance(raw.get("id"), str) and request_id is None:
        return InvalidEntry(None, JsonRpcError.invalid_request('"id" is not valid Unicode'))
    try:
        return JsonRpcRequest.model_validate(raw)
    except ValidationError as exc:
        return InvalidEntry(request_id, JsonRpcError.invalid_request(_describe(exc)))


def parse_body(body: bytes | str, max_batch: int | None = None) -> ParsedBody:
    """A request body as one request or a batch; raises JsonRpcError for a body that cannot be
    answered entry by entry (-32700 bad JSON, -32600 not an object/array, empty or oversized
    batch). Entries that are themselves invalid come back as `InvalidEntry`."""
    data = decode_json(body)
    if isinstance(data, dict):
        return ParsedBody((parse_entry(data),), is_batch=False)
    if isinstance(data, list):
        if not data:
            raise JsonRpcError.invalid_request("empty batch")
        if max_batch is not None and len(data) > max_batch:
            raise JsonRpcError.invalid_request(f"batch of {len(data)} requests exceeds {max_batch}",
                                               {"limit_requests": max_batch})
        return ParsedBody(tuple(parse_entry(item) for item in data), is_batch=True)
    raise JsonRpcError.invalid_request("the body must be a JSON object or array")


Handler = Callable[[JsonRpcRequest], Awaitable[Response | None]]


async def run_entry(entry: Entry, handle: Handler) -> Response | None:
    """The response to one entry: the handler's, an error response for a JsonRpcError it raised,
    -32603 for anything else it raised; None for notifications whatever happened."""
    if isinstance(entry, InvalidEntry):
        return error_response(entry.id, entry.error)
    try:
        response = await handle(entry)
    except JsonRpcError as exc:
        response = error_response(entry.id, exc)
    except Exception:  # a handler bug must never become a 500
        response = error_response(entry.id, JsonRpcError.internal_error())
    return None if entry.is_notification else response


async def run(parsed: ParsedBody, handle: Handler,
              max_response_bytes: int | None = None) -> Response | list[Response] | None:
    """Run every entry in order. A single request yields its response (None for a notification);
    a batch yields the list of non-empty responses, or None when every entry was a notification.

    A batch's answers stop at `max_response_bytes` (encoded): the entry whose answer would pass
    it gets an error instead (it did run), and the entries after it are answered with an error
    without being run, so a small batch cannot make a huge response. The first answer is always
    given whole, as it would be to the request sent alone."""
    if not parsed.is_batch:
        responses = [r for r in [await run_entry(e, handle) for e in parsed.entries] if r is not None]
        return responses[0] if responses else None
    batch: list[Response] = []
    size, over = 0, False
    for entry in parsed.entries:
        if over:
            if not (isinstance(entry, JsonRpcRequest) and entry.is_notification):
                batch.append(error_response(entry.id, JsonRpcError.response_too_large(max_response_bytes or 0,
                                                                                      carried_out=False)))
            continue
        response = await run_entry(entry, handle)
        if response is None:
            continue
        if max_response_bytes is not None:
            cost = encoded_size(response)
            if batch and size + cost > max_response_bytes:
                over = True
                response = error_response(response["id"], JsonRpcError.response_too_large(max_response_bytes,
                                                                                          carried_out=True))
            size += cost
        batch.append(response)
    return batch or None


def encoded_size(response: Response) -> int:
    """Bytes of the response as the server sends it (compact JSON, UTF-8)."""
    return len(json_text(response).encode("utf-8"))


async def handle_body(body: bytes | str, handle: Handler, max_batch: int | None = None,
                      max_response_bytes: int | None = None) -> Response | list[Response] | None:
    """`parse_body` + `run`, with body-level errors turned into their id-null error response."""
    try:
        parsed = parse_body(body, max_batch=max_batch)
    except JsonRpcError as exc:
        return error_response(None, exc)
    return await run(parsed, handle, max_response_bytes)
