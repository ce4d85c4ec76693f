"""Stream tickets and the operator-only trace route through a real `murmurd serve` with bearer
tokens configured, over raw HTTP (httpx): the mint route's error paths, a ticket accepted on
exactly its path and refused everywhere else, expiry through the real `--stream-ticket-ttl`
option, a revoked credential's tickets, and who may read a task's trace events."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from authkit import bearer, token_sha256
from a2akit import Served, serving
from browserkit import FIRST_WORDS, scripted_capsule

OPS = "ops-token-" + "o" * 32
PEER = "peer-token-" + "p" * 32
UNKNOWN = "nobody-token-" + "n" * 32



def credentials(root: Path, *, peer_revoked: bool = False) -> Path:
    path = root / "credentials.yaml"
    path.write_text(f"""
credentials:
  - {{name: ops, origin: operator, token_sha256: {token_sha256(OPS)}}}
  - {{name: partner, origin: peer, trust: [partner], token_sha256: {token_sha256(PEER)}, revoked: {str(peer_revoked).lower()}}}
""")
    return path



def mint(served: Served, body: object, headers: dict[str, str] | None = None,
         raw: bytes | None = None) -> httpx.Response:
    content = raw if raw is not None else json.dumps(body).encode()
    return httpx.post(served.url + "auth/stream-ticket", content=content,
                      headers={"content-type": "application/json", **(headers if headers is not None else bearer(OPS))},
                      timeout=10)


def send(served: Served, text: str, token: str = OPS) -> dict:
    body = {"jsonrpc": "2.0", "id": 1, "method": "message/send",
            "params": {"message": {"messageId": f"m{time.monotonic_ns()}", "role": "user", "parts": [{"text": text}]}}}
    return httpx.post(served.url, json=body, headers=bearer(token), timeout=30).json()["result"]


def wait_completed(served: Served, task_id: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": task_id}}
        task = httpx.post(served.url, json=body, headers=bearer(OPS), timeout=10).json()["result"]
        if task["status"]["state"] == "completed":
            return
        assert time.monotonic() < deadline, task
        time.sleep(0.05)


def stream_text(served: Served, path_and_query: str, headers: dict[str, str] | None = None) -> tuple[int, str, dict]:
    """(status, body, headers) of a GET stream read to its end (a finished task's stream closes)."""
    with httpx.stream("GET", served.url + path_and_query.lstrip("/"), headers=headers or {}, timeout=30) as response:
        return response.status_code, response.read().decode(), dict(response.headers)


def assert_refused(response_or_triple: object, status: int, words: str) -> None:
    if isinstance(response_or_triple, httpx.Response):
        code, text = response_or_triple.status_code, response_or_triple.text
    else:
        code, text, _headers = response_or_triple  # type: ignore[misc]
    assert code == status, (code, text)
    error = json.loads(text)["error"]
    assert error["code"] == {401: -32030, 403: -32031}.get(status, error["code"])
    assert words in error["message"], error


@pytest.fixture(autouse=True)
def _built(artifacts) -> None:
    artifacts.example("scripted-driver")
    artifacts.fixture("ask")


@pytest.fixture
def served(tmp_path: Path):
    with serving(scripted_capsule(tmp_path), tmp_path / "state", "--credentials", str(credentials(tmp_path))) as daemon:
        yield daemon


def test_the_mint_route_refuses_what_it_should(served: Served) -> None:
    assert_refused(mint(served, {"path": "/stream"}, headers={}), 401, "credential is required")
    assert_refused(mint(served, {"path": "/stream"}, headers=bearer(UNKNOWN)), 401, "unknown bearer token")
    assert_refused(mint(served, {"path": "/stream"}, headers={"authorization": "Basic abc"}), 401, "malformed")
    for body, words in [
        ({"path": "/"}, "is not a stream path"),
        ({"path": "/tasks/a/b/stream"}, "is not a stream path"),
        ({"path": "/tasks/x/trace"}, "is not a stream path"),
        ({"path": "/tasks/\u0000/stream"}, "is not a stream path"),
        ({"path": 7}, "nothing else"),
        ({"path": "/stream", "principal": "ops"}, "nothing else"),
        (["/stream"], "nothing else"),
    ]:
        assert_refused(mint(served, body), 400, words)
    assert_refused(mint(served, None, raw=b"{not json"), 400, "not JSON")
    assert_refused(mint(served, None, raw=b'{"path": "' + b"a" * 5000 + b'"}'), 400, "larger than 4096 bytes")
    # a ticket cannot mint a ticket
    ticket = mint(served, {"path": "/stream"}).json()["ticket"]
    refused = httpx.post(served.url + "auth/stream-ticket?ticket=" + ticket, json={"path": "/stream"}, timeout=10)
    assert_refused(refused, 401, "accepted only by GET /stream and GET /tasks/{id}/stream")


def test_a_ticket_opens_exactly_its_stream_for_its_principal(served: Served) -> None:
    done, other = send(served, "say hello"), send(served, "say hello")
    wait_completed(served, done["id"])
    wait_completed(served, other["id"])
    path = f"/tasks/{done['id']}/stream"
    minted = mint(served, {"path": path})
    assert minted.status_code == 200 and minted.headers["cache-control"] == "no-store"
    answer = minted.json()
    assert answer["path"] == path and answer["expires_in"] == 60.0
    ticket = answer["ticket"]
    assert OPS not in ticket

    status, body, _ = stream_text(served, f"{path}?ticket={ticket}")
    assert status == 200
    assert [w for w in FIRST_WORDS.split() if w in body] == FIRST_WORDS.split()
    assert '"completed"' in body

    # no credential at all: refused
    assert_refused(stream_text(served, path), 401, "credential is required")
    # the same ticket on another task's stream, the watch stream, the trace route, POST /
    assert_refused(stream_text(served, f"/tasks/{other['id']}/stream?ticket={ticket}"), 401, "another stream")
    assert_refused(stream_text(served, f"/stream?ticket={ticket}"), 401, "another stream")
    on_trace = httpx.get(served.url + f"tasks/{done['id']}/trace?ticket={ticket}", timeout=10)
    assert_refused(on_trace, 401, "accepted only by GET /stream")
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": done["id"]}}
    assert_refused(httpx.post(served.url + f"?ticket={ticket}", json=rpc, timeout=10), 401, "accepted only by GET")
    # forged: another signature, a changed payload, garbage
    payload, signature = ticket.split(".")
    forged = payload + "." + ("A" if signature[0] != "A" else "B") + signature[1:]
    assert_refused(stream_text(served, f"{path}?ticket={forged}"), 401, "signature does not match")
    assert_refused(stream_text(served, f"{path}?ticket=not-a-ticket"), 401, "malformed")
    assert_refused(stream_text(served, f"{path}?ticket={ticket}&ticket={ticket}"), 401, "more than one")
    # the watch stream takes a ticket minted for it
    watch = mint(served, {"path": "/stream"}).json()["ticket"]
    with httpx.stream("GET", served.url + f"stream?ticket={watch}", timeout=10) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")


def test_a_ticket_expires_after_the_configured_ttl(tmp_path: Path) -> None:
    with serving(scripted_capsule(tmp_path), tmp_path / "state", "--credentials", str(credentials(tmp_path)),
                 "--stream-ticket-ttl", "1") as served:
        task = send(served, "say hello")
        path = f"/tasks/{task['id']}/stream"
        answer = mint(served, {"path": path}).json()
        assert answer["expires_in"] == 1.0
        time.sleep(1.3)
        assert_refused(stream_text(served, f"{path}?ticket={answer['ticket']}"), 401, "expired")
        fresh = mint(served, {"path": path}).json()["ticket"]
        assert stream_text(served, f"{path}?ticket={fresh}")[0] == 200


def test_a_revoked_credentials_tickets_die_with_it(tmp_path: Path) -> None:
    import signal

    with serving(scripted_capsule(tmp_path), tmp_path / "state", "--credentials", str(credentials(tmp_path))) as served:
        ticket = mint(served, {"path": "/stream"}, headers=bearer(PEER)).json()["ticket"]
        with httpx.stream("GET", served.url + f"stream?ticket={ticket}", timeout=10) as response:
            assert response.status_code == 200
        credentials(tmp_path, peer_revoked=True)
        served.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 20
        while mint(served, {"path": "/stream"}, headers=bearer(PEER)).status_code != 401:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert_refused(stream_text(served, f"/stream?ticket={ticket}"), 401, "revoked")


def test_trace_events_are_for_operator_credentials_only(served: Served) -> None:
    task = send(served, "say hello")
    wait_completed(served, task["id"])
    url = served.url + f"tasks/{task['id']}/trace"
    answer = httpx.get(url, headers=bearer(OPS), timeout=10)
    assert answer.status_code == 200, answer.text
    events = answer.json()["events"]
    kinds = [e["event_type"] for e in events]
    assert "a2a_task_received" in kinds and "task_start" in kinds and "task_end" in kinds and "inference" in kinds
    assert all(e.get("task_id") in (None, task["id"]) for e in events)
    assert_refused(httpx.get(url, headers=bearer(PEER), timeout=10), 403, "trace events are for operator credentials")
    assert_refused(httpx.get(url, timeout=10), 401, "credential is required")
    missing = httpx.get(served.url + "tasks/tsk_nope/trace", headers=bearer(OPS), timeout=10)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == -32001
    # another task's lines are not this task's
    second = send(served, "say hello")
    wait_completed(served, second["id"])
    again = httpx.get(url, headers=bearer(OPS), timeout=10).json()["events"]
    assert len(again) == len(events)
    assert all(e.get("task_id") in (None, task["id"]) for e in again)


def test_with_no_credential_configured_streams_and_traces_need_nothing(tmp_path: Path) -> None:
    with serving(scripted_capsule(tmp_path), tmp_path / "state") as served:
        task = served.send("say hello")
        served.wait_state(task["id"], "completed")
        status, body, _ = stream_text(served, f"/tasks/{task['id']}/stream")
        assert status == 200 and '"completed"' in body
        assert httpx.get(served.url + f"tasks/{task['id']}/trace", timeout=10).json()["events"]
        assert httpx.get(served.url + "console/", timeout=10).status_code == 200


def test_a_tasks_trace_lines_are_its_own_and_the_unowned_lines_inside_its_run() -> None:
    from murmurd.a2a.http.task_trace import task_lines

    lines = [json.dumps(e) for e in [
        {"event_type": "a2a_task_received", "task_id": "A"},
        {"event_type": "a2a_task_received", "task_id": "B"},
        {"event_type": "inference", "turn": 0},  # before A started: nobody's
        {"event_type": "task_start", "task_id": "A"},
        {"event_type": "inference", "turn": 0},
        {"event_type": "a2a_task_received", "task_id": "C"},  # arrives meanwhile: C's
        {"event_type": "tool_call", "tool_name": "ask"},
        {"event_type": "task_end", "task_id": "A"},
        {"event_type": "task_start", "task_id": "B"},
        {"event_type": "inference", "turn": 9},
        {"event_type": "task_end", "task_id": "B"},
    ]] + ["{not json", "[1, 2]", ""]
    mine = task_lines(lines, "A")
    assert [e["event_type"] for e in mine] == ["a2a_task_received", "task_start", "inference", "tool_call", "task_end"]
    assert [e.get("turn") for e in mine if e["event_type"] == "inference"] == [0]
    assert [e["event_type"] for e in task_lines(lines, "B")] == ["a2a_task_received", "task_start", "inference",
                                                                 "task_end"]
    assert task_lines(lines, "Z") == []
