"""Connection limits for `murmurd serve`: header and body read deadlines, and a connection cap.

uvicorn bounds idle keep-alive connections (`timeout_keep_alive`) but nothing else: a client that
sends its headers a byte at a time (slowloris), or declares a body and never sends it, holds a
connection and its buffers forever, and any number of connections may be open. This protocol
subclass adds, per connection:

- a header deadline: from the connection's first byte (or from its opening) until a request's
  headers are complete; a keep-alive connection gets a fresh one when its next request starts;
- a body deadline: from the headers until the request body is complete. A stream's response
  may last as long as it likes; only reading the request is timed, so SSE streams are exempt;
- a connection cap: a connection arriving at the cap closes the oldest connection that has no
  request in flight (idle keep-alive, or headers still trickling in); when every connection is
  busy, the newcomer's request is answered 503 and its connection closed;
- an early answer: a request answered before its body was read (the browser guard's 403,
  authentication's 401, the size cap's 413) is drained, never served again: what the client
  still sends is discarded, the connection closes as soon as the body is complete, after
  `keep_alive_secs` without a byte from the client, and at the body deadline at the latest. So
  a refused request holds a connection no longer than an idle keep-alive one (issue 21, item 8);
- a write deadline: a response the client does not read fills the transport's write buffer,
  which holds the whole answer in memory. When the buffer passes its high-water mark (the
  transport pauses writing), or a connection is closed with bytes still unsent, the client has
  `write_timeout_secs` to drain the buffer, and again each period as long as it drains at least
  `MIN_WRITE_PROGRESS` bytes per period; otherwise the connection is aborted and the buffer
  dropped. Streams are included: an SSE reader that stops reading is cut off the same way.

A deadline that passes closes the connection (there is no one to answer: the client is not
sending); the app sees a disconnect, which the router treats as the normal event it is.

The parser is httptools (llhttp, in C), through uvicorn's protocol: h11, in pure Python, cost
about as much CPU per request as everything else the edge does (docs/decisions.md, "Issue 29:
the HTTP edge"). Two rules h11 kept and llhttp does not are kept here: a request's head (request
line and headers) is at most `MAX_HEAD_BYTES`, and an HTTP/1.1 request names its `Host`; either
broken is answered 400 and the connection closed, as h11 did, and so is a request naming two
Hosts. A chunked body's trailer is held to the same size and dropped, as h11 did. An Upgrade
request (llhttp parses nothing after its head) is answered as plain HTTP and its connection
closed; one with a body is answered 400.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, ClassVar

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from murmurd.a2a.http.auth.edge import TLS_SUBJECT_KEY
from murmurd.a2a.http.auth.tls import peer_subject

logger = logging.getLogger("murmurd.connections")

MIN_WRITE_PROGRESS = 64 * 1024
"""Bytes a client must take off a stuck write buffer per write period to be given another."""
MAX_HEAD_BYTES = 16 * 1024
"""A request line and headers past this are refused (h11's default limit, which murmurd had)."""


class BadHead(httptools.HttpParserError):
    """A request head murmurd refuses though llhttp parses it; uvicorn answers it 400 and closes."""


@dataclass(frozen=True)
class ConnectionLimits:
    header_timeout_secs: float = 10.0
    body_timeout_secs: float = 30.0
    keep_alive_secs: float = 5.0
    max_connections: int = 256
    write_timeout_secs: float = 30.0

    def __post_init__(self) -> None:
        if min(self.header_timeout_secs, self.body_timeout_secs, self.keep_alive_secs, self.write_timeout_secs) <= 0:
            raise ValueError("connection timeouts must be positive")
        if self.max_connections < 1:
            raise ValueError("max_connections must be at least 1")


class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with read deadlines and the connection cap (see the module
    doc). Use `protocol_class(limits)`: each server gets its own subclass, limits and registry."""

    limits: ClassVar[ConnectionLimits] = ConnectionLimits()
    registry: ClassVar[dict[GuardedProtocol, None]] = {}  # open connections, oldest first

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._write_deadline: asyncio.TimerHandle | None = None
        self._write_mark = 0  # write buffer size when the current write period began
        self._tls_subject: frozenset[tuple[str, str]] | None = None
        self._draining = False  # answered before its body was read: discard it, then close
        self._quiet: asyncio.TimerHandle | None = None  # while draining: the client's silence
        self._head_raw = 0  # bytes read while a head was incomplete (see data_received)
        self._heads_begun = 0
        self._head_done = False  # the current request's headers are complete
        self._body_pending = False  # the current request's headers are in, its body is not
        self._framing = 0  # bytes read since the head with no body byte among them (see data_received)
        self._body_seen = False  # a body byte arrived in the read being parsed
        self._upgrade_warned = False

    # -- the cap ---------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._tls_subject = peer_subject(transport)  # after the handshake: verified, or None
        if len(self.registry) >= self.limits.max_connections and not self._evict_one():
            self.limit_concurrency = 0  # uvicorn answers this connection's request 503, then closes
            peer = transport.get_extra_info("peername")
            logger.warning("connection refused: %d connections open, every one busy (--max-connections)",
                           len(self.registry), extra={"client": f"{peer[0]}:{peer[1]}" if peer else None,
                                                      "limit": "max_connections"})
        self.registry[self] = None
        self._arm(self.limits.header_timeout_secs)

    def _evict_one(self) -> bool:
        """Close the oldest connection with no request in flight; False when all are busy."""
        for other in self.registry:
            if other._between_requests() and not other.transport.is_closing():
                other._close()
                return True
        return False

    def _between_requests(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def connection_lost(self, exc: Exception | None) -> None:
        self.registry.pop(self, None)
        self._disarm()
        self._disarm_quiet()
        self._disarm_write()
        super().connection_lost(exc)

    # -- the deadlines ---------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        began, in_head = self._heads_begun, not self._head_done
        self._body_seen = False
        super().data_received(data)
        if not self._head_done and not self.transport.is_closing():
            # llhttp buffers a header it has not seen the end of: count what arrives meanwhile. A
            # head that began inside this read is counted from the next read on (its share of
            # this one is unknown), so the buffer holds at most one read past the limit.
            self._head_raw = self._head_raw + len(data) if began == self._heads_begun and in_head else 0
            if self._head_raw > MAX_HEAD_BYTES:
                self.send_400_response("Invalid HTTP request received.")  # as uvicorn answers h11's
                return
        elif self._body_pending and not self.transport.is_closing():
            # a chunked body's trailer is buffered (and re-copied per read) the same way, and no
            # body byte comes after it: reads with no body byte in them are counted as a head's
            self._framing = 0 if self._body_seen or in_head or began != self._heads_begun else (
                self._framing + len(data))
            if self._framing > MAX_HEAD_BYTES:
                logger.warning("connection closed: over %d bytes of chunk framing or trailer with no body",
                               MAX_HEAD_BYTES, extra={"limit": "max_head_bytes"})
                self._close()  # mid-request: the app sees a disconnect, as at a deadline
                return
        if self._draining:
            self._drained_more()
        elif self._between_requests() and self._deadline is None and not self.transport.is_closing():
            self._arm(self.limits.header_timeout_secs)  # the next request on a keep-alive connection

    # -- the parser's callbacks -------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_done = False
        self._heads_begun += 1

    def on_body(self, body: bytes) -> None:
        self._body_seen = True
        super().on_body(body)

    def on_headers_complete(self) -> None:
        headers = self.headers  # as uvicorn collected them, names lower-cased
        if len(self.url) + sum(len(name) + len(value) + 4 for name, value in headers) > MAX_HEAD_BYTES:
            raise BadHead(f"request head over {MAX_HEAD_BYTES} bytes")  # within one read (data_received)
        hosts = sum(name == b"host" for name, _ in headers)
        if hosts > 1 or (hosts == 0 and self.parser.get_http_version() == "1.1"):
            raise BadHead("an HTTP/1.1 request without Host, or a request with two")
        upgrade = self.parser.should_upgrade()
        if upgrade and _declares_body(headers):
            # llhttp takes what follows an Upgrade's head for the new protocol's: its body would
            # reach the app as empty and every request after it would be swallowed
            raise BadHead("an Upgrade request with a body")
        self._head_done = True
        before = self.cycle
        super().on_headers_complete()
        self.headers = []  # a chunked body's trailer lands here: dropped (as h11 did), not in the scope's
        self._disarm()  # the header deadline
        if self.cycle is before:
            return  # an upgrade: not served here
        if upgrade:  # not performed (murmurd has no WebSocket), answered as plain HTTP: llhttp
            self.cycle.keep_alive = False  # parses nothing after it, so the connection ends with it
        if self._tls_subject is not None:  # the app runs later: its scope still takes this
            self.cycle.scope[TLS_SUBJECT_KEY] = self._tls_subject  # type: ignore[literal-required]
        self._body_pending = True
        self._arm(self.limits.body_timeout_secs)  # until on_message_complete, at once for no body

    def _unsupported_upgrade_warning(self) -> None:
        if not self._upgrade_warned:  # uvicorn's warning, once a connection rather than once a read
            self._upgrade_warned = True
            super()._unsupported_upgrade_warning()

    def on_message_complete(self) -> None:
        self._body_pending = False
        self._disarm()
        super().on_message_complete()

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        self._close()

    def _close(self) -> None:
        self._disarm()
        self._disarm_quiet()
        if not self.transport.is_closing():
            self.transport.close()
        self._watch_unsent()

    # -- the write deadline ----------------------------------------------------------------

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._write_deadline is None:
            self._arm_write()

    def resume_writing(self) -> None:
        super().resume_writing()
        self._disarm_write()

    def on_response_complete(self) -> None:
        # the answered request's body is still coming (not a pipelined request's after it)
        early = self._body_pending and self.cycle is not None and self.cycle.response_complete
        super().on_response_complete()
        if early and not self.transport.is_closing():
            self._draining = True  # the body deadline armed at the headers stays: the latest close
            self._drained_more()
        self._watch_unsent()  # uvicorn closes a non-keep-alive connection here

    # -- draining an early answer's body ---------------------------------------------------

    def _drained_more(self) -> None:
        """While draining: close once the body is complete, else give the client another quiet period."""
        if self.transport.is_closing():
            return
        if not self._body_pending:  # the body is complete
            self._close()
            return
        self._disarm_quiet()
        self._quiet = self.loop.call_later(self.limits.keep_alive_secs, self._close)

    def _disarm_quiet(self) -> None:
        if self._quiet is not None:
            self._quiet.cancel()
            self._quiet = None

    def timeout_keep_alive_handler(self) -> None:
        super().timeout_keep_alive_handler()
        self._watch_unsent()

    def _watch_unsent(self) -> None:
        """A closing transport waits for its buffer to drain, however long: time that too."""
        transport = self.transport
        if transport.is_closing() and transport.get_write_buffer_size() > 0 and self._write_deadline is None:
            self._arm_write()

    def _arm_write(self) -> None:
        self._write_mark = self.transport.get_write_buffer_size()
        self._write_deadline = self.loop.call_later(self.limits.write_timeout_secs, self._write_expired)

    def _disarm_write(self) -> None:
        if self._write_deadline is not None:
            self._write_deadline.cancel()
            self._write_deadline = None

    def _write_expired(self) -> None:
        self._write_deadline = None
        unsent = self.transport.get_write_buffer_size()
        if unsent == 0:
            return
        if self._write_mark - unsent >= MIN_WRITE_PROGRESS:
            self._arm_write()  # a slow reader, but a reader
            return
        self._disarm()
        self.transport.abort()  # close() would wait for the buffer to drain


def _declares_body(headers: list[tuple[bytes, bytes]]) -> bool:
    return any(name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0")
               for name, value in headers)


def protocol_class(limits: ConnectionLimits) -> type[GuardedProtocol]:
    """A protocol class for one server (uvicorn's `Config(http=...)`), bound to `limits`."""
    return type("GuardedProtocol", (GuardedProtocol,), {"limits": limits, "registry": {}})
