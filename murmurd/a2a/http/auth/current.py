"""The credentials in force, replaced whole when `murmurd serve` reloads them (SIGHUP).

Every request reads `config` once, so it is judged by one version of the credentials; a reload
never mutates a config in place. Outbound peer tokens are read through the same holder.
"""

from __future__ import annotations

from murmurd.a2a.http.auth.config import AuthConfig


class CurrentAuth:
    def __init__(self, config: AuthConfig | None = None) -> None:
        self.config = config or AuthConfig()

    def replace(self, config: AuthConfig) -> None:
        self.config = config

    def headers_for(self, url: str) -> dict[str, str]:
        """The Authorization header to present to the peer at `url` (none configured: {})."""
        return self.config.peers.headers_for(url)
