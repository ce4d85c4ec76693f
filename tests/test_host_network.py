"""wasi:http under the network grant: refused before any connection without it, real with it.

Every test talks only to a server of its own on 127.0.0.1 (a random port).
"""

from __future__ import annotations

import http.server
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from murmurd.host import CallGrant, ComponentHost, ToolInput, ToolStatus
from murmurd.host.http_policy import DENIED


@dataclass
class Seen:
    """What the server saw: every accepted TCP connection and every request line."""

    connections: list[tuple[str, int]] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def snapshot(self) -> tuple[list[tuple[str, int]], list[str]]:
        with self.lock:
            return list(self.connections), list(self.requests)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, seen: Seen) -> None:
        self.seen = seen
        super().__init__(("127.0.0.1", 0), _Handler)

    def get_request(self):  # type: ignore[no-untyped-def]
        conn, addr = super().get_request()  # one call per accepted TCP connection
        with self.seen.lock:
            self.seen.connections.append(addr)
        return conn, addr


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        server: _Server = self.server  # type: ignore[assignment]
        with server.seen.lock:
            server.seen.requests.append(self.path)
        body = f"hello from {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet
        pass


@dataclass
class Local:
    seen: Seen
    port: int

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@pytest.fixture
def server() -> Iterator[Local]:
    seen = Seen()
    httpd = _Server(seen)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield Local(seen, httpd.server_address[1])
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


@pytest.fixture(scope="module")
def http_get(host: ComponentHost, artifacts):
    return host.load(artifacts.fixture("http-get"))


def _sentinel(local: Local) -> tuple[str, int]:
    """Make one connection of our own and wait until the server has served it.

    The listening socket accepts connections in arrival order, so once the sentinel is
    served, any connection made before it has been accepted (and recorded) too.
    """
    with socket.create_connection(("127.0.0.1", local.port), timeout=5) as sock:
        address = sock.getsockname()
        sock.sendall(b"GET /sentinel HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        assert sock.recv(64).startswith(b"HTTP/1.0 200")
    deadline = time.monotonic() + 5
    while "/sentinel" not in local.seen.snapshot()[1]:
        assert time.monotonic() < deadline, "the server never recorded the sentinel"
        time.sleep(0.01)
    return address


def test_the_fixture_imports_wasi_http(http_get) -> None:
    assert http_get.http_version is not None and http_get.http_version.startswith("0.2.")
    assert f"wasi:http/outgoing-handler@{http_get.http_version}" in http_get.imports


def test_without_a_grant_the_request_is_denied_before_any_connection(host, http_get, server: Local) -> None:
    result = host.call_tool_sync(http_get, ToolInput(data=server.url("/hello")), grant=CallGrant())
    assert result.status is ToolStatus.ERROR
    assert result.summary == f"error-code {DENIED}"
    assert result.data is None
    sentinel = _sentinel(server)
    connections, requests = server.seen.snapshot()
    assert connections == [sentinel]  # the guest opened no TCP connection at all
    assert requests == ["/sentinel"]


@pytest.mark.anyio
async def test_without_a_grant_the_worker_path_is_denied_too(host, http_get, server: Local) -> None:
    result = await host.call_tool(http_get, ToolInput(data=server.url("/async")))
    assert result.status is ToolStatus.ERROR and DENIED in (result.summary or "")
    assert server.seen.snapshot() == ([], [])


def test_with_a_network_grant_the_component_fetches_the_url(host, http_get, server: Local) -> None:
    result = host.call_tool_sync(http_get, ToolInput(data=server.url("/hello")), grant=CallGrant(network=True))
    assert result.status is ToolStatus.PASSED, result.summary
    assert result.data == "status 200"
    assert dict(result.metadata)["body"] == "hello from /hello"
    connections, requests = server.seen.snapshot()
    assert requests == ["/hello"]
    assert len(connections) == 1


def test_the_grant_is_per_call(host, http_get, server: Local) -> None:
    allowed = host.call_tool_sync(http_get, ToolInput(data=server.url("/one")), grant=CallGrant(network=True))
    denied = host.call_tool_sync(http_get, ToolInput(data=server.url("/two")), grant=CallGrant())
    again = host.call_tool_sync(http_get, ToolInput(data=server.url("/three")), grant=CallGrant(network=True))
    assert (allowed.data, again.data) == ("status 200", "status 200")
    assert denied.summary == f"error-code {DENIED}"
    assert server.seen.snapshot()[1] == ["/one", "/three"]


def test_with_a_grant_a_refused_connection_is_a_wasi_error_code(host, http_get) -> None:
    with socket.socket() as probe:  # a port on 127.0.0.1 that nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/"
    result = host.call_tool_sync(http_get, ToolInput(data=url), grant=CallGrant(network=True))
    assert result.status is ToolStatus.ERROR
    assert result.summary == "error-code connection-refused"
