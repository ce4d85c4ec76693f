"""Which principal a request's credential proves (pure: headers and TLS subject in, principal out).

A request presenting `Authorization` is judged by it alone (a bad token is refused even over a
verified client certificate); one without it is judged by its client certificate. Refusals say
what was wrong — missing, malformed, unknown, expired, revoked — and never echo the token.
"""

from __future__ import annotations

from datetime import datetime

from murmurd.a2a.http.auth.config import AuthConfig
from murmurd.a2a.http.auth.principal import ANONYMOUS_OPERATOR, Principal
from murmurd.a2a.http.auth.tls import Subject, subject_text
from murmurd.a2a.http.auth.tokens import MAX_TOKEN_BYTES, find_by_digest
from murmurd.a2a.http.tickets import BadTicket, TicketSigner


class Unauthenticated(Exception):
    """No acceptable credential (HTTP 401); the message says which way it failed."""


def bearer_token(authorization: str) -> str:
    """The token of an `Authorization: Bearer <token>` value; Unauthenticated when malformed."""
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Unauthenticated("malformed Authorization header: expected 'Bearer <token>'")
    if len(token) > MAX_TOKEN_BYTES or not token.isascii() or any(c.isspace() or not c.isprintable() for c in token):
        raise Unauthenticated("malformed Authorization header: the token is not a bearer token")
    return token


def authenticate(config: AuthConfig, authorization: str | None, tls_subject: Subject | None,
                 now: datetime) -> Principal:
    """The principal the request proves; with no credential configured, the anonymous operator."""
    if not config.enabled:
        return ANONYMOUS_OPERATOR
    if authorization is not None:
        token = bearer_token(authorization)
        credential = find_by_digest(token, [(c.digest, c) for c in config.credentials if c.digest is not None])
        if credential is None:
            raise Unauthenticated("unknown bearer token")
    elif tls_subject is not None:
        credential = next((c for c in config.credentials if c.tls_subject == tls_subject), None)
        if credential is None:
            raise Unauthenticated(f"client certificate {subject_text(tls_subject)!r} names no credential")
    else:
        raise Unauthenticated("a credential is required: send 'Authorization: Bearer <token>'"
                              + (" or a client certificate" if config.uses_tls_subjects else ""))
    refusal = credential.refusal(now)
    if refusal is not None:
        raise Unauthenticated(refusal)
    return credential.principal


def ticket_principal(config: AuthConfig, signer: TicketSigner, ticket: str, path: str, now: datetime) -> Principal:
    """The principal a stream ticket was minted for, when the ticket is ours, for `path`, not
    expired, and its credential is still configured and accepted (a revoked or removed
    credential's tickets die with it)."""
    try:
        minted = signer.verify(ticket, path, now.timestamp())
    except BadTicket as exc:
        raise Unauthenticated(str(exc)) from None
    credential = config.credential_named(minted.principal)
    if credential is None:
        raise Unauthenticated("the ticket's credential is no longer configured")
    refusal = credential.refusal(now)
    if refusal is not None:
        raise Unauthenticated(refusal)
    return credential.principal
