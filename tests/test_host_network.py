"""wasi:http under the network grant: a request reaches exactly the origins the grant lists.

Every test talks only to servers of its own on loopback (127.0.0.1 and 127.0.0.2, random
ports), each counting the TCP connections its listening socket accepts: a refused request is
one that no server ever saw a connection for.
"""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from wasmtime import wat2wasm

from murmurd.host import CallGrant, ComponentHost, SessionContext, ToolInput, ToolStatus
from murmurd.host.http_egress import EgressDenial
from murmurd.host.http_policy import DENIED, MAX_TRACED_DENIALS


@pytest.fixture(scope="module", params=["in-process", "worker process"])
def host(request: pytest.FixtureRequest, host: ComponentHost, worker_host: ComponentHost) -> ComponentHost:
    """Every test here runs twice: calls in this process, and in a WASM worker process."""
    return host if request.param == "in-process" else worker_host


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

    def __init__(self, seen: Seen, address: str) -> None:
        self.seen = seen
        super().__init__((address, 0), _Handler)

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
    address: str = "127.0.0.1"

    @property
    def origin(self) -> str:
        return f"http://{self.address}:{self.port}"

    def url(self, path: str, scheme: str = "http", host: str | None = None) -> str:
        return f"{scheme}://{host or self.address}:{self.port}{path}"


def _serve(address: str = "127.0.0.1") -> Iterator[Local]:
    seen = Seen()
    httpd = _Server(seen, address)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield Local(seen, httpd.server_address[1], address)
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


@pytest.fixture
def server() -> Iterator[Local]:
    """Host A: the origin a grant names."""
    yield from _serve()


@pytest.fixture
def other_host() -> Iterator[Local]:
    """Host B: another loopback address (127.0.0.2), its own port."""
    yield from _serve("127.0.0.2")


@pytest.fixture
def other_port() -> Iterator[Local]:
    """A's host on another port."""
    yield from _serve()


@pytest.fixture(scope="module")
def http_get(host: ComponentHost, artifacts):
    return host.load(artifacts.fixture("http-get"))


class Denials(SessionContext):
    """A session context that keeps what the host reports refused (the session traces it)."""

    def __init__(self) -> None:
        self.seen: list[EgressDenial] = []

    def egress_denied(self, denial: EgressDenial) -> None:
        self.seen.append(denial)


