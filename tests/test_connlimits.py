"""Connection limits of `murmurd serve` with real sockets against a real daemon: slowloris headers,
stalled bodies, idle keep-alive, the connection cap, abandoned uploads, and streams exempt."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from a2akit import Served, chaos_capsule, serving

HEADER_TIMEOUT = 1.0
BODY_TIMEOUT = 2.0
KEEP_ALIVE = 1.0
CAP = 24
SLACK = 3.0  # scheduling margin on a shared two-core machine


@pytest.fixture(scope="module")
def served(tmp_path_factory, artifacts) -> Iterator[Served]:
    for name in ("chaos-driver", "ask"):
        artifacts.fixture(name)
    artifacts.example("echo")
    root = tmp_path_factory.mktemp("connlimits")
    capsule = chaos_capsule(root, lifecycle={"task_acceptance": "queue", "queue_depth": 10})
    with serving(capsule, root / "state", "--header-timeout", str(HEADER_TIMEOUT), "--body-timeout",
                 str(BODY_TIMEOUT), "--keep-alive", str(KEEP_ALIVE), "--max-connections", str(CAP)) as running:
        yield running


def _address(served: Served) -> tuple[str, int]:
    parts = urlsplit(served.url)
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port


def connect(served: Served, first: bytes = b"") -> socket.socket:
    sock = socket.create_connection(_address(served), timeout=10)
    if first:
        sock.sendall(first)
    return sock


@contextmanager
def sockets(count: int, served: Served, first: bytes = b"") -> Iterator[list[socket.socket]]:
    opened = [connect(served, first) for _ in range(count)]
    try:
        yield opened
    finally:
        for sock in opened:
            sock.close()


def closed_after(sock: socket.socket, limit: float, dribble: bytes = b"") -> float:
    """Seconds until the server closes `sock` (reading and discarding whatever it sends), sending
    `dribble` a byte at a time meanwhile; fails after `limit` seconds."""
    start = time.monotonic()
    pending = bytearray(dribble)
    sock.settimeout(0.2)
    while time.monotonic() - start < limit:
        try:
            if pending:
                sock.sendall(bytes(pending[:1]))
                del pending[:1]
            data = sock.recv(65536)
        except TimeoutError:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return time.monotonic() - start
        if data == b"":
            return time.monotonic() - start
    raise AssertionError(f"the server kept the connection open for {limit} s")


def is_open(sock: socket.socket) -> bool:
    sock.settimeout(0.05)
    try:
        return sock.recv(1, socket.MSG_PEEK) != b""
    except TimeoutError:
        return True
    except OSError:
        return False


def ordinary_request_works(served: Served) -> None:
    card = httpx.get(served.url.rstrip("/") + "/.well-known/agent-card.json", timeout=10)
    assert card.status_code == 200 and card.json()["name"] == "chaos"


def no_tracebacks(served: Served) -> None:
    text = "".join(served.stderr)
    assert "Traceback" not in text and "ClientDisconnect" not in text, text


REQUEST_LINE = b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\n"
BODY_HEADERS = REQUEST_LINE + b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"


def test_slowloris_headers_are_closed_after_the_header_timeout(served: Served) -> None:
    with sockets(1, served, REQUEST_LINE) as [sock]:
        elapsed = closed_after(sock, HEADER_TIMEOUT + SLACK, dribble=b"X-Slow: " + b"a" * 200)
    assert HEADER_TIMEOUT * 0.8 <= elapsed <= HEADER_TIMEOUT + SLACK


def test_a_connection_that_never_sends_is_closed_after_the_header_timeout(served: Served) -> None:
    with sockets(1, served) as [sock]:
        assert closed_after(sock, HEADER_TIMEOUT + SLACK) >= HEADER_TIMEOUT * 0.8


def test_a_stalled_body_is_dropped_quietly(served: Served) -> None:
    with sockets(1, served, BODY_HEADERS + b'{"jsonrpc": "2.0", ') as [sock]:
        elapsed = closed_after(sock, BODY_TIMEOUT + SLACK)
    assert BODY_TIMEOUT * 0.8 <= elapsed <= BODY_TIMEOUT + SLACK
    ordinary_request_works(served)
    no_tracebacks(served)


def test_a_slowly_dripped_body_is_dropped_at_the_body_deadline(served: Served) -> None:
    with sockets(1, served, BODY_HEADERS) as [sock]:
        elapsed = closed_after(sock, BODY_TIMEOUT + SLACK, dribble=b"x" * 999)
    assert elapsed <= BODY_TIMEOUT + SLACK


def test_an_idle_keep_alive_connection_closes(served: Served) -> None:
    request = b"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    with sockets(1, served, request) as [sock]:
        sock.settimeout(10)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        elapsed = closed_after(sock, KEEP_ALIVE + SLACK)
    assert KEEP_ALIVE * 0.8 <= elapsed <= KEEP_ALIVE + SLACK


def test_an_abandoned_upload_is_a_quiet_event(served: Served) -> None:
    with sockets(1, served, BODY_HEADERS + b'{"jsonrpc": "2.0", "id": 1, ') as [sock]:
        time.sleep(0.2)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST
    time.sleep(0.5)
    with sockets(1, served, BODY_HEADERS + b"{") as [sock]:
        time.sleep(0.2)
    time.sleep(0.5)
    ordinary_request_works(served)
    no_tracebacks(served)


def test_an_ordinary_request_works_during_a_flood_and_the_flood_drains(served: Served) -> None:
    with sockets(CAP * 2, served) as idle, sockets(CAP * 2, served, REQUEST_LINE) as slow:
        for _ in range(3):
            ordinary_request_works(served)  # each evicts the oldest connection with no request in flight
        assert served.rpc("tasks/get", {"id": "tsk_none"})["error"]["code"] == -32001
        time.sleep(HEADER_TIMEOUT + SLACK)
        assert not any(is_open(sock) for sock in idle + slow)
    ordinary_request_works(served)


def test_past_the_cap_with_every_connection_busy_a_request_gets_503(served: Served) -> None:
    with sockets(CAP, served, BODY_HEADERS + b"{") as stalled:
        time.sleep(0.3)
        with sockets(1, served, b"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n") as [late]:
            late.settimeout(10)
            answer = late.recv(65536)
            assert answer.startswith(b"HTTP/1.1 503"), answer
            assert closed_after(late, SLACK) <= SLACK
        assert sum(is_open(sock) for sock in stalled) == CAP  # busy connections are never evicted
        time.sleep(BODY_TIMEOUT + SLACK)  # the stalled bodies hit their deadline
        assert not any(is_open(sock) for sock in stalled)
    ordinary_request_works(served)
    no_tracebacks(served)


def test_streams_are_exempt_from_the_body_timeout(served: Served) -> None:
    """A `stream/watch` outlives every deadline and still delivers the next task's events."""
    frames: list = []
    with httpx.Client(timeout=30) as client:
        body = {"jsonrpc": "2.0", "id": 1, "method": "stream/watch", "params": {}}
        with client.stream("POST", served.url, json=body) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            time.sleep(BODY_TIMEOUT + HEADER_TIMEOUT + KEEP_ALIVE + 0.5)
            task = served.send("still there?")
            for line in response.iter_lines():
                frames.append(line)
                if task["id"] in line and '"completed"' in line:
                    break
    assert any(task["id"] in line for line in frames)


