"""Per-call cost of the wasi:http egress filter, against wasmtime's unfiltered wasi:http in the same run.

The `http-get` test fixture GETs a loopback server once per call (a fresh store per call, as
every tool call has). Filtered: murmurd's linker, where `outgoing-handler#handle` reads the
request through the forwarder component (instantiated in the call's store) and forwards it.
Unfiltered: the same host with that one linker replaced by wasmtime's wasi:http as it was before
per-origin egress (any grant reached every host). Also shown: refused requests, with a grant
(the forwarder reads the request first) and without one (refused at once).

    .venv/bin/python bench/http_egress.py [--calls 200]
"""

from __future__ import annotations

import argparse
import http.server
import statistics
import sys
import threading
import time
from pathlib import Path

from wasmtime.component import Linker

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from murmurd.authoring.build import build_artifact  # noqa: E402
from murmurd.host import CallGrant, ComponentHost, ToolInput, ToolStatus  # noqa: E402
from murmurd.host.imports import define  # noqa: E402
from murmurd.host.murmur_imports import interfaces_for  # noqa: E402


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802
        body = b"ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


def unfiltered(host: ComponentHost, loaded) -> None:  # type: ignore[no-untyped-def]
    """Put the pre-egress linker (native wasi:http, nothing shadowed) in the host's cache."""
    linker = Linker(host.engine)
    linker.add_wasip2()
    linker.add_wasi_http()
    define(linker, interfaces_for(loaded.role))
    host._linkers[(loaded.role, loaded.http_version)] = linker  # noqa: SLF001 - the bench's one override


def medians_ms(fns: list, calls: int) -> list[float]:  # type: ignore[type-arg]
    """Median per call of each function, interleaved call by call and rotated (so a busy
    machine slows them alike)."""
    samples: list[list[float]] = [[] for _ in fns]
    for i in range(calls):
        for j in range(len(fns)):  # a different one first each time
            k = (i + j) % len(fns)
            started = time.perf_counter()
            fns[k]()
            samples[k].append((time.perf_counter() - started) * 1000)
    return [statistics.median(kept) for kept in samples]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    origin = f"http://127.0.0.1:{server.server_address[1]}"
    wasm = build_artifact(ROOT / "tests" / "fixtures" / "http-get").output
    filtered_host, plain_host = ComponentHost(), ComponentHost()
    filtered, plain = filtered_host.load(wasm), plain_host.load(wasm)
    unfiltered(plain_host, plain)
    grant = CallGrant(network=(origin,))
    data = ToolInput(data=f"{origin}/x")

    def call(host: ComponentHost, loaded, grant: CallGrant, status: ToolStatus):  # type: ignore[no-untyped-def]
        def run() -> None:
            result = host.call_tool_sync(loaded, data, grant=grant)
            assert result.status is status, result.summary
        return run

    ours = call(filtered_host, filtered, grant, ToolStatus.PASSED)
    bare = call(plain_host, plain, grant, ToolStatus.PASSED)
    refused = call(filtered_host, filtered, CallGrant(network=("http://127.0.0.1:1",)), ToolStatus.ERROR)
    nothing = call(filtered_host, filtered, CallGrant(), ToolStatus.ERROR)
    medians_ms([ours, bare, refused, nothing], 10)  # warm up (compile the forwarder, fill the caches)
    bare_ms, ours_ms, refused_ms, nothing_ms = medians_ms([bare, ours, refused, nothing], args.calls)
    print(f"unfiltered wasi:http GET:          median {bare_ms:.3f} ms")
    print(f"filtered GET (forwarded):          median {ours_ms:.3f} ms")
    print(f"refused request (origin not granted): median {refused_ms:.3f} ms")
    print(f"refused request (no grant):        median {nothing_ms:.3f} ms")
    print(f"ratio filtered/unfiltered:         {ours_ms / bare_ms:.2f}x")
    filtered_host.close()
    plain_host.close()
    server.shutdown()


if __name__ == "__main__":
    main()
