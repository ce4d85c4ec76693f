"""Authentication at the HTTP edge: an ASGI middleware in front of every route.

It reads headers only (never the body), so a refused request reaches no route: nothing is
parsed, stored or traced for it. It answers 401 for a missing, malformed, unknown, expired or
revoked credential and 403 for a credential whose `x-murmur-task-*` headers ask for more than it
gives, both with a JSON-RPC error body. A header that decides who the caller is
(`Authorization`, `x-murmur-task-origin`, `x-murmur-task-trust`) sent twice is ambiguous (which
one a proxy added?) and refused: 401 for `Authorization`, 403 for the others. A request it lets
through carries its `Caller` in `request.state.caller`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from starlette.datastructures import Headers, QueryParams
from starlette.types import ASGIApp, Receive, Scope, Send

from murmurd.a2a.http.auth.current import CurrentAuth
from murmurd.a2a.http.auth.principal import Principal, TaskIdentity, Widening, narrow
from murmurd.a2a.http.auth.verify import Unauthenticated, authenticate, ticket_principal
from murmurd.a2a.http.stream_paths import is_stream_path
from murmurd.a2a.wire.jsonrpc import JsonRpcError, error_response
from murmurd.a2a.peers.peer import ORIGIN_HEADER, TRUST_HEADER
from murmurd.a2a.http.tickets import TicketSigner
from murmurd.text import json_text

# Every path but these needs a credential once any is configured (the agent card is how a client
# learns the scheme; the probes are for orchestrators that hold no credential).
EXEMPT_PATHS = frozenset({"/.well-known/agent-card.json", "/.well-known/agent.json", "/healthz", "/readyz"})
# The console's static files (HTML, JS, CSS) hold no data: the page loads without a credential and
# then asks for one; every call it makes for data goes through the rules above.
CONSOLE_PATH = "/console"
TLS_SUBJECT_KEY = "murmurd.tls_subject"  # where the connection's verified client subject rides in the scope

# implementation-defined JSON-RPC server errors (-32000..-32099), clear of A2A's -32001..-32009
UNAUTHENTICATED = -32030
FORBIDDEN = -32031
HTTP_STATUS = {UNAUTHENTICATED: 401, FORBIDDEN: 403}
TICKET_PARAM = "ticket"  # `GET <stream>?ticket=...`: how an EventSource authenticates


@dataclass(frozen=True)
class Caller:
    """Who sent a request, and the identity a task it creates gets."""

    principal: Principal
    identity: TaskIdentity


def unauthenticated(detail: str) -> JsonRpcError:
    return JsonRpcError(UNAUTHENTICATED, f"Unauthenticated: {detail}")


def forbidden(detail: str) -> JsonRpcError:
    return JsonRpcError(FORBIDDEN, f"Forbidden: {detail}")


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _exempt(scope: Scope) -> bool:
    path = scope["path"]
    if path in EXEMPT_PATHS:
        return True
    return scope["method"] in ("GET", "HEAD") and (path == CONSOLE_PATH or path.startswith(CONSOLE_PATH + "/"))


class AuthMiddleware:
    def __init__(self, app: ASGIApp, auth: CurrentAuth, *, tickets: TicketSigner | None = None,
                 clock: Callable[[], datetime] = _utc_now) -> None:
        self.app, self.auth, self.tickets, self.clock = app, auth, tickets, clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or _exempt(scope) or scope["method"] == "OPTIONS":
            await self.app(scope, receive, send)  # a CORS preflight carries no credential, by definition
            return
        headers = Headers(scope=scope)
        try:
            principal = self._principal(scope, headers)
            for name in (ORIGIN_HEADER, TRUST_HEADER):
                if len(headers.getlist(name)) > 1:
                    raise Widening(f"more than one {name} header")
            identity = narrow(principal, headers.get(ORIGIN_HEADER), headers.get(TRUST_HEADER))
        except Unauthenticated as exc:
            await refuse(send, unauthenticated(str(exc)), {"www-authenticate": 'Bearer realm="murmurd"'})
            return
        except Widening as exc:
            await refuse(send, forbidden(str(exc)), {})
            return
        scope.setdefault("state", {})["caller"] = Caller(principal, identity)
        await self.app(scope, receive, send)


    def _principal(self, scope: Scope, headers: Headers) -> Principal:
        """The request's principal: from its `Authorization` header or client certificate, or,
        on a GET stream without a header, from a stream ticket minted for exactly that path.
        A ticket anywhere else (POST /, any other route) is refused, never read."""
        config, now = self.auth.config, self.clock()
        if config.enabled and len(headers.getlist("authorization")) > 1:
            raise Unauthenticated("more than one Authorization header")
        tickets = QueryParams(scope.get("query_string", b"")).getlist(TICKET_PARAM)
        if tickets and config.enabled and headers.get("authorization") is None:
            if scope["method"] != "GET" or not is_stream_path(scope["path"]) or self.tickets is None:
                raise Unauthenticated("a stream ticket is accepted only by GET /stream and GET /tasks/{id}/stream")
            if len(tickets) != 1:
                raise Unauthenticated("more than one stream ticket")
            return ticket_principal(config, self.tickets, tickets[0], scope["path"], now)
        return authenticate(config, headers.get("authorization"), scope.get(TLS_SUBJECT_KEY), now)


async def refuse(send: Send, error: JsonRpcError, extra: dict[str, str]) -> None:
    body = json_text(error_response(None, error)).encode("utf-8")
    headers: list[Any] = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.encode(), v.encode()) for k, v in extra.items()]
    await send({"type": "http.response.start", "status": HTTP_STATUS[error.code], "headers": headers})
    await send({"type": "http.response.body", "body": body})