def _sentinel(local: Local) -> tuple[str, int]:
    """Make one connection of our own and wait until the server has served it.

    The listening socket accepts connections in arrival order, so once the sentinel is
    served, any connection made before it has been accepted (and recorded) too.
    """
    with socket.create_connection((local.address, local.port), timeout=5) as sock:
        address = sock.getsockname()
        sock.sendall(b"GET /sentinel HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        reply = b""
        while chunk := sock.recv(4096):  # read to the end: the server closes an HTTP/1.0 reply
            reply += chunk
        assert reply.startswith(b"HTTP/1.0 200")
    deadline = time.monotonic() + 5
    while "/sentinel" not in local.seen.snapshot()[1]:
        assert time.monotonic() < deadline, "the server never recorded the sentinel"
        time.sleep(0.01)
    return address


def test_the_fixture_imports_wasi_http(http_get) -> None:
    assert http_get.http_version is not None and http_get.http_version.startswith("0.2.")
    assert f"wasi:http/outgoing-handler@{http_get.http_version}" in http_get.imports


def _no_connection(local: Local) -> None:
    """Nothing but our own sentinel ever reached `local`'s listening socket."""
    sentinel = _sentinel(local)
    connections, requests = local.seen.snapshot()
    assert connections == [sentinel]
    assert requests == ["/sentinel"]


def test_without_a_grant_the_request_is_denied_before_any_connection(host, http_get, server: Local) -> None:
    session = Denials()
    result = host.call_tool_sync(http_get, ToolInput(data=server.url("/hello")), grant=CallGrant(), session=session)
    assert result.status is ToolStatus.ERROR
    assert result.summary == f"error-code {DENIED}"
    assert result.data is None
    _no_connection(server)  # the guest opened no TCP connection at all
    (denial,) = session.seen
    assert (denial.artifact, denial.reason) == ("http-get", "no network grant")


@pytest.mark.anyio
async def test_without_a_grant_the_worker_path_is_denied_too(host, http_get, server: Local) -> None:
    result = await host.call_tool(http_get, ToolInput(data=server.url("/async")))
    assert result.status is ToolStatus.ERROR and DENIED in (result.summary or "")
    assert server.seen.snapshot() == ([], [])


def test_the_granted_origin_is_reached(host, http_get, server: Local) -> None:
    session = Denials()
    grant = CallGrant(network=(server.origin,))
    result = host.call_tool_sync(http_get, ToolInput(data=server.url("/hello")), grant=grant, session=session)
    assert result.status is ToolStatus.PASSED, result.summary
    assert result.data == "status 200"
    assert dict(result.metadata)["body"] == "hello from /hello"
    connections, requests = server.seen.snapshot()
    assert requests == ["/hello"]
    assert len(connections) == 1
    assert session.seen == []


@pytest.mark.parametrize("target", ["other-host", "other-port", "other-scheme", "userinfo", "another-name"])
def test_every_other_origin_is_refused_before_any_connection(
    host, http_get, server: Local, other_host: Local, other_port: Local, target: str
) -> None:
    """Granted `http://127.0.0.1:<A>` only: B on 127.0.0.2, A's host on another port, A over
    https, A with user information, and A by another name of the same address are all refused."""
    url, reached, origin = {
        "other-host": (other_host.url("/b"), other_host, other_host.origin),
        "other-port": (other_port.url("/c"), other_port, other_port.origin),
        "other-scheme": (server.url("/s", scheme="https"), server, f"https://127.0.0.1:{server.port}"),
        "userinfo": (server.url("/u", host="user:pw@127.0.0.1"), server, None),
        "another-name": (server.url("/n", host="localhost"), server, f"http://localhost:{server.port}"),
    }[target]
    session = Denials()
    grant = CallGrant(network=(server.origin,))
    result = host.call_tool_sync(http_get, ToolInput(data=url), grant=grant, session=session)
    assert result.status is ToolStatus.ERROR
    for local in (server, other_host, other_port):
        _no_connection(local)
    if target == "userinfo" and result.summary == f"set-authority refused 'user:pw@127.0.0.1:{server.port}'":
        assert session.seen == []  # wasmtime (51 on) refused it itself, before the request existed
        return
    assert result.summary == f"error-code {DENIED}"
    (denial,) = session.seen
    assert denial.artifact == "http-get"
    assert denial.interface == "wasi:http/outgoing-handler#handle"
    assert denial.origin == origin
    assert denial.reason == ("not in capabilities.network.allow" if origin
                             else "the request names no http(s) origin that can be checked")


@pytest.mark.parametrize("entry", ["{host}:{port}", "HTTP://{host}:{port}/", "LOCALHOST.:{port}"])
def test_each_entry_form_reaches_its_origin(host, http_get, server: Local, entry: str) -> None:
    name = "localhost" if entry.startswith("LOCALHOST") else server.address
    grant = CallGrant(network=(entry.format(host=server.address, port=server.port),))
    result = host.call_tool_sync(http_get, ToolInput(data=server.url("/form", host=name)), grant=grant)
    assert (result.status, result.data) == (ToolStatus.PASSED, "status 200"), result.summary


def test_a_bare_host_lists_only_the_default_ports(host, http_get, server: Local) -> None:
    grant = CallGrant(network=(server.address,))  # http://127.0.0.1:80 and https://127.0.0.1:443
    result = host.call_tool_sync(http_get, ToolInput(data=server.url("/bare")), grant=grant)
    assert result.summary == f"error-code {DENIED}"
    _no_connection(server)


def test_the_grant_is_per_call(host, http_get, server: Local, other_host: Local) -> None:
    to_a = CallGrant(network=(server.origin,))
    to_b = CallGrant(network=(other_host.origin,))
    allowed = host.call_tool_sync(http_get, ToolInput(data=server.url("/one")), grant=to_a)
    denied = host.call_tool_sync(http_get, ToolInput(data=server.url("/two")), grant=to_b)
    nothing = host.call_tool_sync(http_get, ToolInput(data=server.url("/three")), grant=CallGrant())
    again = host.call_tool_sync(http_get, ToolInput(data=server.url("/four")), grant=to_a)
    assert (allowed.data, again.data) == ("status 200", "status 200")
    assert denied.summary == nothing.summary == f"error-code {DENIED}"
    assert server.seen.snapshot()[1] == ["/one", "/four"]
    assert other_host.seen.snapshot() == ([], [])


def test_with_a_grant_a_refused_connection_is_a_wasi_error_code(host, http_get) -> None:
    with socket.socket() as probe:  # a port on 127.0.0.1 that nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/"
    result = host.call_tool_sync(http_get, ToolInput(data=url), grant=CallGrant(network=(f"127.0.0.1:{port}",)))
    assert result.status is ToolStatus.ERROR
    assert result.summary == "error-code connection-refused"  # the native client's own answer, forwarded


def test_a_guest_cannot_go_around_wasi_http_through_wasi_sockets(host) -> None:
    """`wasi:sockets` is linked with WASI, so a guest could try a TCP connection of its own; under
    the WASI context murmurd configures, wasmtime refuses to create the socket at all, whatever
    the network grant says, and the listener never accepts anything."""
    wat = (Path(__file__).parent / "fixtures" / "tcp-connect.wat").read_text()
    probe = host.load_bytes(wat2wasm(wat), name="tcp-connect")
    assert "wasi:sockets/tcp@0.2.0" in probe.imports
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(0.3)
        port = listener.getsockname()[1]
        for grant in (CallGrant(), CallGrant(network=(f"127.0.0.1:{port}",))):
            result = host.call_tool_sync(probe, ToolInput(data=str(port)), grant=grant)
            assert (result.status, result.summary) == (ToolStatus.FAILED, "access-denied")
        with pytest.raises(TimeoutError):
            listener.accept()  # nothing ever connected


def test_one_store_checks_every_request(host, http_get, server: Local, other_host: Local) -> None:
    """Several requests in one call share the store's forwarder; each is judged on its own."""
    session = Denials()
    urls = [server.url("/1"), other_host.url("/2"), server.url("/3"), server.url("/4", scheme="https"), server.url("/5")]
    grant = CallGrant(network=(server.origin,))
    result = host.call_tool_sync(http_get, ToolInput(data=json.dumps({"urls": urls})), grant=grant, session=session)
    assert result.status is ToolStatus.PASSED, result.summary
    denied = f"error-code {DENIED}"
    assert (result.data or "").split("\n") == ["status 200", denied, "status 200", denied, "status 200"]
    assert server.seen.snapshot()[1] == ["/1", "/3", "/5"]
    assert len(server.seen.snapshot()[0]) == 3
    _no_connection(other_host)
    assert [d.origin for d in session.seen] == [other_host.origin, f"https://127.0.0.1:{server.port}"]


def test_every_imported_version_of_the_handler_is_filtered(host, server: Local, other_host: Local) -> None:
    """A component may import `outgoing-handler` at two versions (0.2.0 and 0.2.3 are distinct
    names) and send through the second: both go through the filter, none to the native client."""
    wat = (Path(__file__).parent / "fixtures" / "http-two-versions.wat").read_text()
    hostile = host.load_bytes(wat2wasm(wat), name="http-two-versions")
    assert hostile.imports[1:] == ("wasi:http/outgoing-handler@0.2.0", "wasi:http/outgoing-handler@0.2.3")
    for grant in (CallGrant(), CallGrant(network=(other_host.origin,))):
        session = Denials()
        authority = f"127.0.0.1:{server.port}"
        result = host.call_tool_sync(hostile, ToolInput(data=authority), grant=grant, session=session)
        assert (result.status, result.summary) == (ToolStatus.PASSED, "denied")
        (denial,) = session.seen
        assert denial.artifact == "http-two-versions"
    _no_connection(server)


def test_a_flood_of_refused_requests_is_refused_but_traced_only_so_far(host, http_get, other_host: Local) -> None:
    """Each refusal is traced, up to a bound per store: a component looping on refused requests
    cannot grow the session's trace without end. Every request is still refused."""
    session = Denials()
    urls = [other_host.url(f"/{i}") for i in range(MAX_TRACED_DENIALS + 40)]
    result = host.call_tool_sync(http_get, ToolInput(data=json.dumps({"urls": urls})), grant=CallGrant(network=("http://127.0.0.1:9",)),
                                 session=session)
    assert (result.data or "").split("\n") == [f"error-code {DENIED}"] * len(urls)
    _no_connection(other_host)
    assert len(session.seen) == MAX_TRACED_DENIALS + 1
    assert "no further refusals of this component are traced" in session.seen[-1].reason


def test_a_request_with_options_reaches_the_granted_origin(host, http_get, server: Local) -> None:
    """The options resource is passed on with the request (the host hands both to the native
    client as wasmtime gave them, http_raw.py)."""
    data = json.dumps({"url": server.url("/opts"), "options": True})
    result = host.call_tool_sync(http_get, ToolInput(data=data), grant=CallGrant(network=(server.origin,)))
    assert (result.status, result.data) == (ToolStatus.PASSED, "status 200"), result.summary
    assert server.seen.snapshot()[1] == ["/opts"]


def test_a_refused_request_with_options_is_refused_like_any_other(host, http_get, server: Local,
                                                                  other_host: Local) -> None:
    session = Denials()
    data = json.dumps({"url": other_host.url("/opts"), "options": True})
    result = host.call_tool_sync(http_get, ToolInput(data=data), grant=CallGrant(network=(server.origin,)),
                                 session=session)
    assert (result.status, result.summary) == (ToolStatus.ERROR, f"error-code {DENIED}")
    _no_connection(other_host)
    (denial,) = session.seen
    assert denial.origin == other_host.origin


def test_a_request_with_another_scheme_names_no_origin_and_is_refused(host, http_get, server: Local) -> None:
    """`scheme::other("ftp")` to the granted host and port: no http(s) origin, refused, and the
    trace keeps the scheme's text."""
    session = Denials()
    data = json.dumps({"url": server.url("/ftp"), "scheme": "ftp"})
    result = host.call_tool_sync(http_get, ToolInput(data=data), grant=CallGrant(network=(server.origin,)),
                                 session=session)
    assert (result.status, result.summary) == (ToolStatus.ERROR, f"error-code {DENIED}")
    _no_connection(server)
    (denial,) = session.seen
    assert (denial.scheme, denial.origin) == ("ftp", None)
    assert denial.authority == f"127.0.0.1:{server.port}"
    assert denial.reason == "the request names no http(s) origin that can be checked"


def test_the_hand_written_http_driver_gets_its_endpoint_through_the_grant(host, server: Local, other_host: Local) -> None:
    """tests/fixtures/http-driver.wat (bench/concurrency.py's `--driver wat`): one GET of
    MURMUR_INFERENCE_ENDPOINT through the filter, the body in its answer; refused when the grant
    names another origin; a clear summary when the endpoint is not an http(s) URL."""
    wat = (Path(__file__).parent / "fixtures" / "http-driver.wat").read_text()
    driver = host.load_bytes(wat2wasm(wat), name="http-driver-wat")
    endpoint = {"MURMUR_INFERENCE_ENDPOINT": server.url("/v1/answer")}
    result = host.call_tool_sync(driver, ToolInput(data="{}"), grant=CallGrant(env=endpoint, network=(server.origin,)))
    assert result.status == ToolStatus.PASSED, result
    reply = json.loads(result.data or "")
    assert reply == {"stop_reason": "end_turn", "content": [{"type": "text", "text": "answer: hello from /v1/answer"}]}
    assert server.seen.snapshot()[1] == ["/v1/answer"]
    session = Denials()
    refused = host.call_tool_sync(driver, ToolInput(data="{}"), grant=CallGrant(env=endpoint, network=(other_host.origin,)),
                                  session=session)
    assert (refused.status, refused.summary) == (ToolStatus.FAILED, "request refused")
    assert [d.origin for d in session.seen] == [server.origin]
    for env in ({}, {"MURMUR_INFERENCE_ENDPOINT": "ftp://127.0.0.1/"}, {"MURMUR_INFERENCE_ENDPOINT": "http:///v1"}):
        unusable = host.call_tool_sync(driver, ToolInput(data="{}"), grant=CallGrant(env=env, network=(server.origin,)))
        assert (unusable.status, unusable.summary) == (ToolStatus.FAILED, "MURMUR_INFERENCE_ENDPOINT is not an http(s) URL")
    assert server.seen.snapshot()[1] == ["/v1/answer"]
