"""Helpers for tests that serve with credentials: a token's stored digest, its request header."""

from __future__ import annotations

import hashlib


def token_sha256(token: str) -> str:
    """What a credentials file stores for `token` (`token_sha256`)."""
    return hashlib.sha256(token.encode()).hexdigest()


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}
