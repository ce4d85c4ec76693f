"""A provider call: POST, retry what a retry can fix, then hand the event stream to the driver.

Retried: 408/409/429/529/5xx answers and connections that failed before a response head
arrived, each after the provider's `retry-after` or an exponential back-off, while the retry
budget lasts. Never retried: any other status (the request itself is wrong), a refused network
grant, and anything once the stream has started (chunks already reached the user).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from driverkit import clock, wasi_http
from driverkit.errors import DriverFailure, ProviderError, TransportError, error_message
from driverkit.retry import RetryPolicy, is_retryable, retry_after_seconds
from driverkit.sse import Event, SseParser

T = TypeVar("T")


def stream_call(
    url: str,
    headers: dict[str, str],
    body: dict[str, Any],
    policy: RetryPolicy,
    read_timeout: float,
    consume: Callable[[Iterator[Event]], T],
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
