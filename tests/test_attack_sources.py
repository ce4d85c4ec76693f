"""Hostile registry sources on loopback: a Nexus registry or GitHub API answering an endless body
(a listing, a release's JSON, an error) is cut off with `E-IO-003`, never read into memory until
it ends; a redirect to another origin never carries the API key or token."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from murmurd.registry.errors import RegistryError
from murmurd.registry.sources import capped
from murmurd.registry.sources.github import GitHubSource
from murmurd.registry.sources.nexus import NexusClient

DEADLINE = 120  # seconds; an unbounded read never ends


@contextmanager
def endless(status: int) -> Iterator[str]:
    """A server answering every request with `status` and a body that never ends."""
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _endless(self) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            chunk = b"[" + b" " * 65534
            try:
                while True:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            except OSError:
                pass

        def do_GET(self) -> None:  # noqa: N802
            self._endless()

        def do_POST(self) -> None:  # noqa: N802
            self._endless()

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _refused_in_time(call: Callable[[], object]) -> str:
    outcome: dict[str, BaseException | object] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - reported below
            outcome["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(DEADLINE)
    assert not worker.is_alive(), "the client was still reading an endless body"
    error = outcome.get("error")
    assert isinstance(error, RegistryError) and error.code == "E-IO-003", outcome
    return error.message


@pytest.fixture(autouse=True)
def small_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(capped, "MAX_BODY_BYTES", 1 << 20)


def test_an_endless_nexus_listing_is_cut_off() -> None:
    with endless(200) as url:
        assert "more than" in _refused_in_time(NexusClient(url, "key").list)


def test_an_endless_nexus_error_body_is_cut_off() -> None:
    with endless(500) as url:
        assert "more than" in _refused_in_time(lambda: NexusClient(url, "key").download("x", "1.0.0"))
        assert "more than" in _refused_in_time(lambda: NexusClient(url, "key").publish("x", "1.0.0", "wasm", b"z"))


def test_an_endless_github_release_is_cut_off() -> None:
    with endless(200) as url:
        source = GitHubSource("o/r", "token", {"MUR_GITHUB_API_BASE": url})
        assert "more than" in _refused_in_time(lambda: source.fetch("x", "1.0.0", "linux-x86_64"))


def test_a_redirect_to_another_origin_never_carries_the_key_or_token() -> None:
    seen: list[tuple[str, str | None]] = []

    class Elsewhere(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            seen.append((self.path, self.headers.get("Authorization")))
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Elsewhere)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    target = f"http://localhost:{other.server_address[1]}"  # another origin (host differs)

    class Redirect(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(302)
            self.send_header("Location", target + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    first = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=first.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{first.server_address[1]}"
    try:
        for call in (NexusClient(url, "NEXUS-SECRET").list,
                     lambda: NexusClient(url, "NEXUS-SECRET").download("x", "1.0.0"),
                     lambda: GitHubSource("o/r", "GH-SECRET", {"MUR_GITHUB_API_BASE": url}).fetch("x", "1.0.0", "linux-x86_64")):
            with pytest.raises(RegistryError):
                call()
        assert seen and all(auth is None for _path, auth in seen), seen
    finally:
        for server in (first, other):
            server.shutdown()
            server.server_close()
