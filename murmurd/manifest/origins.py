"""Browser origins as murmurd accepts them in `network.cors_origins` and `serve --cors-origin`."""

from __future__ import annotations

import re

_ORIGIN = re.compile(r"https?://(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+)(:[0-9]{1,5})?", re.IGNORECASE)


class BadOrigin(ValueError):
    """A configured CORS origin is not `scheme://host[:port]`."""


def check_origin(value: str) -> str:
    """`value` as an origin a browser sends (`http(s)://host[:port]`, no path, no trailing
    slash, lower-case scheme and host), or BadOrigin saying why not. `*` is refused: the
    allowed origins are listed one by one."""
    text = value.strip()
    if text == "*":
        raise BadOrigin("'*' is not allowed; list each origin (scheme://host[:port])")
    if not _ORIGIN.fullmatch(text):
        raise BadOrigin(f"{value[:80]!r} is not an origin: write scheme://host[:port] "
                        "(http or https, no path, no trailing slash)")
    port = text.rsplit(":", 1)[-1] if text.count(":") > 1 and not text.endswith("]") else None
    if port is not None and not 1 <= int(port) <= 65535:
        raise BadOrigin(f"{value[:80]!r}: port {port} is not a TCP port")
    return text.lower()
