"""The bearer token murmurd presents to each peer on outbound `murmur:message/send`.

A peer is matched by scheme, host and port (the path does not matter), so the token configured
for `https://billing.example:8443` goes with every message to that agent and to nobody else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlsplit

PeerKey = tuple[str, str, int]
_DEFAULT_PORTS = {"http": 80, "https": 443}


def peer_key(url: str) -> PeerKey | None:
    """(scheme, host, port) of an http(s) URL, None for anything else."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return scheme, parts.hostname.lower(), port if port is not None else _DEFAULT_PORTS[scheme]


class PeerHeaders(Protocol):
    def headers_for(self, url: str) -> dict[str, str]: ...


@dataclass(frozen=True)
class PeerTokens:
    tokens: dict[PeerKey | None, str] = field(default_factory=dict)

    def for_url(self, url: str) -> str | None:
        key = peer_key(url)
        return self.tokens.get(key) if key is not None else None

    def headers_for(self, url: str) -> dict[str, str]:
        token = self.for_url(url)
        return {"authorization": f"Bearer {token}"} if token is not None else {}
