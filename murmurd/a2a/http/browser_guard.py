"""Keeping a visited web page from calling the daemon through the operator's browser.

A browser lets any page send a "simple" cross-origin POST (a form, or `fetch` with `no-cors` and
`text/plain`) without asking first; CORS only stops the page from reading the answer. With no
credential configured every caller is the operator, so such a POST would start an operator task
on a capsule with shell tools. And a page on a DNS-rebound name (`attacker.example` resolving
to 127.0.0.1) is same-origin with the daemon in the browser's eyes. So, in front of every route:

- a request whose `Origin` is neither the daemon's own (the `Host` it was sent to, or the
  `--public-url`'s) nor a listed `--cors-origin` is refused: browsers send `Origin` on every
  cross-origin request but a plain navigation, non-browser clients send none;
- on a loopback bind, a request whose `Host` is not a loopback name or address (nor the
  `--public-url`'s host) is refused: only a rebound name reaches a loopback socket under a
  foreign name.

Both answer 403 with a JSON-RPC error, before authentication and before any route.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from murmurd.a2a.http.auth.binding import is_loopback
from murmurd.a2a.http.auth.edge import forbidden, refuse


def _netloc(url: str) -> str | None:
    """`host[:port]` of an absolute URL, lower-case; None when it has none."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    return parts.netloc.lower() or None


def _hostname(host_header: str) -> str | None:
    try:
        return urlsplit("//" + host_header).hostname
    except ValueError:
        return None


def origin_refusal(origin: str | None, host: str | None, allowed: frozenset[str], public: str | None) -> str | None:
    """Why a request from `origin` to `host` is refused, or None (pure). `allowed`: listed
    origins; `public`: the `--public-url`'s netloc."""
    if origin is None:
        return None
    text = origin.strip().lower()
    if text in allowed:
        return None
    netloc = _netloc(text) if text != "null" else None
    if netloc is not None and (netloc == (host or "").strip().lower() or netloc == public):
        return None
    return (f"a browser page from origin {origin[:100]!r} may not call this daemon; "
            "list its origin with --cors-origin")


@lru_cache(maxsize=256)  # a client names the same Host on every request: parse it once
def host_refusal(host: str | None, public: str | None) -> str | None:
    """Why a request to a loopback bind naming `host` is refused, or None (pure)."""
    if host is None:
        return None  # HTTP/1.0 without Host: no browser sends that
    name = _hostname(host.strip())
    if name is not None and (is_loopback(name) or (public is not None and host.strip().lower() == public)):
        return None
    return (f"Host {host[:100]!r} is not a loopback name of this daemon (a DNS-rebound name?); "
            "a daemon bound to loopback answers only 127.0.0.1, [::1], localhost and its --public-url")


class BrowserGuard:
    def __init__(self, app: ASGIApp, *, origins: Iterable[str], public_url: str | None, loopback: bool) -> None:
        self.app, self.loopback = app, loopback
        self.allowed = frozenset(o.lower() for o in origins)
        self.public = _netloc(public_url) if public_url else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = Headers(scope=scope)
            host = headers.get("host")
            why = host_refusal(host, self.public) if self.loopback else None
            why = why or origin_refusal(headers.get("origin"), host, self.allowed, self.public)
            if why is not None:
                await refuse(send, forbidden(why), {})
                return
        await self.app(scope, receive, send)
