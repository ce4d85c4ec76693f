"""`POST /auth/stream-ticket`: where a browser page trades its bearer token (in the header, as on
any JSON-RPC call) for a short-lived stream ticket good for one GET stream path
(`murmurd/a2a/http/tickets.py` says why; `auth/edge.py` accepts the ticket).

The body is `{"path": "/tasks/<id>/stream"}` or `{"path": "/stream"}`; the answer is
`{"ticket", "path", "expires_in"}`. The route sits behind the auth middleware like every route but
the card and the probes, so only an authenticated caller reaches it, and a ticket itself can
never mint another (tickets are accepted on GET stream paths only). With no credential
configured the route still answers (the anonymous operator); the streams then ignore tickets.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from murmurd.a2a.wire import jsonrpc
from murmurd.a2a.http.stream_paths import is_stream_path
from murmurd.a2a.http.route import RouteHost
from murmurd.a2a.http.tickets import TicketSigner

MINT_PATH = "/auth/stream-ticket"
MAX_BODY_BYTES = 4096  # a path and nothing else: a task id is at most a few hundred characters


class BadMintRequest(ValueError):
    """The body does not name a stream path we serve; the message says what is wrong."""


def stream_path_of(body: bytes) -> str:
    """The stream path a mint request names (pure)."""
    if len(body) > MAX_BODY_BYTES:
        raise BadMintRequest(f"the body is larger than {MAX_BODY_BYTES} bytes")
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise BadMintRequest('the body is not JSON; send {"path": "/tasks/<id>/stream"}') from None
    if not isinstance(parsed, dict) or set(parsed) != {"path"} or not isinstance(parsed["path"], str):
        raise BadMintRequest('the body must be {"path": "<stream path>"} and nothing else')
    path = parsed["path"]
    if not is_stream_path(path):
        raise BadMintRequest(f"{path[:80]!r} is not a stream path: /stream or /tasks/<id>/stream")
    return path


def routes(router: RouteHost, signer: TicketSigner, clock: Callable[[], float] = time.time) -> APIRouter:
    """`POST /auth/stream-ticket`, minted by `signer` for the caller the middleware proved."""
    api = APIRouter()

    @api.post(MINT_PATH)
    async def mint_stream_ticket(request: Request) -> Response:
        body = await router.read_body(request, MAX_BODY_BYTES)
        try:
            if body is None:
                raise BadMintRequest(f"the body is larger than {MAX_BODY_BYTES} bytes or was cut off")
            path = stream_path_of(body)
        except BadMintRequest as exc:
            return router.refuse(400, jsonrpc.JsonRpcError.invalid_params(str(exc)))
        principal = router.caller(request).principal
        ticket = signer.mint(path, principal.name or "", clock())
        return JSONResponse({"ticket": ticket, "path": path, "expires_in": signer.ttl_seconds},
                            headers={"Cache-Control": "no-store"})

    return api
