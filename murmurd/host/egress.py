"""Which network origins a grant lists (pure logic, shared by `wasi:http` and `message/send`).

An origin is what a connection is opened to: (scheme, host, port). A `network.allow` entry
lists a fixed, small set of them, and nothing is reachable that no entry lists:

| entry                      | origins                                         |
|----------------------------|-------------------------------------------------|
| `https://api.example.com`  | `https://api.example.com:443`                   |
| `http://10.0.0.5:8080`     | `http://10.0.0.5:8080`                          |
| `api.example.com:8443`     | `http://api.example.com:8443`, `https://api.example.com:8443` |
| `api.example.com`          | `http://api.example.com:80`, `https://api.example.com:443` |

Hosts compare by name, case-insensitively and without a trailing dot; an IP address compares in
its canonical text (`[::1]` and `::1` are one host). A name is never resolved here: a request to
`127.0.0.1` is not covered by an entry `localhost`, whatever `localhost` resolves to. Anything
that does not parse lists nothing and matches nothing (fail closed).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443}
_NAME = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,62})(?:\.[a-z0-9_](?:[a-z0-9_-]{0,62}))*")  # DNS labels, no wildcards


@dataclass(frozen=True, order=True)
class Origin:
    scheme: str  # "http" | "https"
    host: str  # normalised: lower case, no trailing dot, IPv6 without brackets
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


def normal_host(host: str) -> str | None:
    """`host` as origins compare it, or None when it is empty or carries what no host name does."""
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        return ipaddress.ip_address(host).compressed
    except ValueError:
        pass
    name = host.lower().removesuffix(".")
    return name if _NAME.fullmatch(name) else None


def _port(text: str) -> int | None:
    if not text.isascii() or not text.isdigit():
        return None
    port = int(text)
    return port if 1 <= port <= 65535 else None


def split_authority(authority: str) -> tuple[str, int | None] | None:
    """`host[:port]` (IPv6 in brackets) as (normalised host, port or None); None when malformed."""
    if authority.startswith("["):
        close = authority.find("]")
        if close < 0:
            return None
        host_text, rest = authority[: close + 1], authority[close + 1 :]
        if rest and not rest.startswith(":"):
            return None
        port_text = rest[1:] if rest else None
    elif authority.count(":") > 1:  # a bare IPv6 address (an allow entry may be written so)
        host_text, port_text = authority, None
    else:
        host_text, sep, port_text_or_empty = authority.partition(":")
        port_text = port_text_or_empty if sep else None
    host = normal_host(host_text)
    if host is None:
        return None
    if port_text is None:
        return host, None
    port = _port(port_text)
    return (host, port) if port is not None else None


def entry_origins(entry: str) -> frozenset[Origin]:
    """The origins one `network.allow` entry lists (empty when the entry is malformed)."""
    if "://" in entry:
        try:
            parts = urlsplit(entry)
        except ValueError:
            return frozenset()
        scheme = parts.scheme.lower()
        if scheme not in DEFAULT_PORTS or parts.path not in ("", "/") or parts.query or parts.fragment:
            return frozenset()
        split = split_authority(parts.netloc)
        if split is None:
            return frozenset()
        host, port = split
        return frozenset({Origin(scheme, host, port or DEFAULT_PORTS[scheme])})
    split = split_authority(entry)
    if split is None:
        return frozenset()
    host, port = split
    return frozenset(Origin(scheme, host, port or default) for scheme, default in DEFAULT_PORTS.items())


@dataclass(frozen=True)
class EgressPolicy:
    """The origins a component may reach; the empty policy reaches nothing."""

    origins: frozenset[Origin] = frozenset()

    @classmethod
    def from_allow(cls, entries: Iterable[str]) -> EgressPolicy:
        found: set[Origin] = set()
        for entry in entries:
            found |= entry_origins(entry)
        return cls(frozenset(found))

    def allows(self, origin: Origin | None) -> bool:
        return origin is not None and origin in self.origins

    def covers(self, entry: str) -> bool:
        """Whether every origin `entry` lists is one this policy reaches (narrowing keeps it)."""
        wanted = entry_origins(entry)
        return bool(wanted) and wanted <= self.origins

    def __bool__(self) -> bool:
        return bool(self.origins)


def request_origin(scheme: str | None, authority: str | None) -> Origin | None:
    """Where wasmtime's `wasi:http` client connects for a request with this scheme and authority.

    wasmtime treats a request without a scheme as `https`, connects to the authority's host and
    port, and defaults the port by scheme. An authority with user information, an unknown
    scheme or no authority at all is never sent anywhere we would allow: None."""
    scheme = (scheme or "https").lower()
    if scheme not in DEFAULT_PORTS or not authority or "@" in authority:
        return None
    if authority.count(":") > 1 and not authority.startswith("["):
        return None  # an IPv6 host is bracketed in an authority
    split = split_authority(authority)
    if split is None:
        return None
    host, port = split
    return Origin(scheme, host, port or DEFAULT_PORTS[scheme])


def url_origin(url: str) -> Origin | None:
    """The origin of an `http(s)` URL (a peer URL of `message/send`), or None."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if not parts.scheme:
        return None
    return request_origin(parts.scheme, parts.netloc)
