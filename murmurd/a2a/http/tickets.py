"""Stream tickets: how a browser's `EventSource` authenticates without a long-lived secret in a
URL (issue 15 item 4; minted by `ticket_mint.py`, accepted by `auth/edge.py`, used only once a
credential is configured).

`EventSource` cannot send an `Authorization` header, so the credential has to ride in the URL,
where it lands in history, logs and `Referer`s. A ticket keeps that harmless: the page makes an
authenticated `POST` (its bearer token in the header, as any JSON-RPC call), the daemon answers
with a ticket good for ONE path (`/tasks/{id}/stream` or `/stream`), for ONE principal, for a
short while (60 s by default), signed with a key that exists only in this daemon's memory
(a restart voids every ticket; replicas on one database share the database's key instead). The page opens `GET <path>?ticket=...`; the daemon verifies the
ticket against the path it was asked for and the clock, and the stream then lives as long as the
connection. When the browser reconnects after the ticket expired, the GET is refused (401), and
the page mints a fresh ticket and resumes with `?after=<last event id>` (`EventSource` then
sends no `Last-Event-ID`, so the query carries it).

Pure: no I/O, the clock is passed in. A ticket is `base64url(payload).base64url(hmac-sha256)`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass

DEFAULT_TTL_SECONDS = 60.0
MAX_TICKET_CHARS = 2048  # refused unread beyond this: a ticket we minted is far shorter
KEY_BYTES = 32


class BadTicket(ValueError):
    """The ticket is malformed, forged, for another path, or expired; the message says which."""


@dataclass(frozen=True)
class Ticket:
    path: str
    principal: str
    expires_at: float


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class TicketSigner:
    """Mints and verifies stream tickets with one daemon's in-memory key."""

    def __init__(self, key: bytes, ttl_seconds: float = DEFAULT_TTL_SECONDS) -> None:
        if len(key) < KEY_BYTES:
            raise ValueError(f"a ticket key needs at least {KEY_BYTES} bytes")
        if ttl_seconds <= 0:
            raise ValueError("ttl_seconds must be positive")
        self._key = key
        self.ttl_seconds = ttl_seconds

    @classmethod
    def generate(cls, ttl_seconds: float = DEFAULT_TTL_SECONDS) -> TicketSigner:
        """A signer with a fresh random key (one per daemon; never written anywhere)."""
        return cls(secrets.token_bytes(KEY_BYTES), ttl_seconds)

    def _sign(self, payload: bytes) -> bytes:
        return hmac.new(self._key, b"murmurd-stream-ticket\0" + payload, hashlib.sha256).digest()

    def mint(self, path: str, principal: str, now: float) -> str:
        """A ticket for `principal` to open `path` until `now + ttl`."""
        body = {"p": path, "s": principal, "e": round(now + self.ttl_seconds, 3), "n": _b64(secrets.token_bytes(8))}
        payload = json.dumps(body, separators=(",", ":"), ensure_ascii=True).encode("ascii")
        return _b64(payload) + "." + _b64(self._sign(payload))

    def verify(self, ticket: str, path: str, now: float) -> Ticket:
        """The ticket's contents when it is ours, for `path`, and not expired; else BadTicket.

        The signature is checked (in constant time) before anything in the payload is trusted."""
        if not ticket or len(ticket) > MAX_TICKET_CHARS or not ticket.isascii() or ticket.count(".") != 1:
            raise BadTicket("the ticket is malformed")
        encoded, signature = ticket.split(".")
        try:
            payload, given = _unb64(encoded), _unb64(signature)
        except (binascii.Error, ValueError):
            raise BadTicket("the ticket is malformed") from None
        if not hmac.compare_digest(given, self._sign(payload)):
            raise BadTicket("the ticket's signature does not match (forged, or minted by another daemon run)")
        body = json.loads(payload)
        ticket_path, principal, expires_at = body.get("p"), body.get("s"), body.get("e")
        if not isinstance(ticket_path, str) or not isinstance(principal, str) or not isinstance(expires_at, (int, float)):
            raise BadTicket("the ticket is malformed")
        if not hmac.compare_digest(ticket_path.encode(), path.encode()):
            raise BadTicket("the ticket is for another stream")
        if now >= expires_at:
            raise BadTicket("the ticket has expired; mint a new one")
        return Ticket(ticket_path, principal, float(expires_at))
