"""Bearer tokens as SHA-256 digests, compared in constant time.

murmurd never keeps a token it verifies: a token read from a file or the environment is hashed
at load and the text dropped. A presented token is hashed once, then compared against every
configured digest with `hmac.compare_digest` on equal-length (32-byte) values, without stopping
at the first match, so neither the comparison nor the position of a match shows in the timing.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from typing import TypeVar

DIGEST_SIZE = 32  # SHA-256
MAX_TOKEN_BYTES = 4096  # a longer Authorization value is refused as malformed before hashing

T = TypeVar("T")


def token_digest(token: str) -> bytes:
    """The SHA-256 digest a token is stored and compared as."""
    return hashlib.sha256(token.encode("utf-8")).digest()


def digest_from_hex(text: str) -> bytes:
    """A configured `token_sha256` (64 hex digits) as bytes; ValueError names what is wrong."""
    cleaned = text.strip().lower()
    if len(cleaned) != 2 * DIGEST_SIZE or any(c not in "0123456789abcdef" for c in cleaned):
        raise ValueError("token_sha256 must be 64 hex digits (the SHA-256 of the token)")
    return bytes.fromhex(cleaned)


def digests_equal(presented: bytes, stored: bytes) -> bool:
    """Constant-time equality of two digests of the same fixed length."""
    if len(presented) != DIGEST_SIZE or len(stored) != DIGEST_SIZE:
        raise ValueError("digests must be SHA-256 digests (32 bytes)")
    return hmac.compare_digest(presented, stored)


def find_by_digest(token: str, entries: Iterable[tuple[bytes, T]]) -> T | None:
    """The entry whose digest is the token's, comparing against every entry (no early exit)."""
    presented = token_digest(token)
    found: T | None = None
    for stored, entry in entries:
        if digests_equal(presented, stored) and found is None:
            found = entry
    return found
