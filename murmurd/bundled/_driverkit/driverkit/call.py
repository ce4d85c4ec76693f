"""A provider call: POST, retry what a retry can fix, then hand the event stream to the driver.

Retried: 408/409/429/529/5xx answers and connections that failed before a response head
arrived, each after the provider's `retry-after` or an exponential back-off, while the retry
budget lasts. Never retried: any other status (the request itself is wrong), a refused network
grant, and anything once the stream has started (chunks already reached the user).

A driver that can read a non-streamed answer passes `whole`: a 2xx answered as
`application/json` instead of an event stream (a provider or test server ignoring
`stream: true`) is read whole, at most `MAX_JSON_BYTES`, and handed to it as one JSON object.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from driverkit import clock, wasi_http
from driverkit.errors import DriverFailure, ProviderError, StreamError, TransportError, error_message
from driverkit.retry import RetryPolicy, is_retryable, retry_after_seconds
from driverkit.sse import MAX_EVENT_CHARS, Event, SseParser

T = TypeVar("T")
MAX_JSON_BYTES = MAX_EVENT_CHARS
"""A non-streamed answer larger than this is refused, as one event of that size would be."""


def stream_call(
    url: str,
    headers: dict[str, str],
    body: dict[str, Any],
    policy: RetryPolicy,
    read_timeout: float,
    consume: Callable[[Iterator[Event]], T],
    whole: Callable[[dict[str, Any]], T] | None = None,
) -> T:
    payload = json.dumps(body, ensure_ascii=False).encode("utf-8")
    headers = {**headers, "content-type": "application/json", "accept": "text/event-stream",
               "content-length": str(len(payload))}
    started = clock.now()
    attempt = 0
    while True:
        attempt += 1
        retry_after: float | None = None
        try:
            response = wasi_http.post(url, headers, payload, read_timeout)
        except TransportError as exc:
            if not exc.retryable:
                raise
            failure: DriverFailure = exc
        else:
            if 200 <= response.status < 300:
                if whole is not None and is_json(response.headers):
                    return whole(json_body(response))
                return consume(events(response))
            failure = ProviderError(response.status, error_message(response.read_all()))
            if not is_retryable(response.status):
                raise failure
            retry_after = retry_after_seconds(response.headers)
        elapsed = clock.now() - started
        if attempt > policy.max_retries:
            raise DriverFailure(f"gave up after {attempt} attempts ({policy.max_retries} retries): {failure}")
        wait = policy.delay(attempt - 1, retry_after)
        if elapsed + wait > policy.budget_seconds:
            raise DriverFailure(
                f"gave up after {attempt} attempts in {elapsed:.1f}s "
                f"(retry budget {policy.budget_seconds:g}s, next wait {wait:.1f}s): {failure}"
            )
        clock.sleep(wait)


def events(response: wasi_http.Response) -> Iterator[Event]:
    parser = SseParser()
    body = response.chunks()
    try:
        for chunk in body:
            yield from parser.feed(chunk)
        yield from parser.close()
    finally:
        body.close()


def is_json(headers: dict[str, str]) -> bool:
    """`content-type: application/json` (or any `+json` type), parameters aside."""
    media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def json_body(response: wasi_http.Response) -> dict[str, Any]:
    """The whole body as one JSON object; larger than `MAX_JSON_BYTES`, not JSON or not an object is a StreamError."""
    body = response.read_all(MAX_JSON_BYTES + 1)
    if len(body) > MAX_JSON_BYTES:
        raise StreamError(f"the non-streamed answer is larger than {MAX_JSON_BYTES} bytes")
    try:
        value = json.loads(body.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError included
        raise StreamError(f"malformed answer: the application/json body is not JSON: {body[:120]!r}") from None
    if not isinstance(value, dict):
        raise StreamError("malformed answer: the application/json body is not an object")
    return value
