"""The address a served capsule advertises on its agent card (`serve --public-url`).

Behind a load balancer, a Kubernetes Service or a TLS proxy, the address murmurd binds
(`0.0.0.0:8080`) is not the one callers reach, and a card that names the bound address sends
every SDK client to a place it cannot connect to.
"""

from __future__ import annotations

from urllib.parse import urlsplit

MAX_URL_CHARS = 2048


class BadPublicUrl(ValueError):
    """`--public-url` is not an absolute http(s) URL a caller could POST to."""


def check_public_url(value: str) -> str:
    """`value` as the card's JSON-RPC endpoint URL (always ending in `/`), or BadPublicUrl
    saying why not: http or https, a host, no user info, no query, no fragment."""
    text = value.strip()
    if not text or len(text) > MAX_URL_CHARS or any(ord(ch) < 0x21 or ord(ch) == 0x7F for ch in text):
        raise BadPublicUrl(f"{value[:80]!r} is not a URL: write http(s)://host[:port][/path]")
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 -- raises on a port that is not a number in range
    except ValueError as exc:
        raise BadPublicUrl(f"{value[:80]!r} is not a URL: {exc}") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise BadPublicUrl(f"{value[:80]!r}: the scheme must be http or https")
    if not parts.hostname:
        raise BadPublicUrl(f"{value[:80]!r}: no host")
    if parts.username is not None or parts.password is not None:
        raise BadPublicUrl(f"{value[:80]!r}: user info does not belong in a card (credentials go in headers)")
    if parts.query or parts.fragment or text.endswith(("?", "#")):
        raise BadPublicUrl(f"{value[:80]!r}: no query or fragment")
    return text if text.endswith("/") else text + "/"
