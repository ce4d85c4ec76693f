"""The ASGI app of one served capsule: agent card, JSON-RPC on `POST /`, SSE streams.

One router serves three dialects over the daemon's one task model; the SSE responses it opens
are built in `sse` (which also holds the stream slots). Every failure becomes a
JSON-RPC error (HTTP 200, as A2A clients expect, or 413 for an oversized body); nothing a client
sends can produce a 500 or stop the daemon.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from murmurd import console
from murmurd.a2a.http import cors, get_streams, health, inbound, task_trace, ticket_mint
from murmurd.a2a.wire import jsonrpc
from murmurd.a2a import wire
from murmurd.a2a.http.browser_guard import BrowserGuard
from murmurd.a2a.http.auth.config import AuthConfig
from murmurd.a2a.http.auth.current import CurrentAuth
from murmurd.a2a.http.auth.edge import HTTP_STATUS, AuthMiddleware, Caller, forbidden
from murmurd.a2a.http.auth.principal import at_least_as_trusted
from murmurd.a2a.http.auth.visibility import creator_filter, may_read
from murmurd.a2a.http.card import agent_card
from murmurd.a2a.http.sse import (
    SlotStream,
    StreamSlots,
    a2a_stream,
    last_event_id,
    upstream_stream,
    watch_stream,
)
from murmurd.a2a.core.daemon import CapsuleDaemon
from murmurd.a2a.core.intake import (
    ContextRefused,
    NotAReply,
    ReplyRefused,
    Submission,
    TaskIdTaken,
    TaskNotCancelable,
    TaskNotFound,
    TooManyOpenContexts,
)
from murmurd.a2a.core.tasks import TaskRecord
from murmurd.a2a.http.tickets import DEFAULT_TTL_SECONDS, TicketSigner
from murmurd.a2a.wire import Dialect, Operation
from murmurd.session.tools import model_tools, shell_allow

log = logging.getLogger("murmurd.a2a")

# The dialects that follow the A2A specification's error rules (finished tasks, push configs).
SPEC_DIALECTS = frozenset({Dialect.V03, Dialect.V10})


class _Abandoned:
    """What `read_capped` answers when the client went away mid-body."""


DISCONNECTED = _Abandoned()


@dataclass(frozen=True)
class ServerConfig:
    url: str
    max_body_bytes: int = 1024 * 1024
    max_batch: int = 100  # requests in one JSON-RPC batch
    max_response_bytes: int = 4 * 1024 * 1024  # a batch's answers, encoded
    max_streams: int = 128  # open SSE streams: keep it below the connection cap
    max_streams_per_client: int = 64  # open SSE streams from one peer address
    auth: CurrentAuth = field(default_factory=CurrentAuth)  # no credential: every caller is the operator
    mtls: bool = False  # murmurd terminates TLS and verifies client certificates
    cors_origins: tuple[str, ...] = ()  # origins a browser page may call from; none by default
    stream_ticket_ttl: float = DEFAULT_TTL_SECONDS  # how long a minted stream ticket opens its stream
    ticket_key: bytes | None = None  # replicas share one (the database's); None: this app's own random key
    loopback_bind: bool = False  # bound to a loopback address: foreign Host names are refused (DNS rebinding)


def caller_of(request: Request) -> Caller:
    """Who sent the request, as the auth middleware proved it (origin and trust from the
    credential, narrowed by the `x-murmur-task-*` headers; never from the body)."""
    return request.state.caller  # type: ignore[no-any-return]


def _status_of(response: Any) -> int:
    """401/403 for a single request refused for its credential, else 200."""
    if isinstance(response, dict) and isinstance(response.get("error"), dict):
        return HTTP_STATUS.get(response["error"].get("code"), 200)
    return 200


async def read_capped(request: Request, limit: int) -> bytes | _Abandoned | None:
    """The body, None once it passes `limit` bytes (read no further than that), or DISCONNECTED
    when the client abandons it mid-upload (a normal event, not an error)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isascii() and declared.isdigit() and (
            len(declared) > 19 or int(declared) > limit):  # no int() of a 5000-digit header
        return None
    body = bytearray()
    try:
        async for chunk in request.stream():
            body.extend(chunk)
            if len(body) > limit:
                return None
    except ClientDisconnect:
        return DISCONNECTED
    return bytes(body)


