"""Reloading the credentials of a running daemon (`kill -HUP`): revoke or add a credential
without a restart. The files are read off the event loop; a reload that fails (an unreadable or
invalid file, or no credential left on a public bind) changes nothing and says why."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from murmurd.a2a.http.auth.binding import UnsafeServe
from murmurd.a2a.http.auth.config import AuthConfig, CredentialsError
from murmurd.a2a.http.auth.current import CurrentAuth


async def reload_credentials(current: CurrentAuth, load: Callable[[], AuthConfig],
                             check: Callable[[AuthConfig], None], announce: Callable[[str], None]) -> bool:
    try:
        config = await asyncio.to_thread(load)
        check(config)
    except (CredentialsError, UnsafeServe) as exc:
        announce(f"credentials not reloaded, the previous ones stay in force: {exc}")
        return False
    current.replace(config)
    announce(f"credentials reloaded: {len(config.credentials)} credential(s), "
             f"{len(config.peers.tokens)} peer token(s)")
    return True
