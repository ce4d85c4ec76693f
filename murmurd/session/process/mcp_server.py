"""The per-session loopback MCP server a process-transport CLI reaches the capsule's tools
through (upstream's "Claude Bridge", process-transport.md §5), on the official MCP SDK.

- It binds `127.0.0.1:0` (loopback, whatever the daemon binds), path `/bridge`, server key
  `claude_bridge`. Only the session's CLI holds the run's bearer token (32 hex, fresh per run):
  any request without it gets 401 before the SDK sees it (compared in constant time). The SDK's
  DNS-rebinding guard accepts only a loopback Host.
- Streamable HTTP, stateless, plain JSON answers (no SSE stream is needed: a GET gets 405).
- `tools/list` is exactly the capsule's model-visible tools (WASM tools, skills, the shell
  allowlist: `session.tools.model_tools`); `tools/call` hands the name and arguments to the
  session's tool path (`dispatch`), so decision points, deny hooks, the trace, data-path and
  request-input apply as for any other tool call. The answer is one text block and `isError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import secrets
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import uvicorn
from mcp import types
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import Receive, Scope, Send

from murmurd import __version__ as MURMURD_VERSION
from murmurd.session.driver_protocol import ToolSpec
from murmurd.session.process.command import BRIDGE_NAME, Bridge

PATH = "/bridge"
SERVER_NAME = "murmur-claude-bridge"
Dispatch = Callable[[str, Any], Awaitable[tuple[str, bool]]]

log = logging.getLogger("murmurd.process.mcp")


class _BearerGate:
    """401 for any request without the run's token; a GET (a server-message stream) gets 405."""

    def __init__(self, app: Any, token: str) -> None:
        self.app, self._expected = app, f"bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        given = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
        if not hmac.compare_digest(given.lower(), self._expected):
            return await _plain(send, 401, b"unauthorized")
        if scope.get("path") != PATH:
            return await _plain(send, 404, b"not found")
        if scope["method"] == "GET":
            return await _plain(send, 405, b"method not allowed")
        return await self.app(scope, receive, send)


async def _plain(send: Send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def _mcp_server(tools: list[ToolSpec], dispatch: Dispatch) -> Server[Any]:
    listed = [types.Tool(name=t.name, description=t.description or None, input_schema=t.parameters) for t in tools]
    names = {t.name for t in tools}

    async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def call_tool(_ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        arguments = params.arguments if params.arguments is not None else {}
        if params.name not in names:
            text, is_error = f"tool '{params.name}' failed: not one of this capsule's tools", True
        else:
            try:
                text, is_error = await dispatch(params.name, arguments)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the tool path raised (a failed task): the CLI hears it as an error
                text, is_error = f"tool '{params.name}' failed: {exc}", True
        return types.CallToolResult(content=[types.TextContent(text=text or "tool returned no data")],
                                    is_error=is_error)

    return Server(SERVER_NAME, version=MURMURD_VERSION, on_list_tools=list_tools, on_call_tool=call_tool)


class BridgeServer:
    """One run's MCP server: `async with BridgeServer(tools, dispatch) as bridge:` gives the
    URL and token the CLI is told about; leaving the block stops it."""

    def __init__(self, tools: list[ToolSpec], dispatch: Dispatch) -> None:
        self.token = secrets.token_hex(16)
        self._manager = StreamableHTTPSessionManager(
            app=_mcp_server(tools, dispatch), json_response=True, stateless=True,
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=True,
                                                        allowed_hosts=["127.0.0.1:*"],
                                                        allowed_origins=["http://127.0.0.1:*"]))
        self._server: uvicorn.Server | None = None
        self._serving: asyncio.Task[None] | None = None
        self._stack = contextlib.AsyncExitStack()
        self.bridge: Bridge | None = None

    async def __aenter__(self) -> Bridge:
        await self._stack.enter_async_context(self._manager.run())
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        config = uvicorn.Config(_BearerGate(self._manager.handle_request, self.token), log_config=None,  # never reconfigures murmurd's logging
                                log_level="warning", access_log=False, lifespan="off", timeout_keep_alive=5)
        self._server = uvicorn.Server(config)
        self._server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign]  # the daemon owns them
        self._serving = asyncio.create_task(self._server.serve(sockets=[sock]), name=f"mcp-{BRIDGE_NAME}")
        while not self._server.started:
            if self._serving.done():
                self._serving.result()  # raises what stopped it
                raise RuntimeError("the MCP server stopped before it started")
            await asyncio.sleep(0.01)
        self.bridge = Bridge(f"http://127.0.0.1:{port}{PATH}", self.token)
        return self.bridge

    async def __aexit__(self, *exc: object) -> None:
        try:
            if self._server is not None and self._serving is not None:
                self._server.should_exit = True
                self._server.force_exit = True
                try:
                    await asyncio.wait_for(asyncio.shield(self._serving), 10)
                except (asyncio.TimeoutError, Exception) as problem:  # noqa: BLE001 - never masks the run's own outcome
                    self._serving.cancel()
                    log.debug("the MCP server did not stop cleanly: %s", problem)
        finally:
            await self._stack.aclose()

