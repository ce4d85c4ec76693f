"""One HTTP POST through `wasi:http/outgoing-handler`, its response body read as it arrives.

Only world `driver-http` (or `tool-http`) bindings are imported here. Every WASI failure
becomes a `TransportError` naming the WIT `error-code` case, never a trap.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import urlsplit

from componentize_py_types import Err, Ok
from wit_world.imports import outgoing_handler, streams, types

from driverkit.errors import TransportError

_WRITE_MAX = 4096  # `blocking-write-and-flush` takes at most 4096 bytes per call
_READ_MAX = 65536
# A refused grant or a URL the host cannot route never gets better by trying again. (A reset
# connection reads as `HTTP-protocol-error` from wasmtime, so that one is retried.)
_NOT_RETRIED = ("HTTP-request-denied", "HTTP-request-URI-invalid", "DNS-error")
_ACRONYMS = {"http": "HTTP", "dns": "DNS", "tls": "TLS", "ip": "IP", "uri": "URI"}


def case_name(code: object) -> str:
    """`ErrorCode_ConnectionRefused()` -> `connection-refused` (the WIT case name)."""
    camel = type(code).__name__.split("_", 1)[-1]
    words = re.findall(r"[A-Z][a-z0-9]*", camel)
    name = "-".join(_ACRONYMS.get(w.lower(), w.lower()) for w in words)
    payload = getattr(code, "value", None)
    return f"{name} ({payload!r})" if payload is not None else name


class Response:
    """A response whose body has not been read yet; `close()` (or reading it whole) frees it."""

    def __init__(self, response: types.IncomingResponse) -> None:
        self._response = response
        self.status = response.status()
        with response.headers() as fields:
            self.headers = {name.lower(): value.decode("latin-1") for name, value in fields.entries()}

    def chunks(self) -> Iterator[bytes]:
        """The body as it arrives; a reset mid-body is a TransportError."""
        try:
            with self._response.consume() as body:
                with body.stream() as stream:
                    while True:
                        try:
                            data = stream.blocking_read(_READ_MAX)
                        except Err as exc:
                            if isinstance(exc.value, streams.StreamError_Closed):
                                return
                            reason = _stream_error(exc.value)
                            raise TransportError(f"connection failed while reading the response: {reason}") from None
                        if data:
                            yield data
        finally:
            self.close()

    def read_all(self, limit: int = 1 << 20) -> bytes:
        """The body (an error body, say), at most `limit` bytes of it."""
        parts: list[bytes] = []
        size = 0
        body = self.chunks()
        try:
            for chunk in body:
                parts.append(chunk)
                size += len(chunk)
                if size >= limit:
                    break
        finally:
            body.close()
        return b"".join(parts)[:limit]

    def close(self) -> None:
        response, self._response = self._response, None
        if response is not None:
            try:
                response.__exit__(None, None, None)
            except Exception:  # already consumed: the body owns it now
                pass


def _stream_error(error: object) -> str:
    inner = getattr(error, "value", None)
    if inner is not None:
        try:
            code = types.http_error_code(inner)
        except Exception:
            code = None
        if code is not None:
            return case_name(code)
        try:
            return inner.to_debug_string()
        except Exception:
            pass
    return type(error).__name__


def post(url: str, headers: dict[str, str], body: bytes, timeout_seconds: float) -> Response:
    """Send the request and wait for the response head (status and headers)."""
    parts = urlsplit(url)
    fields = types.Fields.from_list([(k, v.encode("utf-8")) for k, v in headers.items()])
    request = types.OutgoingRequest(fields)
    request.set_method(types.Method_Post())
    request.set_scheme(types.Scheme_Https() if parts.scheme == "https" else types.Scheme_Http())
    request.set_authority(parts.netloc)
    request.set_path_with_query((parts.path or "/") + (f"?{parts.query}" if parts.query else ""))
    outgoing_body = request.body()
    options = _options(timeout_seconds)
    try:
        future = outgoing_handler.handle(request, options)
    except Err as exc:
        raise TransportError(f"request refused: {_explained(case_name(exc.value))}", retryable=False) from None
    # A connection that failed also fails the body write; the response future then names why,
    # and a server that answered early (413, say) is heard rather than the broken write.
    _write_body(outgoing_body, body)
    with future:
        with future.subscribe() as pollable:
            pollable.block()
        outcome = future.get()
    if outcome is None or not isinstance(outcome, Ok):
        raise TransportError("the response future gave nothing")
    inner = outcome.value
    if isinstance(inner, Err):
        name = case_name(inner.value)
        raise TransportError(f"no response: {_explained(name)}", retryable=not name.startswith(_NOT_RETRIED))
    return Response(inner.value)  # a server that answered before reading it all still says why


def _explained(case: str) -> str:
    if case.startswith("HTTP-request-denied"):
        return f"{case}: the capsule's capabilities.network.allow must name the inference endpoint"
    return case


def _options(timeout_seconds: float) -> types.RequestOptions:
    """Connect within 30 s; then no gap of more than `timeout_seconds` before or between bytes."""
    options = types.RequestOptions()
    for setter, seconds in ((options.set_connect_timeout, min(30.0, timeout_seconds)),
                            (options.set_first_byte_timeout, timeout_seconds),
                            (options.set_between_bytes_timeout, timeout_seconds)):
        try:
            setter(int(seconds * 1_000_000_000))
        except Err:
            pass  # a host that does not support the timeout keeps its own
    return options


def _write_body(outgoing_body: types.OutgoingBody, body: bytes) -> None:
    """Send the body and finish it. A failure is left to the response future to explain."""
    try:
        with outgoing_body.write() as stream:
            for start in range(0, len(body), _WRITE_MAX):
                stream.blocking_write_and_flush(body[start : start + _WRITE_MAX])
    except Err:
        outgoing_body.__exit__(None, None, None)
        return
    try:
        types.OutgoingBody.finish(outgoing_body, None)
    except Err:
        pass
