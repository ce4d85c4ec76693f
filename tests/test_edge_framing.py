"""The HTTP edge's framing rules against a real `murmurd serve` with raw sockets, where llhttp
(httptools) would let a client past what h11 refused: a chunked body's trailer that never ends,
trailers posing as request headers, a request with two Hosts, and Upgrade requests murmurd does
not perform (their body and every request after them were swallowed)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from a2akit import Served, chaos_capsule, serving

HOST = b"Host: 127.0.0.1\r\n"
TRAILER_SENT = 64 * 1024 * 1024  # far past any trailer murmurd should hold (16 KiB and one read)


@pytest.fixture(scope="module")
def served(tmp_path_factory, artifacts) -> Iterator[Served]:
    for name in ("chaos-driver", "ask"):
        artifacts.fixture(name)
    artifacts.example("echo")
    root = tmp_path_factory.mktemp("edge-framing")
    # a body deadline far off: a connection closed here was closed by the rule under test
    with serving(chaos_capsule(root), root / "state", "--body-timeout", "600", "--header-timeout", "600") as running:
        yield running


def connect(served: Served) -> socket.socket:
    parts = urlsplit(served.url)
    assert parts.hostname is not None and parts.port is not None
    return socket.create_connection((parts.hostname, parts.port), timeout=60)


def answers(sock: socket.socket) -> list[bytes]:
    """Every response's status line until the server closes the connection."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return [line for line in data.split(b"\r\n") if line.startswith(b"HTTP/1.1 ")]


def healthy(served: Served) -> None:
    with connect(served) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\n" + HOST + b"Connection: close\r\n\r\n")
        assert answers(sock) == [b"HTTP/1.1 200 OK"]


def test_an_endless_trailer_closes_the_connection(served: Served) -> None:
    """llhttp buffers a trailer field until its line ends (httptools re-copies it per read): one
    connection grew the daemon by hundreds of MiB until the body deadline."""
    sock = connect(served)
    sock.sendall(b"POST / HTTP/1.1\r\n" + HOST + b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\nX-Trailer: ")
    sent, block = 0, b"a" * 65536
    with pytest.raises(OSError):  # reset by the server, long before the 64 MiB are sent
        while sent < TRAILER_SENT:
            sock.sendall(block)
            sent += len(block)
    sock.close()
    healthy(served)


def test_a_chunked_body_with_a_trailer_is_answered(served: Served) -> None:
    """A short trailer is still accepted (its fields are dropped, as h11 did)."""
    request = (b"POST / HTTP/1.1\r\n" + HOST + b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": "t-none"}}).encode()
    with connect(served) as sock:
        sock.sendall(request + b"%x\r\n" % len(body) + body + b"\r\n0\r\nX-Trailer: 1\r\n\r\n")
        assert answers(sock) == [b"HTTP/1.1 200 OK"]


def head_of(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data and (chunk := sock.recv(65536)):
        data += chunk
    return data.split(b"\r\n\r\n")[0].lower()


def test_two_hosts_are_refused(served: Served) -> None:
    """h11 refused a request naming two Hosts; the browser guard reads only the first."""
    with connect(served) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\n" + HOST + b"Host: rebound.example\r\n\r\n")
        assert answers(sock) == [b"HTTP/1.1 400 Bad Request"]


def test_an_upgrade_with_a_body_is_refused(served: Served) -> None:
    """curl --http2 on http:// sends Upgrade: h2c: llhttp took the body for h2c's bytes, and the
    app answered a JSON-RPC parse error for a body it never got."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": "t-none"}}).encode()
    with connect(served) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\n" + HOST + b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
                     b"HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        assert answers(sock) == [b"HTTP/1.1 400 Bad Request"]
    healthy(served)


def test_an_upgrade_is_answered_and_its_connection_closed(served: Served) -> None:
    """llhttp parses nothing after an Upgrade's head: the connection ends with the answer
    instead of holding every later request unanswered."""
    with connect(served) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\n" + HOST + b"Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
        head = head_of(sock)
        assert head.startswith(b"http/1.1 200 ok") and b"\r\nconnection: close" in head
        assert answers(sock) == []  # and then closed


def _send_chunked(served: Served, header: bytes, trailer: bytes) -> dict:
    message = {"messageId": "m-trailer", "role": "user", "parts": [{"text": "hello"}]}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}).encode()
    with connect(served) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\n" + HOST + header + b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                     + b"%x\r\n" % len(body) + body + b"\r\n0\r\n" + trailer + b"\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return json.loads(data.split(b"\r\n\r\n", 1)[1])


def test_a_trailer_does_not_pose_as_a_request_header(served: Served) -> None:
    """httptools hands a trailer's fields to the same callback as the head's, and uvicorn appended
    them to the running request's headers, which the app read after the body: an `A2A-Version`
    sent as a trailer chose the answer's dialect (a header read after authentication could be
    any other)."""
    as_header = _send_chunked(served, b"A2A-Version: 0.3\r\n", b"")
    plain = _send_chunked(served, b"", b"")
    assert as_header["result"] != plain["result"] and "kind" in json.dumps(as_header["result"])  # it tells
    as_trailer = _send_chunked(served, b"", b"A2A-Version: 0.3\r\n")
    assert set(as_trailer["result"]) == set(plain["result"])  # the upstream dialect: the trailer went unread
