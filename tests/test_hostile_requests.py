"""Every hostile request of issue 8 against one real `murmurd serve`, which then still runs an
ordinary task to completion: nothing a client sends is a 500 or -32603, nothing is half-recorded."""

from __future__ import annotations

import base64
import json
import sqlite3
from pathlib import Path

import httpx

from a2akit import Served, chaos_capsule, serving

RETAIN = 10


def deep(levels: int) -> object:
    value: object = "bottom"
    for _ in range(levels):
        value = {"k": value}
    return value


def raw_rpc(served: Served, text: str, headers: dict[str, str] | None = None) -> dict:
    """`text` is sent as is, so it may carry JSON escapes a Python client would refuse (`\\ud800`)."""
    response = served.post(None, raw=text.encode("ascii"), headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


def error_code(answer: dict) -> int | None:
    return answer.get("error", {}).get("code")


def task_rows(served: Served) -> int:
    with sqlite3.connect(served.state_dir / "tasks.sqlite3") as db:
        return db.execute("SELECT count(*) FROM tasks").fetchone()[0]


def task_rows_by_state(served: Served) -> dict[str, int]:
    with sqlite3.connect(served.state_dir / "tasks.sqlite3") as db:
        return dict(db.execute("SELECT state, count(*) FROM tasks GROUP BY state").fetchall())


def sse_head(served: Served, body: dict, last_event_id: bytes) -> tuple[int, str]:
    """Status and content type of a stream opened with a raw Last-Event-ID (a failure before the
    stream starts would answer JSON, or a 500)."""
    headers = [(b"content-type", b"application/json"), (b"last-event-id", last_event_id)]
    with httpx.Client(timeout=30) as client:
        with client.stream("POST", served.url, content=json.dumps(body).encode(), headers=headers) as response:
            return response.status_code, response.headers["content-type"]


def check_stream_headers(served: Served, task_id: str) -> None:
    streams = [
        {"jsonrpc": "2.0", "id": 1, "method": "tasks/resubscribe", "params": {"id": task_id}},
        {"jsonrpc": "2.0", "id": 2, "method": "SubscribeToTask", "params": {"id": task_id}},
        {"jsonrpc": "2.0", "id": 3, "method": "stream/watch", "params": {}},
    ]
    for body in streams:
        for value in (b"\xb2", b"9" * 4301, b"1" * 19, b"-1", b"\xd9\xa1"):
            status, kind = sse_head(served, body, value)
            # A2A 1.0: a finished task has nothing to subscribe to (UnsupportedOperationError, JSON)
            expected = "application/json" if body["method"] == "SubscribeToTask" else "text/event-stream"
            assert status == 200 and kind.startswith(expected), (body["method"], value)


def check_json_rpc_envelope(served: Served) -> None:
    bad_id = raw_rpc(served, '{"jsonrpc": "2.0", "id": "\\ud800", "method": "tasks/get", "params": {"id": "x"}}')
    assert error_code(bad_id) == -32600 and bad_id["id"] is None
    bad_method = raw_rpc(served, '{"jsonrpc": "2.0", "id": 7, "method": "\\ud800", "params": {}}')
    assert error_code(bad_method) == -32600 and bad_method["id"] == 7
    huge_float = raw_rpc(served, '{"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": 1e400}}')
    assert error_code(huge_float) == -32700


def check_deep_metadata(served: Served) -> None:
    before = task_rows(served)
    message = {"messageId": "m-deep", "role": "ROLE_USER", "parts": [{"text": "deep"}], "metadata": deep(400)}
    answer = served.rpc("SendMessage", {"message": message})
    assert error_code(answer) == -32602 and "nested deeper" in answer["error"]["message"]
    assert task_rows(served) == before
    listed = served.rpc("ListTasks", {})
    assert "result" in listed, listed


def check_page_token(served: Served) -> None:
    for offset in (2**63, 2**64 + 5, 10**30):
        token = base64.urlsafe_b64encode(f"offset:{offset}".encode()).decode().rstrip("=")
        assert error_code(served.rpc("ListTasks", {"pageToken": token})) == -32602


def check_lone_surrogates(served: Served) -> None:
    before = task_rows(served)
    received = sum(e["event_type"] == "a2a_task_received" for e in served.trace())
    for field, message in (
        ("messageId", '{"messageId": "\\ud800", "role": "user", "parts": [{"text": "hi"}]}'),
        ("text", '{"messageId": "m1", "role": "user", "parts": [{"text": "a\\udfffb"}]}'),
        ("contextId", '{"messageId": "m2", "role": "user", "parts": [{"text": "hi"}], "contextId": "\\ud800"}'),
        ("taskId", '{"messageId": "m3", "role": "user", "parts": [{"text": "hi"}], "taskId": "\\udbff"}'),
        ("metadata", '{"messageId": "m4", "role": "user", "parts": [{"text": "hi"}], "metadata": {"\\ud800": 1}}'),
    ):
        for method in ("message/send", "SendMessage", "message/stream"):
            answer = raw_rpc(served, f'{{"jsonrpc": "2.0", "id": 1, "method": "{method}", "params": {{"message": {message}}}}}')
            assert error_code(answer) == -32602, (method, field, answer)
            assert field in answer["error"]["message"], answer
    assert task_rows(served) == before
    assert sum(e["event_type"] == "a2a_task_received" for e in served.trace()) == received


def check_batch_cap_and_retention(served: Served) -> None:
    send = {"jsonrpc": "2.0", "method": "message/send",
            "params": {"message": {"role": "user", "parts": [{"text": "flood"}]}}}
    too_many = served.post([{**send, "id": i} for i in range(101)]).json()
    assert error_code(too_many) == -32600 and too_many["error"]["data"] == {"limit_requests": 100}
    answers = served.post([{**send, "id": i} for i in range(100)]).json()
    assert len(answers) == 100 and all("result" in a for a in answers)
    assert answers[0]["result"]["status"]["state"] == "submitted"
    states = [a["result"]["status"]["state"] for a in answers]
    assert set(states) == {"submitted", "rejected"} and states.count("rejected") > 2 * RETAIN
    accepted = [a["result"]["id"] for a in answers if a["result"]["status"]["state"] == "submitted"]
    served.wait_state(accepted[-1], "completed")
    rows = task_rows_by_state(served)
    assert rows.get("rejected", 0) <= RETAIN + 1  # finished tasks beyond the count are pruned...
    assert min(len(accepted), RETAIN) <= rows["completed"] <= RETAIN + 1  # ...and rejections evict no answer


def check_lone_surrogate_reply(served: Served) -> None:
    asked = served.send("mode:ask")
    served.wait_state(asked["id"], "input-required")
    reply = '{"messageId": "r1", "role": "user", "parts": [{"text": "\\ud800"}], "taskId": "%s"}' % asked["id"]
    answer = raw_rpc(served, f'{{"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {{"message": {reply}}}}}')
    assert error_code(answer) == -32602
    assert served.get(asked["id"])["status"]["state"] == "input-required"
    served.send("yes", taskId=asked["id"])
    assert served.wait_state(asked["id"], "completed")["status"]["response"] == "answer: yes"


def test_hostile_requests_then_an_ordinary_task(tmp_path: Path, artifacts) -> None:
    for name in ("chaos-driver", "ask"):
        artifacts.fixture(name)
    artifacts.example("echo")
    capsule = chaos_capsule(tmp_path)
    with serving(capsule, tmp_path / "state", "--retain-finished-count", str(RETAIN)) as served:
        first = served.send("warm up")
        served.wait_state(first["id"], "completed")
        check_stream_headers(served, first["id"])
        check_json_rpc_envelope(served)
        check_deep_metadata(served)
        check_page_token(served)
        check_lone_surrogates(served)
        check_batch_cap_and_retention(served)
        check_lone_surrogate_reply(served)

        task = served.send("ordinary")
        assert served.wait_state(task["id"], "completed")["status"]["response"] == "answer: ordinary"
        assert "result" in served.rpc("ListTasks", {})
        stderr = "".join(served.stderr)
        assert "Traceback" not in stderr, stderr
