"""What a route module needs of the JSON-RPC router: the route type, in a module of its own.

Each route module (`get_streams`, `task_trace`, `ticket_mint`, `health`) builds an `APIRouter`
from what it is given and knows nothing of the app nor of `server.Router`: the app is assembled
in one place, `server.create_app`, as Starlette assembles an app from route objects.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from fastapi import Request
from fastapi.responses import Response

from murmurd.a2a.wire import jsonrpc

if TYPE_CHECKING:
    from murmurd.a2a.core.daemon import CapsuleDaemon
    from murmurd.a2a.http.auth.edge import Caller


class RouteHost(Protocol):
    """The router as a route module sees it: the daemon, the caller, a refusal, a capped body."""

    daemon: CapsuleDaemon

    def caller(self, request: Request) -> Caller: ...

    def refuse(self, status: int, failure: jsonrpc.JsonRpcError,
               headers: dict[str, str] | None = None) -> Response: ...

    async def read_body(self, request: Request, limit: int) -> bytes | None: ...


class HoldsSlot:
    """A response mixin (`class X(HoldsSlot, Response)`) that holds a slot of a capped kind
    (a stream, a trace read) until the response has ended, however it ends: sent, the client
    gone, the connection closed under it. `release` is given as a keyword argument."""

    def __init__(self, *args: Any, release: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._release = release

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)  # type: ignore[misc]
        finally:
            self._release()

