"""CORS for browser pages on other origins (Starlette's `CORSMiddleware`, not hand-written headers).

No origin is allowed unless the operator lists it (`murmurd serve --cors-origin`, or the manifest's
`network.cors_origins`); with none listed the middleware is not installed at all, so no response
carries an `Access-Control-*` header and every cross-origin preflight fails. A listed origin may
call everything the app serves: the JSON-RPC endpoint, the agent card, the GET streams.
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp

from murmurd.manifest.origins import BadOrigin, check_origin

__all__ = ["ALLOWED_HEADERS", "BadOrigin", "add_cors", "check_origin"]

# What a page may send: the JSON body's type, the A2A version, EventSource's resume header, a
# W3C trace context, and (for the access rules to come) a bearer token. Never murmurd's peer
# origin/trust headers: a browser page is not a peer capsule.
ALLOWED_HEADERS = ("content-type", "a2a-version", "last-event-id", "traceparent", "authorization")
ALLOWED_METHODS = ("GET", "POST")
PREFLIGHT_MAX_AGE = 600


def add_cors(app: ASGIApp, origins: Iterable[str]) -> None:
    """Allow `origins` (already checked) to call `app`; nothing at all when there are none."""
    allowed = list(dict.fromkeys(origins))
    if not allowed:
        return
    app.add_middleware(  # type: ignore[attr-defined]
        CORSMiddleware, allow_origins=allowed, allow_methods=list(ALLOWED_METHODS),
        allow_headers=list(ALLOWED_HEADERS), allow_credentials=False, max_age=PREFLIGHT_MAX_AGE,
    )
