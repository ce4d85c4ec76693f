"""Issue 21, item 8: a request answered before its body is read (the browser guard's 403,
authentication's 401, the size cap's 413) never holds its connection longer than the deadlines every connection has.

A real daemon on loopback with a long body deadline and a short keep-alive: a flood of
connections that send `POST /` with a foreign `Host` (or a body over the cap), a large
`Content-Length` and one byte of body, read their refusal and go quiet, is closed at the keep-alive
deadline, far before the body deadline; one that keeps dribbling its body is cut at the body
deadline, exactly as a stalled body with a loopback `Host` is; one that finishes its body is
closed at once. So no caller can hold the connection cap with requests that were refused.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from a2akit import Served, chaos_capsule, serving
from authkit import token_sha256

BODY_TIMEOUT = 10.0
KEEP_ALIVE = 1.0
SLACK = 4.0  # scheduling margin on a shared two-core machine
FLOOD = 100
FOREIGN = b"POST / HTTP/1.1\r\nHost: rebound.example\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
TOKEN = "refused-connections-operator-token"
AUTH = f"Authorization: Bearer {TOKEN}\r\n".encode()
OVER_CAP = (b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\n" + AUTH
            + b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
NO_TOKEN = b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
LOOPBACK = (b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\n" + AUTH
            + b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n")


@pytest.fixture(scope="module")
def served(tmp_path_factory, artifacts) -> Iterator[Served]:
    for name in ("chaos-driver", "ask"):
        artifacts.fixture(name)
    artifacts.example("echo")
    root = tmp_path_factory.mktemp("refused")
    credentials = root / "credentials.yaml"
    credentials.write_text(f"credentials:\n  - {{name: ops, origin: operator, token_sha256: {token_sha256(TOKEN)}}}\n")
    with serving(chaos_capsule(root), root / "state", "--credentials", str(credentials), "--body-timeout", str(BODY_TIMEOUT), "--keep-alive",
                 str(KEEP_ALIVE), "--header-timeout", str(BODY_TIMEOUT), "--max-body-bytes", "50000",
                 "--max-connections", str(FLOOD * 2 + 20)) as running:
        yield running


def _open(served: Served, head: bytes, count: int) -> list[socket.socket]:
    parts = urlsplit(served.url)
    assert parts.hostname is not None and parts.port is not None
    opened = []
    for _ in range(count):
        sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
        sock.sendall(head)
        opened.append(sock)
    return opened


def _read_answer(sock: socket.socket) -> bytes:
    """The refusal's status line and headers (read off the socket, so what follows is EOF or not)."""
    sock.settimeout(30)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before answering: {data!r}"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    while len(rest) < length:
        rest += sock.recv(65536)
    return head


def _closed_within(socks: list[socket.socket], limit: float, dribble: bool = False) -> float:
    """Seconds until the server has closed every socket (reading whatever it sends; with
    `dribble`, one more body byte on each every 0.3 s); fails after `limit` seconds."""
    start, last_drip = time.monotonic(), 0.0
    open_ = set(range(len(socks)))
    for sock in socks:
        sock.setblocking(False)
    while open_ and time.monotonic() - start < limit:
        if dribble and time.monotonic() - last_drip >= 0.3:
            last_drip = time.monotonic()
            for i in list(open_):
                try:
                    socks[i].send(b" ")
                except (BlockingIOError, BrokenPipeError, ConnectionResetError):
                    pass
        for i in list(open_):
            try:
                if socks[i].recv(65536) == b"":
                    open_.discard(i)
            except BlockingIOError:
                pass
            except (ConnectionResetError, BrokenPipeError):
                open_.discard(i)
        time.sleep(0.02)
    assert not open_, f"{len(open_)} of {len(socks)} connections still open after {limit} s"
    return time.monotonic() - start


def _close_all(socks: list[socket.socket]) -> None:
    for sock in socks:
        sock.close()


def _still_served(served: Served) -> None:
    card = httpx.get(served.url.rstrip("/") + "/.well-known/agent-card.json", timeout=30)
    assert card.status_code == 200
    assert "Traceback" not in "".join(served.stderr)


@pytest.mark.parametrize("head, status", [(FOREIGN, b"403"), (NO_TOKEN, b"401"), (OVER_CAP, b"413")],
                         ids=["guard", "authentication", "size-cap"])
def test_refused_then_one_byte_and_quiet_closes_at_the_keep_alive_deadline(served: Served, head: bytes,
                                                                          status: bytes) -> None:
    socks = _open(served, head, FLOOD)
    try:
        for sock in socks:
            assert _read_answer(sock).split(b" ")[1] == status
        for sock in socks:
            sock.sendall(b"{")  # one byte of the declared 100000, after the refusal
        elapsed = _closed_within(socks, KEEP_ALIVE + SLACK)
    finally:
        _close_all(socks)
    assert elapsed < BODY_TIMEOUT  # never held to the body deadline
    _still_served(served)


def test_a_refused_request_that_keeps_dribbling_is_cut_at_the_body_deadline_like_a_loopback_one(
        served: Served) -> None:
    refused = _open(served, FOREIGN + b"{", FLOOD)
    stalled = _open(served, LOOPBACK + b"{", 10)
    try:
        for sock in refused:
            assert _read_answer(sock).split(b" ")[1] == b"403"
        started = time.monotonic()
        _closed_within(refused + stalled, BODY_TIMEOUT + SLACK, dribble=True)
        assert time.monotonic() - started >= BODY_TIMEOUT * 0.5  # the body deadline, not earlier
    finally:
        _close_all(refused + stalled)
    _still_served(served)


def test_a_refused_request_whose_body_completes_is_closed_at_once(served: Served) -> None:
    head = b"POST / HTTP/1.1\r\nHost: rebound.example\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n"
    socks = _open(served, head, 20)
    try:
        for sock in socks:
            assert _read_answer(sock).split(b" ")[1] == b"403"
            sock.sendall(b"{}")
        elapsed = _closed_within(socks, SLACK)
    finally:
        _close_all(socks)
    assert elapsed < KEEP_ALIVE + SLACK
    _still_served(served)
