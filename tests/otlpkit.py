"""A loopback OTLP/HTTP receiver for the hooks that export OTLP/JSON (grafana's spans, eval's
logs): it keeps each JSON export by path; murmurd's own protobuf spans, sent to the same
endpoint, are answered and set aside."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class JsonCollector:
    def __init__(self) -> None:
        self.exports: list[tuple[str, dict[str, Any]]] = []
        self.arrived = threading.Event()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Type") == "application/json":
                    collector.exports.append((self.path, json.loads(body)))
                    collector.arrived.set()
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