class _JSONResponse(JSONResponse):
    """A JSON answer that cannot fail to encode: the edge refuses text that is not valid Unicode,
    and should any slip through it is sent escaped (`\\ud800`) instead of becoming a 500."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except UnicodeEncodeError:
            return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


def create_app(daemon: CapsuleDaemon, config: ServerConfig) -> FastAPI:
    router = Router(daemon, config)
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    staged = daemon.staged
    tools = model_tools(staged)

    def card_for(auth: AuthConfig) -> dict[str, Any]:
        return agent_card(
            staged.manifest.name, staged.manifest.version, "", config.url,
            [t.name for t in tools], bool(shell_allow(staged)), bool(staged.grants.capsule.network),
            tool_descriptions={t.name: t.description for t in tools},
            bearer=any(c.digest is not None for c in auth.credentials),
            mtls=config.mtls and auth.uses_tls_subjects,
        )

    built = (config.auth.config, card_for(config.auth.config))  # rebuilt when credentials are reloaded

    @app.get("/.well-known/agent-card.json")
    @app.get("/.well-known/agent.json")
    async def agent_card_route() -> JSONResponse:
        nonlocal built
        if built[0] is not config.auth.config:
            built = (config.auth.config, card_for(config.auth.config))
        return JSONResponse(built[1])

    @app.post("/")  # answered by JsonRpcEndpoint below; here for the 405 a GET / gets
    async def jsonrpc_route(request: Request) -> Response:
        return await router.dispatch(request)

    app.include_router(get_streams.routes(router))
    tickets = (TicketSigner.generate(config.stream_ticket_ttl) if config.ticket_key is None  # never written anywhere
               else TicketSigner(config.ticket_key, config.stream_ticket_ttl))
    app.include_router(ticket_mint.routes(router, tickets))
    app.include_router(task_trace.routes(router))
    console.add_console(app)
    app.include_router(health.routes(daemon))  # /healthz, /readyz, /metrics
    daemon.metrics.watch_streams(lambda: router.streams.total)
    app.add_middleware(JsonRpcEndpoint, router=router)  # inside authentication: every POST / is authenticated
    # every route above needs a credential once one is configured (auth/edge.EXEMPT_PATHS aside);
    # CORS goes outside it, so a preflight is answered and a 401 still carries the CORS headers
    app.add_middleware(AuthMiddleware, auth=config.auth, tickets=tickets)
    # outside authentication: a page on a foreign origin or a rebound name is refused first
    app.add_middleware(BrowserGuard, origins=config.cors_origins, public_url=config.url, loopback=config.loopback_bind)
    cors.add_cors(app, config.cors_origins)
    return app


class JsonRpcEndpoint:
    """`POST /` answered as soon as authentication has let it through: the endpoint every task
    comes by skips FastAPI's exception layer, route matching and request wrapping, which cost
    about as much per request as the dispatch itself. Every other request goes on to the app."""

    def __init__(self, app: ASGIApp, *, router: Router) -> None:
        self.app, self.router = app, router

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == "/":
            response = await self.router.dispatch(Request(scope, receive))
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


class Router:
    def __init__(self, daemon: CapsuleDaemon, config: ServerConfig) -> None:
        self.daemon = daemon
        self.config = config
        self.streams = StreamSlots(config.max_streams, config.max_streams_per_client)

    async def dispatch(self, request: Request) -> Response:
        body = await read_capped(request, self.config.max_body_bytes)
        if isinstance(body, _Abandoned):
            return Response(status_code=400)  # nobody is listening; uvicorn drops it
        if body is None:
            error = jsonrpc.JsonRpcError.request_too_large(self.config.max_body_bytes)
            return _JSONResponse(jsonrpc.error_response(None, error), status_code=413)
        try:
            parsed = jsonrpc.parse_body(body, max_batch=self.config.max_batch)
        except jsonrpc.JsonRpcError as error:
            return _JSONResponse(jsonrpc.error_response(None, error))
        if not parsed.is_batch and len(parsed.entries) == 1:
            entry = parsed.entries[0]
            if isinstance(entry, jsonrpc.JsonRpcRequest) and self._is_streaming(entry, request):
                return await self._stream(entry, request)

        async def handle(entry: jsonrpc.JsonRpcRequest) -> Any:
            if self._is_streaming(entry, request):
                raise jsonrpc.JsonRpcError.invalid_request("streaming methods cannot be part of a batch")
            try:
                return jsonrpc.result_response(entry.id, await self._call(entry, request))
            except jsonrpc.JsonRpcError:
                raise
            except Exception:
                log.exception("JSON-RPC %s failed", entry.method)
                raise

        result = await jsonrpc.run(parsed, handle, self.config.max_response_bytes)
        if result is None:
            return Response(status_code=204)
        return _JSONResponse(result, status_code=200 if parsed.is_batch else _status_of(result))

    async def read_body(self, request: Request, limit: int) -> bytes | None:
        """The body of a small POST route, None when it passes `limit` or was abandoned."""
        body = await read_capped(request, limit)
        return body if isinstance(body, bytes) else None

    def caller(self, request: Request) -> Caller:
        return caller_of(request)

    def refuse(self, status: int, failure: jsonrpc.JsonRpcError, headers: dict[str, str] | None = None) -> Response:
        """A plain HTTP refusal (GET routes) with a JSON-RPC error object as its body."""
        return _JSONResponse(jsonrpc.error_response(None, failure), status_code=status, headers=headers)

    def _is_streaming(self, entry: jsonrpc.JsonRpcRequest, request: Request) -> bool:
        try:
            return wire.lookup_method(entry.method)[1].streaming
        except jsonrpc.JsonRpcError:
            return False

    def _resolve(self, entry: jsonrpc.JsonRpcRequest, request: Request) -> tuple[Dialect, Operation]:
        task_dialect = None
        if isinstance(entry.params, dict):
            task_id = entry.params.get("id") or entry.params.get("taskId")
            if isinstance(task_id, str):
                task_dialect = self.daemon.dialect_of(task_id)
        dialect, operation = wire.resolve_dialect(entry.method, entry.params, request.headers, task_dialect=task_dialect)
        if operation in (Operation.SEND, Operation.STREAM) and self.daemon.policy.task_acceptance == "none":
            raise jsonrpc.JsonRpcError.method_not_found(f"{entry.method} (this capsule accepts no tasks: task_acceptance none)")
        return dialect, operation

    # -- request/response methods ------------------------------------------------------------

    async def _call(self, entry: jsonrpc.JsonRpcRequest, request: Request) -> Any:
        inbound.check_params(entry.params)
        dialect, operation = self._resolve(entry, request)
        if operation is Operation.PUSH_CONFIG:
            raise jsonrpc.JsonRpcError.push_notification_not_supported()
        if operation is Operation.EXTENDED_CARD:
            if dialect is Dialect.V03:
                raise jsonrpc.JsonRpcError.extended_card_not_configured()
            raise jsonrpc.JsonRpcError.unsupported_operation("the agent card declares no extended agent card")
        if operation is Operation.SEND:
            send = wire.parse_send_params(dialect, entry.params)
            record = await self._submit(dialect, send, request)
            if send.blocking:
                record = await self.daemon.wait_settled(record)
            return wire.render_send_result(dialect, record, send.history_length)
        if operation is Operation.GET:
            query = wire.parse_task_query(dialect, entry.params)
            return wire.render_task(dialect, await self._readable(request, query.task_id), query.history_length)
        if operation is Operation.CANCEL:
            query = wire.parse_task_query(dialect, entry.params)
            # readable first (a task it may not read is unknown to it), then the trust rule
            self._may_act_on(request, await self._readable(request, query.task_id))
            try:
                record = await self.daemon.cancel(query.task_id)
            except TaskNotFound:
                raise jsonrpc.JsonRpcError.task_not_found(query.task_id) from None
            except TaskNotCancelable:
                state = (await self._get(query.task_id)).state.value
                raise jsonrpc.JsonRpcError.task_not_cancelable(query.task_id, state) from None
            return wire.render_task(dialect, record)
        if operation is Operation.LIST:
            listing = wire.parse_list_params(dialect, entry.params)
            # the state filter applies in the store, before the page is cut; the total counts
            # every matching task, not the page
            creator = creator_filter(caller_of(request).principal)  # a peer lists only its own tasks
            records = await self.daemon.list(listing.context_id, listing.page_size + 1, listing.offset, listing.state,
                                             creator)
            total = await self.daemon.count(listing.context_id, listing.state, creator)
            more = len(records) > listing.page_size
            page = records[: listing.page_size]
            token = wire.encode_page_token(listing.offset + listing.page_size) if more else None
            return wire.render_list(dialect, page, token, page_size=listing.page_size,
                                    total_size=total,
                                    history_length=listing.history_length,
                                    include_artifacts=listing.include_artifacts)
        raise jsonrpc.JsonRpcError.method_not_found(entry.method)

    def _may_act_on(self, request: Request, record: TaskRecord) -> None:
        """Cancelling a task takes a credential at least as trusted as its creator's (as a
        reply does), or an operator."""
        principal = caller_of(request).principal
        if not at_least_as_trusted(principal, self.config.auth.config.principal_named(record.principal)):
            raise forbidden(f"task {record.id} was created by a more trusted credential; "
                            "only it, an equally trusted credential or an operator may cancel it")

    async def _get(self, task_id: str) -> TaskRecord:
        try:
            return await self.daemon.get(task_id)
        except TaskNotFound:
            raise jsonrpc.JsonRpcError.task_not_found(task_id) from None

    async def _readable(self, request: Request, task_id: str) -> TaskRecord:
        """The task, when the caller may read it (auth/visibility.py); a task it may not read
        is answered exactly as an unknown one."""
        record = await self._get(task_id)
        if not may_read(caller_of(request).principal, record.principal):
            raise jsonrpc.JsonRpcError.task_not_found(task_id)
        return record

    async def _submit(self, dialect: Dialect, send: wire.SendRequest, request: Request) -> TaskRecord:
        caller = caller_of(request)
        auth = self.config.auth.config
        message = send.message
        task_id, requested = send.task_id, None
        if send.client_task_id and task_id is not None and self.daemon.dialect_of(task_id) is None:
            known = await self.daemon.store.get(task_id)
            if known is None:
                task_id, requested = None, send.task_id
        submission = Submission(message, task_id, send.context_id, caller.identity.origin, caller.identity.trust,
                                request.headers.get("traceparent"), requested, principal=caller.principal.name,
                                may_reply=lambda creator: at_least_as_trusted(caller.principal, auth.principal_named(creator)),
                                confined_to=creator_filter(caller.principal))
        try:
            record = await self.daemon.submit(submission)
        except (ReplyRefused, ContextRefused) as exc:
            raise forbidden(str(exc)) from None
        except TaskNotFound as exc:
            raise jsonrpc.JsonRpcError.task_not_found(str(exc)) from None
        except TaskIdTaken as exc:
            raise jsonrpc.JsonRpcError.invalid_params(str(exc), {"taskId": exc.task_id}) from None
        except TooManyOpenContexts as exc:
            raise jsonrpc.JsonRpcError.server_limit(str(exc), {"limit_open_contexts": exc.limit}) from None
        except NotAReply as exc:
            if exc.finished and dialect in SPEC_DIALECTS:  # a finished task takes no more messages
                raise jsonrpc.JsonRpcError.unsupported_operation(str(exc)) from None
            raise jsonrpc.JsonRpcError.invalid_params(str(exc)) from None
        if self.daemon.dialect_of(record.id) is None:
            self.daemon.remember_dialect(record.id, dialect)
        return record

    # -- streams -----------------------------------------------------------------------------

    async def _stream(self, entry: jsonrpc.JsonRpcRequest, request: Request) -> Response:
        """A stream, holding one of the stream slots from before its task is submitted (a
        refused stream creates no task) until its response ends."""
        return await self._in_slot(request, entry.id, lambda release: self._open_stream(entry, request, release))

    async def _in_slot(self, request: Request, request_id: Any,
                       open_stream: Callable[[Callable[[], None]], Awaitable[Response]]) -> Response:
        """`open_stream(release)`'s response, holding a stream slot until that response ends
        (at once when it is not a stream)."""
        client = request.client.host if request.client is not None else ""
        refusal = self.streams.take(client)
        if refusal is not None:
            return _JSONResponse(jsonrpc.error_response(request_id, refusal), status_code=503,
                                 headers={"Retry-After": "1"})
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.streams.give_back(client)

        try:
            response = await open_stream(release)
        except BaseException:
            release()
            raise
        if not isinstance(response, SlotStream):
            release()
        return response

    async def _open_stream(self, entry: jsonrpc.JsonRpcRequest, request: Request,
                           release: Callable[[], None]) -> Response:
        try:
            inbound.check_params(entry.params)
            dialect, operation = self._resolve(entry, request)
            if operation is Operation.WATCH:
                return self._watch(request, release)
            after, joining = self.daemon.log.last_id, False  # before the read: nothing missed
            if operation is Operation.STREAM:
                send = wire.parse_send_params(dialect, entry.params)
                record = await self._submit(dialect, send, request)
            else:
                query = wire.parse_task_query(dialect, entry.params)
                record = await self._readable(request, query.task_id)
                if record.state.terminal and dialect in SPEC_DIALECTS:
                    raise jsonrpc.JsonRpcError.unsupported_operation(
                        f"task {query.task_id} is {record.state.value}; a finished task has nothing to subscribe to")
                resumed = last_event_id(request, default=-1)
                joining, after = (True, after) if resumed < 0 else (False, resumed)
        except jsonrpc.JsonRpcError as error:
            response = jsonrpc.error_response(entry.id, error)
            return _JSONResponse(response, status_code=_status_of(response))
        except Exception:  # a bug must not become a 500
            log.exception("JSON-RPC %s failed before its stream started", entry.method)
            return _JSONResponse(jsonrpc.error_response(entry.id, jsonrpc.JsonRpcError.internal_error()))
        if dialect is Dialect.UPSTREAM:
            return upstream_stream(self.daemon, record, after, release)
        return a2a_stream(self.daemon, dialect, entry.id, record, after, release, joining=joining)

    # -- GET streams (EventSource; see murmurd.a2a.http.get_streams) -------------------------------

    async def get_watch_stream(self, request: Request, query: get_streams.StreamQuery) -> Response:
        """`GET /stream`: the watch stream from now, or after `query.after`."""
        after = self.daemon.log.last_id if query.after is None else query.after

        async def open_stream(release: Callable[[], None]) -> Response:
            return watch_stream(self.daemon, after, release, caller_of(request).principal, retry=True)

        return await self._in_slot(request, None, open_stream)

    async def get_task_stream(self, request: Request, task_id: str, query: get_streams.StreamQuery) -> Response:
        """`GET /tasks/{id}/stream`: the task's buffered events and then its live ones (a
        finished task's replay, then it closes); after `query.after` when given."""
        async def open_stream(release: Callable[[], None]) -> Response:
            try:
                record = await self.daemon.get(task_id)
            except TaskNotFound:
                return self.refuse(404, jsonrpc.JsonRpcError.task_not_found(task_id))
            if not may_read(caller_of(request).principal, record.principal):  # as if it did not exist
                return self.refuse(404, jsonrpc.JsonRpcError.task_not_found(task_id))
            after = 0 if query.after is None else query.after
            if query.framing == "upstream":
                return upstream_stream(self.daemon, record, after, release, retry=True)
            dialect = get_streams.a2a_dialect(self.daemon.dialect_of(record.id))
            return a2a_stream(self.daemon, dialect, None, record, after, release, retry=True)

        return await self._in_slot(request, None, open_stream)

    def _watch(self, request: Request, release: Callable[[], None]) -> Response:
        return watch_stream(self.daemon, last_event_id(request, default=self.daemon.log.last_id), release,
                            caller_of(request).principal)
