"""The bundled tools through real sessions (issue 13, item 4): the editor (read, write, patch,
search, list, data-path, confinement), request-input over A2A with a real `murmurd serve`, and
fetch against a loopback HTTP server, with and without the network grant."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from a2akit import serving
from bundledkit import bundled, with_rules
from hookkit import Recorder, end_turn, hooked_capsule, run_session, tool_call
from loopkit import stage, trace_events

EDITOR, ASK, FETCH = "murmur-tool-editor", "murmur-tool-request-input", "murmur-tool-fetch"


async def _calls(tmp_path: Path, host, name: str, inputs: list[Any], *, entry: dict[str, Any] | None = None,
                 before: dict[str, str | bytes] | None = None, **capsule: Any) -> tuple[list[str], list[bool], Path]:
    """Run one task calling tool `name` once per input; (each result text, each is_error, workdir)."""
    responses = [tool_call(f"c{i}", name, value) for i, value in enumerate(inputs)] + [end_turn()]
    staged = stage(hooked_capsule(tmp_path, [bundled(name, **(entry or {}))], responses, **capsule), host, tmp_path)
    for rel, content in (before or {}).items():
        path = staged.workdir.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    events = Recorder()
    (outcome,) = await run_session(staged, host, "go", events=events)
    assert outcome.ok, outcome.error
    calls = [e for e in trace_events(staged) if e["event_type"] == "tool_call" and e.get("tool_name") == name]
    assert len(calls) == len(inputs)
    return [text for _n, text in events.tool_results], [c["status"] == "error" for c in calls], staged.workdir.root


# -- murmur-tool-editor ------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_editor_writes_reads_patches_searches_and_lists(tmp_path: Path, host) -> None:
    source = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"
    texts, errors, root = await _calls(tmp_path, host, EDITOR, [
        {"op": "write", "path": "src/calc.py", "content": source},
        {"op": "read", "path": "src/calc.py", "start_line": 5, "end_line": 6},
        {"op": "patch", "path": "src/calc.py", "old": "def add(a, b):\n    return a - b", "new": "def add(a, b):\n    return a + b"},
        {"op": "search", "pattern": "return a"},
        {"op": "search", "pattern": r"def \w+\(", "regex": True, "path": "src"},
        {"op": "list"},
    ])
    assert errors == [False] * 6, texts
    assert texts[0] == f"wrote {len(source)} bytes to src/calc.py"
    assert texts[1] == "def sub(a, b):\n    return a - b\n"
    assert texts[2] == "patched src/calc.py at line 1"
    assert (root / "src" / "calc.py").read_text() == source.replace("a - b", "a + b", 1)
    assert texts[3].splitlines() == ["src/calc.py:2:     return a + b", "src/calc.py:6:     return a - b"]
    assert texts[4].splitlines() == ["src/calc.py:1: def add(a, b):", "src/calc.py:5: def sub(a, b):"]
    assert "src/calc.py" in texts[5].splitlines() and "MURMUR.md" in texts[5].splitlines()


@pytest.mark.anyio
async def test_the_editor_refuses_a_missing_or_ambiguous_patch_and_changes_nothing(tmp_path: Path, host) -> None:
    before = "x = 1\nx = 1\ny = 2\n"
    texts, errors, root = await _calls(tmp_path, host, EDITOR, [
        {"op": "patch", "path": "a.py", "old": "z = 3", "new": "z = 4"},
        {"op": "patch", "path": "a.py", "old": "x = 1", "new": "x = 9"},
        {"op": "patch", "path": "a.py", "old": "", "new": "x"},
        {"op": "patch", "path": "missing.py", "old": "a", "new": "b"},
        {"op": "patch", "path": "a.py", "new": "b"},
    ], before={"a.py": before})
    assert errors == [True] * 5
    assert "the old text is not in a.py" in texts[0]
    assert "the old text occurs 2 times in a.py; include more context" in texts[1]
    assert "`old` is empty" in texts[2]
    assert "missing.py: no such file in the workdir" in texts[3]
    assert "patch: `old` is required" in texts[4]
    assert (root / "a.py").read_text() == before


@pytest.mark.anyio
async def test_the_editor_refuses_bad_requests(tmp_path: Path, host) -> None:
    texts, errors, _root = await _calls(tmp_path, host, EDITOR, [
        {"op": "delete", "path": "a"}, "just text", {"op": "read", "path": "src"},
        {"op": "search", "pattern": "(", "regex": True}, {"op": "list", "path": "nowhere"},
        {"op": "read", "path": "blob.bin"}, {"op": "write", "path": "src/x.txt/inner", "content": "x"},
    ], before={"src/x.txt": "x", "blob.bin": b"\xff\xfe\x00binary"})
    assert errors == [True] * 7
    assert "unknown op 'delete'" in texts[0]
    assert texts[1].startswith("invalid data JSON string")  # published: a string is parsed as the request
    assert "src: is a directory" in texts[2]
    assert "invalid regex" in texts[3]
    assert "nowhere: no such file or directory" in texts[4]
    assert "blob.bin: not UTF-8 text" in texts[5]
    assert "src/x.txt/inner: cannot write" in texts[6]


@pytest.mark.anyio
async def test_the_editor_is_confined_to_the_workdir_by_the_host(tmp_path: Path, host) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("outside")
    texts, errors, root = await _calls(tmp_path, host, EDITOR, [
        {"op": "read", "path": str(secret)},
        {"op": "read", "path": "../" * (len(Path(tmp_path).parts) + 3) + str(secret).lstrip("/")},
        {"op": "write", "path": "../escaped.txt", "content": "no"},
    ])
    assert errors == [True, True, True], texts
    assert not any("outside" in text for text in texts)
    assert not (root.parent / "escaped.txt").exists()


@pytest.mark.anyio
async def test_a_large_editor_result_comes_back_through_data_path(tmp_path: Path, host) -> None:
    big = "".join(f"line {n:06d} of a large file\n" for n in range(3000))  # ~78 KB, past the 32 KiB inline cap
    texts, errors, root = await _calls(tmp_path, host, EDITOR, [{"op": "read", "path": "big.txt"}],
                                       before={"big.txt": big})
    assert errors == [False] and texts == [big]
    assert (root / ".murmur-editor" / "result.txt").read_text() == big


# -- murmur-tool-fetch -------------------------------------------------------------------------


class _Pages(http.server.BaseHTTPRequestHandler):
    PAGES = {
        "/page": (200, "text/html; charset=utf-8",
                  "<!doctype html><html><head><title>T</title><style>p{color:red}</style></head><body>"
                  "<h1>Release notes</h1><script>alert('x')</script><p>murmur 1.4 ships <b>batteries</b>"
                  " &amp; more.</p><ul><li>editor</li><li>fetch</li></ul></body></html>"),
        "/plain": (200, "text/plain", "just text\n"),
        "/big": (200, "text/plain", "z" * 200_000),
        "/missing": (404, "text/plain", "no such page"),
    }

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path in ("/moved", "/loop"):
            self.send_response(302)
            self.send_header("Location", "/plain" if self.path == "/moved" else "/loop")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        status, kind, text = self.PAGES[self.path]
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet
        pass


@pytest.fixture
def pages() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def _network(base: str) -> dict[str, Any]:
    return {"network": {"allow": [base]}}


@pytest.mark.anyio
async def test_fetch_returns_readable_text_under_the_network_grant(tmp_path: Path, host, pages: str) -> None:
    texts, errors, _root = await _calls(tmp_path, host, FETCH, [
        {"url": f"{pages}/page"}, {"url": f"{pages}/moved"}, {"url": f"{pages}/big", "max_chars": 1000},
        {"url": f"{pages}/missing"}, {"url": "file:///etc/passwd"}, {"url": f"{pages}/loop"},
        {"url": f"{pages}/plain", "max_chars": 0},
    ], entry={"capabilities": _network(pages)}, capabilities=_network(pages))
    assert errors == [False, False, False, True, True, True, True], texts
    assert texts[0] == "T\n\nRelease notes\n\nmurmur 1.4 ships batteries & more.\n\neditor\n\nfetch"
    assert texts[1] == "just text\n"
    assert texts[2] == "z" * 1000 + "\n[truncated at 1000 characters]"
    assert f"GET {pages}/missing: HTTP 404" in texts[3] and "no such page" in texts[3]
    assert "not an http(s) URL" in texts[4]
    assert f"more than 5 redirects, last to {pages}/loop" in texts[5]
    assert "`max_chars` must be a positive integer" in texts[6]


@pytest.mark.anyio
async def test_fetch_without_a_network_grant_is_refused_by_the_host(tmp_path: Path, host, pages: str) -> None:
    """The capsule may reach the server, but the tool's own entry narrows its network grant to nothing."""
    texts, errors, _root = await _calls(tmp_path, host, FETCH, [{"url": f"{pages}/page"}],
                                        entry={"capabilities": {"network": {"allow": []}}}, capabilities=_network(pages))
    assert errors == [True] and "error-code HTTP-request-denied" in texts[0]


