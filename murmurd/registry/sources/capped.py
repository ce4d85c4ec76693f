"""Bodies a registry source answers with, read within a bound: a release's JSON, a listing, an
error's text. A hostile or broken server answering an endless body gets `E-IO-003` once the
bound is passed, never murmurd's memory (downloads keep their own, larger bound)."""

from __future__ import annotations

from typing import Any

import httpx

from murmurd.registry.errors import RegistryError

MAX_BODY_BYTES = 16 * 1024 * 1024


def read_capped(response: httpx.Response, limit: int | None = None) -> httpx.Response:
    """`response` (opened with `stream`) read to at most `limit` bytes (`MAX_BODY_BYTES`), as a
    complete response."""
    limit = MAX_BODY_BYTES if limit is None else limit
    body = bytearray()
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > limit:
            raise RegistryError("E-IO-003", f"{response.request.url.host} answered more than {limit} bytes "
                                            f"(HTTP {response.status_code})")
    headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in ("content-encoding",
                                                                                      "transfer-encoding")]
    return httpx.Response(response.status_code, headers=headers, content=bytes(body), request=response.request)


def request_capped(client: httpx.Client, method: str, url: str, limit: int | None = None,
                   **kwargs: Any) -> httpx.Response:
    """`client.request(method, url, ...)` whose body is read within `limit` bytes."""
    with client.stream(method, url, **kwargs) as response:
        return read_capped(response, limit)
