"""GET streams, CORS and the console's files, through a real `murmurd serve` over HTTP."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from a2akit import ROOT, Served, serving
from browserkit import FIRST_WORDS, scripted_capsule
from murmurd.a2a.http.get_streams import BadStreamRequest, check_task_id, parse_query
from murmurd.manifest.origins import BadOrigin, check_origin

PAGE = "http://localhost:5173"


@pytest.fixture(scope="module")
def served(tmp_path_factory, artifacts) -> Iterator[Served]:
    artifacts.example("scripted-driver")
    artifacts.fixture("ask")
    root = tmp_path_factory.mktemp("get-streams")
    with serving(scripted_capsule(root), root / "state", "--cors-origin", PAGE) as running:
        yield running


def _frames(response: httpx.Response) -> list[dict[str, str]]:
    """Every SSE frame of a finished response body, as field -> value (comments dropped)."""
    frames = []
    for block in response.text.replace("\r\n", "\n").split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            if line and not line.startswith(":"):
                name, _, value = line.partition(":")
                fields[name] = value[1:] if value.startswith(" ") else value
        if fields:
            frames.append(fields)
    return frames


def _finished(served: Served, text: str = "say hello") -> str:
    task = served.send(text)
    served.wait_state(task["id"], "completed")
    return task["id"]


def _get(served: Served, path: str, **kwargs: Any) -> httpx.Response:
    return httpx.get(served.url + path, timeout=30, **kwargs)


# -- task streams ------------------------------------------------------------------------------

def test_a_finished_tasks_stream_replays_the_post_streams_frames_and_closes(served: Served) -> None:
    task_id = _finished(served)
    response = _get(served, f"tasks/{task_id}/stream")  # returns: the stream closed by itself
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    frames = _frames(response)
    assert frames[0] == {"retry": "2000"}
    posted = served.events("tasks/resubscribe", {"id": task_id}, headers={"Last-Event-ID": "0"})
    assert [(f["id"], f["event"], json.loads(f["data"])) for f in frames[1:]] == posted
    assert "".join(d["text"] for _i, e, d in posted if e == "text").split() == FIRST_WORDS.split()


def test_after_and_last_event_id_choose_the_resume_point(served: Served) -> None:
    task_id = _finished(served)
    frames = _frames(_get(served, f"tasks/{task_id}/stream"))[1:]
    ids = [f["id"] for f in frames]
    after = _frames(_get(served, f"tasks/{task_id}/stream", params={"after": ids[2]}))[1:]
    assert [f["id"] for f in after] == ids[3:]
    # EventSource's own header (a reconnection) wins over the page's ?after=
    resumed = _frames(_get(served, f"tasks/{task_id}/stream", params={"after": "0"},
                           headers={"Last-Event-ID": ids[-2]}))[1:]
    assert [f["id"] for f in resumed] == ids[-1:]
    # a Last-Event-ID that is not an event id is ignored, as on the POST streams
    assert _frames(_get(served, f"tasks/{task_id}/stream", headers={"Last-Event-ID": "x1"}))[1:] == frames


def test_the_a2a_framing_by_query_parameter(served: Served) -> None:

    task_id = _finished(served)
    frames = _frames(_get(served, f"tasks/{task_id}/stream", params={"framing": "a2a"}))
    assert frames[0] == {"retry": "2000"}
    (snapshot,) = frames[1:]  # a finished task: its snapshot, then the stream closes
    body = json.loads(snapshot["data"])
    assert body["jsonrpc"] == "2.0" and body["id"] is None
    assert body["result"]["task"]["id"] == task_id
    assert body["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


def test_a_live_task_stream_ends_with_its_final_status(served: Served) -> None:

    task = served.send("ask me")
    served.wait_state(task["id"], "input-required")
    got: list[dict[str, str]] = []

    def read() -> None:
        got.extend(_frames(_get(served, f"tasks/{task['id']}/stream")))

    reader = threading.Thread(target=read)
    reader.start()
    time.sleep(0.5)
    served.send("go on", taskId=task["id"])
    reader.join(timeout=30)
    assert not reader.is_alive()
    states = [json.loads(f["data"])["status"]["state"] for f in got if f.get("event") == "status"]
    assert states[-2:] == ["working", "completed"] and "input-required" in states


@pytest.mark.parametrize(("path", "status", "says"), [
    ("tasks/tsk_nope/stream", 404, "Task not found"),
    ("tasks/a%00b/stream", 400, "control character"),
    ("tasks/a%0Ab/stream", 400, "control character"),
    ("tasks/..%2F..%2Fetc%2Fpasswd/stream", 404, "Not Found"),  # no route: an id holds no slash
    ("tasks/a%5Cb/stream", 400, "slash"),
    ("tasks/" + "x" * 300 + "/stream", 400, "longer than 256"),
    ("tasks/%ED%A0%80/stream", 400, "invalid text"),
    ("tasks/x/stream?framing=html", 400, "framing must be one of"),
    ("tasks/x/stream?after=-1", 400, "after must be an event id"),
    ("tasks/x/stream?after=" + "9" * 40, 400, "after must be an event id"),
    ("stream?framing=a2a", 400, "upstream frames only"),
])
def test_hostile_or_wrong_get_stream_requests_get_a_clear_refusal(served: Served, path: str, status: int,
                                                                  says: str) -> None:
    response = _get(served, path)
    assert response.status_code == status, response.text
    body = response.json()
    assert says in (body["error"]["message"] if "error" in body else body["detail"])
    assert served.rpc("tasks/get", {"id": "tsk_nope"})["error"]["code"] == -32001  # still serving


def test_the_watch_stream_by_get_follows_every_task(served: Served) -> None:

    got: list[dict[str, str]] = []
    done = threading.Event()

    def watch() -> None:
        with httpx.stream("GET", served.url + "stream", timeout=30) as response:
            buffer = ""
            for text in response.iter_text():
                buffer += text
                if '"state":"completed"' in buffer:
                    break
            got.extend(_frames(httpx.Response(200, text=buffer)))
        done.set()

    threading.Thread(target=watch, daemon=True).start()
    time.sleep(0.5)
    task_id = served.send("say hello")["id"]
    assert done.wait(30)
    assert got[0] == {"retry": "2000"}
    seen = [json.loads(f["data"]) for f in got[1:] if "data" in f]
    assert all(d["id"] == task_id for d in seen)
    assert "".join(d["text"] for d in seen if "text" in d).split() == FIRST_WORDS.split()


def test_get_streams_count_against_the_stream_caps(tmp_path: Path) -> None:
    with serving(scripted_capsule(tmp_path), tmp_path / "state", "--max-streams-per-client", "1") as served:
        with httpx.stream("GET", served.url + "stream", timeout=30) as first:
            assert first.status_code == 200
            second = _get(served, "stream")
            assert second.status_code == 503 and second.headers["retry-after"] == "1"
            assert "close one first" in second.json()["error"]["message"]
        deadline = time.monotonic() + 10
        while _get(served, "tasks/tsk_nope/stream").status_code != 404:  # the slot came back
            assert time.monotonic() < deadline


# -- CORS --------------------------------------------------------------------------------------

def test_a_listed_origin_passes_preflight_and_gets_cors_headers_everywhere(served: Served) -> None:
    preflight = httpx.options(served.url, timeout=10, headers={
        "Origin": PAGE, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type, last-event-id"})
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == PAGE
    assert "POST" in preflight.headers["access-control-allow-methods"]
    task_id = _finished(served)
    answers = [
        httpx.post(served.url, json={"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": task_id}},
                   headers={"Origin": PAGE}, timeout=10),
        _get(served, ".well-known/agent-card.json", headers={"Origin": PAGE}),
        _get(served, f"tasks/{task_id}/stream", headers={"Origin": PAGE}),
    ]
    for answer in answers:
        assert answer.status_code == 200
        assert answer.headers["access-control-allow-origin"] == PAGE


def test_an_unlisted_origin_gets_no_cors_headers(served: Served) -> None:
    preflight = httpx.options(served.url, timeout=10, headers={
        "Origin": "http://evil.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type"})
    assert preflight.status_code == 400
    assert "access-control-allow-origin" not in preflight.headers
    card = _get(served, ".well-known/agent-card.json", headers={"Origin": "http://evil.example"})
    assert "access-control-allow-origin" not in card.headers
    # a header murmurd does not allow (the peer origin header) fails the preflight too
    peer = httpx.options(served.url, timeout=10, headers={
        "Origin": PAGE, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "x-murmur-origin"})
    assert peer.status_code == 400


def test_no_origin_is_allowed_by_default(tmp_path: Path) -> None:
    with serving(scripted_capsule(tmp_path), tmp_path / "state") as served:
        preflight = httpx.options(served.url, timeout=10, headers={
            "Origin": PAGE, "Access-Control-Request-Method": "POST"})
        assert preflight.status_code == 403  # a foreign origin (murmurd/a2a/http/browser_guard.py)
        assert not any(h.startswith("access-control-") for h in preflight.headers)
        card = _get(served, ".well-known/agent-card.json", headers={"Origin": PAGE})
        assert card.status_code == 403
        assert not any(h.startswith("access-control-") for h in card.headers)


def test_the_manifest_lists_origins_too(tmp_path: Path) -> None:
    import yaml

    capsule = scripted_capsule(tmp_path)
    manifest = yaml.safe_load((capsule / "murmur.yaml").read_text())
    manifest["network"] = {"cors_origins": ["https://ops.example.com"]}
    (capsule / "murmur.yaml").write_text(yaml.safe_dump(manifest))
    with serving(capsule, tmp_path / "state", "--cors-origin", PAGE) as served:
        for origin in ("https://ops.example.com", PAGE):
            card = _get(served, ".well-known/agent-card.json", headers={"Origin": origin})
            assert card.headers["access-control-allow-origin"] == origin


@pytest.mark.parametrize("origin", ["*", "localhost:5173", "http://localhost:5173/", "ftp://x.example"])
def test_serve_refuses_a_cors_origin_that_is_not_an_origin(origin: str, tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "murmurd", "serve", str(tmp_path), "--cors-origin", origin],
                            capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 2
    assert "--cors-origin" in result.stderr and ("origin" in result.stderr)


# -- the console's files -----------------------------------------------------------------------

def test_the_console_is_served_with_a_strict_content_security_policy(served: Served) -> None:
    redirect = _get(served, "console")
    assert redirect.status_code in (307, 308) and redirect.headers["location"].endswith("/console/")
    page = _get(served, "console/")
    assert page.status_code == 200 and "console.js" in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert "unsafe-inline" not in page.headers["content-security-policy"]
    script = _get(served, "console/console.js")
    assert script.status_code == 200 and "textContent" in script.text and "innerHTML" not in script.text
    assert _get(served, "console/..%2F..%2Fpyproject.toml").status_code == 404
    assert _get(served, "console/%2e%2e/__init__.py").status_code == 404


# -- pure parts --------------------------------------------------------------------------------

def test_parse_query() -> None:
    assert parse_query(None, None, None) == parse_query("", None, "UPSTREAM")
    assert parse_query("12", "3", "a2a").after == 12
    assert parse_query("nope", "3", None).after == 3
    assert parse_query(None, None, None).after is None
    with pytest.raises(BadStreamRequest):
        parse_query(None, "1e3", None)
    with pytest.raises(BadStreamRequest):
        parse_query(None, "١٢", None)  # Arabic-Indic digits are digits to str.isdigit, not to us


def test_check_task_id() -> None:
    assert check_task_id("tsk_0123") == "tsk_0123"
    assert check_task_id("client-chosen id é") == "client-chosen id é"
    for bad in ("", "a/b", "a\\b", "a\x00", "a\x7f", "\ud800", "x" * 257):
        with pytest.raises(BadStreamRequest):
            check_task_id(bad)


def test_check_origin() -> None:
    assert check_origin("HTTP://LocalHost:5173") == "http://localhost:5173"
    assert check_origin("https://[::1]:8443") == "https://[::1]:8443"
    for bad in ("*", "null", "http://a.example/", "http://a.example/x", "http://a:0", "http://user@a", " "):
        with pytest.raises(BadOrigin):
            check_origin(bad)
