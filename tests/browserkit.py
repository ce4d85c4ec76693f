"""Helpers for browser tests: Debian's Chromium driven by Playwright, a second loopback origin
serving a page, a TCP proxy that can cut every connection, and a scripted capsule that streams
word by word and asks for input on demand."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import EXAMPLES, FIXTURES
from proxykit import LoopbackProxy
from murmurd.manifest.writing import dump_yaml

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]

# The scripted answers (tests/fixtures' `ask` tool turns a tool call into input-required).
FIRST_WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa"
SECOND_WORDS = "lambda mu nu xi omicron pi rho sigma tau upsilon"
HOSTILE_TEXT = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"><b>bold</b>'


def _text(text: str) -> dict[str, Any]:
    return {"stop_reason": "end_turn", "content": [{"type": "text", "text": text}]}


def _ask(text: str, prompt: str) -> dict[str, Any]:
    return {"stop_reason": "tool_call", "content": [
        {"type": "text", "text": text},
        {"type": "tool_call", "id": "ask1", "name": "ask", "input": {"prompt": prompt}}]}


def scripted_capsule(root: Path, name: str = "console-demo") -> Path:
    """A capsule whose scripted driver answers by rule: `say hello` streams FIRST_WORDS; `ask me`
    streams FIRST_WORDS, then asks "May I go on?" (input-required) and, once any reply comes
    back, streams SECOND_WORDS; `be hostile` answers HOSTILE_TEXT."""
    directory = root / name
    directory.mkdir(parents=True, exist_ok=True)
    rules = [
        {"when": "say hello", "response": _text(FIRST_WORDS)},
        {"when": "ask me", "response": _ask(FIRST_WORDS + " ", "May I go on?")},
        {"when": "be hostile", "response": _text(HOSTILE_TEXT)},
    ]
    manifest = {
        "name": name, "version": "1.2.3",
        "artifacts": [
            {"name": "scripted-driver", "runtime": "driver", "source": str(EXAMPLES / "scripted-driver"),
             "local_source": True},
            {"name": "ask", "runtime": "tool", "source": str(FIXTURES / "ask"), "local_source": True},
        ],
        "inference": {"endpoint": "http://127.0.0.1:9", "model": "scripted", "driver": {
            "artifact": "scripted-driver",
            # anything else (a tool result: the reply) ends the task with SECOND_WORDS
            "config": {"rules": rules, "responses": [_text(SECOND_WORDS)] * 2}}},
        "lifecycle": {"after_task": "sleep", "task_acceptance": "queue", "queue_depth": 16},
    }
    (directory / "murmur.yaml").write_text(dump_yaml(manifest))
    return directory


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium browser (Playwright, the system binary; nothing is downloaded)."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: .ci/run installs Debian's chromium package")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, timeout=60_000)
        try:
            yield browser
        finally:
            browser.close()


class PageServer:
    """A second origin on loopback serving one HTML page at `/` (a stranger's web page)."""

    def __init__(self, html: str) -> None:
        body = html.encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.origin = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class CuttingProxy(LoopbackProxy):
    """A loopback TCP proxy in front of a daemon; `cut()` closes every connection through it
    (the browser sees its stream die mid-answer, as on a network drop) while new connections
    keep working. `limit` cuts each connection after that many bytes came back from the daemon."""

    def __init__(self, target_port: int) -> None:
        self.limit: int | None = None
        self.cuts = 0
        super().__init__(target_port)

    def _pump(self, source: socket.socket, sink: socket.socket, from_target: bool) -> None:
        sent = 0  # bytes passed since `limit` was set (it applies to open connections too)
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                limit = self.limit if from_target else None
                if limit is not None and sent + len(data) >= limit:
                    sink.sendall(data[: max(0, limit - sent)])
                    self.cuts += 1
                    break
                sink.sendall(data)
                if limit is not None:
                    sent += len(data)
        except OSError:
            pass
        finally:
            self._close(source, sink)

    def cut(self) -> None:
        """Close every connection open now."""
        self.cuts += 1
        self._close_all()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def send_from_console(page: Any, text: str, timeout_ms: int = 30_000) -> str:
    """Send a task from the console's box; the console opens it. Its id."""
    before = page.text_content("#task-id") or ""
    page.fill("#new-task-text", text)
    page.click("#new-task-send")
    page.wait_for_function("(old) => { const id = document.querySelector('#task-id').textContent;"
                           " return id.startsWith('tsk_') && id !== old; }", arg=before, timeout=timeout_ms)
    return page.text_content("#task-id")


def wait_task_state(page: Any, state: str, timeout_ms: int = 30_000) -> None:
    """The console's open task shows `state`."""
    page.wait_for_function("(s) => document.querySelector('#task-state').textContent === s", arg=state,
                           timeout=timeout_ms)


def task_count(url: str) -> int:
    """How many tasks the daemon at `url` lists (an open daemon: no credential)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
    return httpx.post(url, json=body, timeout=10).json()["result"]["totalSize"]


def wait_answer(page: Any, words: str, timeout_ms: int = 30_000) -> None:
    """The console's answer reads `words` (whitespace aside). A task's state can arrive by the
    watch stream before its last chunks arrive by the task's own stream, so a test waits for the
    text itself; a chunk shown twice never reads right and times out."""
    page.wait_for_function("(w) => document.querySelector('#task-answer').textContent.split(/\\s+/)"
                           ".filter(Boolean).join(' ') === w", arg=" ".join(words.split()), timeout=timeout_ms)