def test_serve_refuses_nonsense_limits(tmp_path: Path) -> None:
    import subprocess
    import sys

    from a2akit import ROOT

    for option, value in (("--header-timeout", "0"), ("--max-connections", "0"), ("--body-timeout", "nan"),
                          ("--max-batch", "-1"), ("--retain-finished-count", "-3"), ("--max-streams", "-1"),
                          ("--max-streams-per-client", "0"), ("--max-response-bytes", "0"),
                          ("--write-timeout", "0"), ("--write-timeout", "inf")):
        done = subprocess.run([sys.executable, "-m", "murmurd", "serve", str(tmp_path), option, value],
                              capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert done.returncode == 2 and option in done.stderr, (option, done.stderr)
    # streams must leave ordinary requests a connection
    done = subprocess.run([sys.executable, "-m", "murmurd", "serve", str(tmp_path), "--max-connections", "4",
                           "--max-streams", "4"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 2 and "--max-streams 4 must be below --max-connections 4" in done.stderr, done.stderr


def test_stream_caps_default_below_the_connection_cap() -> None:
    from murmurd.a2a.serve import ServeOptions

    assert ServeOptions().stream_caps == (128, 64)
    assert ServeOptions(max_connections=10).stream_caps == (5, 2)
    assert ServeOptions(max_connections=1).stream_caps == (0, 1)  # one connection: no stream may hold it
    assert ServeOptions(max_connections=10, max_streams=9, max_streams_per_client=9).stream_caps == (9, 9)
    with pytest.raises(ValueError, match="below max_connections"):
        _ = ServeOptions(max_connections=4, max_streams=4).stream_caps


@pytest.mark.parametrize("length", [b"9" * 5000, b"99999999999999999999", b"\xd9\xa1"])
def test_a_hostile_content_length_is_refused_without_a_500(served: Served, length: bytes) -> None:
    with sockets(1, served, REQUEST_LINE + b"Content-Length: " + length + b"\r\n\r\n{}") as [sock]:
        sock.settimeout(10)
        answer = sock.recv(65536)
    status = int(answer.split(b" ", 2)[1])
    assert status in (400, 413), answer
    ordinary_request_works(served)
    no_tracebacks(served)


def answer_of(sock: socket.socket) -> bytes:
    """What the server sends before it closes `sock` (a closed connection with no answer: b"")."""
    sock.settimeout(10)
    chunks = []
    while True:
        try:
            data = sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks)


def test_a_request_head_past_16_kib_is_answered_400_and_closed(served: Served) -> None:
    with sockets(1, served, REQUEST_LINE + b"X-Big: " + b"a" * (20 * 1024) + b"\r\n\r\n") as [sock]:
        assert answer_of(sock).startswith(b"HTTP/1.1 400")
    ordinary_request_works(served)


def test_a_header_sent_piece_by_piece_past_the_limit_is_refused_before_it_ends(served: Served) -> None:
    """The parser buffers a header whose end it has not seen: the bytes are counted as they come."""
    with sockets(1, served, REQUEST_LINE + b"X-Endless: ") as [sock]:
        try:
            for _ in range(512):  # 2 MiB, never ending the header, unless the server answers first
                sock.sendall(b"a" * 4096)
        except (ConnectionResetError, BrokenPipeError):
            pass
        assert answer_of(sock).startswith(b"HTTP/1.1 400")  # the header deadline would close with no answer


def test_a_request_head_of_8_kib_is_served(served: Served) -> None:
    request = (b"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * (8 * 1024)
               + b"\r\nConnection: close\r\n\r\n")
    with sockets(1, served, request) as [sock]:
        assert answer_of(sock).startswith(b"HTTP/1.1 200")


def test_an_http_1_1_request_without_host_is_answered_400(served: Served) -> None:
    with sockets(1, served, b"GET /.well-known/agent-card.json HTTP/1.1\r\n\r\n") as [sock]:
        assert answer_of(sock).startswith(b"HTTP/1.1 400")
    with sockets(1, served, b"GET /.well-known/agent-card.json HTTP/1.0\r\n\r\n") as [sock]:
        assert answer_of(sock).startswith(b"HTTP/1.1 200")  # HTTP/1.0 has no Host rule (as h11)


def test_a_pipelined_request_whose_body_is_still_coming_is_served_not_drained(served: Served) -> None:
    """The first request's answer completes while the second's body is still on its way: only an
    answer to the request whose own body is unread starts draining."""
    body = b'{"jsonrpc": "2.0", "id": 7, "method": "tasks/get", "params": {"id": "tsk_none"}}'
    first = b"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    second = REQUEST_LINE + b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n"
    with sockets(1, served, first + second + body[:10]) as [sock]:
        sock.settimeout(10)
        received = b""
        while b'"name":"chaos"' not in received:
            chunk = sock.recv(65536)
            assert chunk, received
            received += chunk
        sock.sendall(body[10:])
        while b'"id":7' not in received:
            chunk = sock.recv(65536)
            assert chunk, received  # a drained request ends in a close with no answer
            received += chunk
    assert received.count(b"HTTP/1.1 200") == 2 and b"-32001" in received