# -- murmur-tool-request-input -----------------------------------------------------------------


def test_request_input_asks_over_a2a_and_returns_the_reply(tmp_path: Path) -> None:
    responses = [tool_call("c1", ASK, {"prompt": "Which branch should I merge into?"})]
    capsule = with_rules(hooked_capsule(tmp_path, [bundled(ASK)], responses, lifecycle={"after_task": "sleep"}),
                         [{"when": "release-2", "response": end_turn("merging into release-2")}])
    with serving(capsule, tmp_path / "state") as served:
        task = served.send("merge the fix")
        waiting = served.wait_state(task["id"], "input-required")
        assert waiting["artifacts"] == [{"name": "prompt", "parts": [{"text": "Which branch should I merge into?"}]}]
        reply = {"messageId": "reply-1", "role": "user", "parts": [{"text": "release-2"}], "taskId": task["id"]}
        assert served.rpc("message/send", {"message": reply})["result"]["id"] == task["id"]
        done = served.wait_state(task["id"], "completed")
        assert done["status"]["message"] == "merging into release-2"
        (call,) = [e for e in served.trace() if e["event_type"] == "tool_call" and e["tool_name"] == ASK]
        assert call["status"] == "ok"


@pytest.mark.anyio
async def test_request_input_refuses_an_empty_prompt_without_asking(tmp_path: Path, host) -> None:
    texts, errors, _root = await _calls(tmp_path, host, ASK, [{"prompt": "  "}, {"question": "?"}])
    assert errors == [True, True]
    assert all("`prompt` must be a non-empty string" in text for text in texts)
