"""The attacks of issue 8's second review, each against a real `murmurd serve` on loopback (real
SQLite, the real chaos driver): a model's half emoji pair, concurrent sends racing the lifecycle
and a client-chosen id, streams filling the connection cap, a small batch asking for a huge
answer, and a client that never reads its answer."""

from __future__ import annotations

import asyncio
import collections
import json
import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from a2akit import Served, chaos_capsule, serving

SLACK = 3.0  # scheduling margin on a shared two-core machine


@pytest.fixture(autouse=True)
def _built(artifacts) -> None:
    for name in ("chaos-driver", "ask"):
        artifacts.fixture(name)
    artifacts.example("echo")


def _address(served: Served) -> tuple[str, int]:
    parts = urlsplit(served.url)
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port


def _no_tracebacks(served: Served) -> None:
    stderr = "".join(served.stderr)
    assert "Traceback" not in stderr, stderr


def _send_body(text: str, request_id: int = 1, *, blocking: bool = False) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "method": "message/send",
            "params": {"message": {"messageId": f"m{request_id}-{time.monotonic_ns()}", "role": "user",
                                   "parts": [{"text": text}]}, "configuration": {"blocking": blocking}}}


async def _concurrently(url: str, bodies: list[dict]) -> list[dict]:
    async with httpx.AsyncClient(timeout=60) as client:
        async def one(body: dict) -> dict:
            return (await client.post(url, json=body)).json()
        return list(await asyncio.gather(*[one(body) for body in bodies]))


def _state(answer: dict) -> str:
    return answer["result"]["status"]["state"] if "result" in answer else f"error {answer['error']['code']}"


# -- finding 2: text that is not valid Unicode from a model ----------------------------------------

def test_half_an_emoji_pair_from_the_model_streams_and_completes(tmp_path: Path) -> None:
    capsule = chaos_capsule(tmp_path, lifecycle={"task_acceptance": "queue", "queue_depth": 3})
    with serving(capsule, tmp_path / "state") as served:
        message = {"kind": "message", "messageId": "m1", "role": "user",
                   "parts": [{"kind": "text", "text": "mode:surrogate"}]}
        frames = served.events("message/stream", {"message": message}, timeout=60)  # A2A 0.3
        last = frames[-1][2]["result"]
        assert last["status"]["state"] == "completed" and last["final"] is True, frames
        task = served.get(last["taskId"])
        assert task["status"]["state"] == "completed"
        assert task["artifacts"][0]["parts"][0]["text"] == "half \ufffd here"
        listed = served.post({"jsonrpc": "2.0", "id": 2, "method": "ListTasks", "params": {}},
                             headers={"A2A-Version": "1.0"})
        assert listed.status_code == 200 and "result" in listed.json(), listed.text
        plain = {"messageId": "m2", "role": "user", "parts": [{"text": "mode:surrogate"}]}
        upstream = served.events("message/stream", {"message": plain}, timeout=60)  # murmur's own frames
        final = upstream[-1][2]
        assert final["status"]["state"] == "completed" and final["status"]["response"] == "half \ufffd here", upstream
        _no_tracebacks(served)


# -- finding 3: concurrent sends and client-chosen ids ---------------------------------------------

def test_concurrent_sends_to_a_single_capsule_accept_exactly_one(tmp_path: Path) -> None:
    capsule = chaos_capsule(tmp_path, lifecycle={"task_acceptance": "single"}, deadline=5)
    with serving(capsule, tmp_path / "state") as served:
        answers = asyncio.run(_concurrently(served.url, [_send_body("mode:hang", i) for i in range(20)]))
        states = collections.Counter(_state(a) for a in answers)
        assert states["rejected"] == 19, states
        assert states["submitted"] + states["working"] == 1, states
        _no_tracebacks(served)


def test_concurrent_sends_never_pass_the_queue_depth(tmp_path: Path) -> None:
    capsule = chaos_capsule(tmp_path, lifecycle={"task_acceptance": "queue", "queue_depth": 2,
                                                 "max_concurrent_tasks": 2}, deadline=5)
    with serving(capsule, tmp_path / "state") as served:
        answers = asyncio.run(_concurrently(served.url, [_send_body("mode:hang", i) for i in range(20)]))
        states = collections.Counter(_state(a) for a in answers)
        assert states["rejected"] == 16, states  # two running (the bound), two queued
        _no_tracebacks(served)


def test_concurrent_sends_choosing_one_task_id_create_one_task(tmp_path: Path) -> None:
    capsule = chaos_capsule(tmp_path, lifecycle={"task_acceptance": "queue", "queue_depth": 5}, deadline=5)
    with serving(capsule, tmp_path / "state") as served:
        bodies = [{"jsonrpc": "2.0", "id": i, "method": "tasks/send",
                   "params": {"id": "dup-task", "message": {"role": "user", "parts": [{"type": "text", "text": f"hello {i}"}]}}}
                  for i in range(4)]
        answers = asyncio.run(_concurrently(served.url, bodies))
        results = [a for a in answers if "result" in a]
        errors = [a["error"] for a in answers if "error" in a]
        assert len(results) == 1, answers
        assert results[0]["result"]["id"] == "dup-task"
        assert len(errors) == 3 and all(e["code"] == -32602 and "dup-task" in e["message"] for e in errors), errors
        received = [e for e in served.trace() if e["event_type"] == "a2a_task_received"]
        assert [e["task_id"] for e in received] == ["dup-task"]
        task = served.rpc("tasks/get", {"id": "dup-task", "historyLength": 5})["result"]
        assert task["status"]["state"] == "completed"
        assert len([m for m in task["history"] if m["role"] == "user"]) == 1, task
        _no_tracebacks(served)


# -- finding 5: streams never take every connection ------------------------------------------------

def _open_watch(served: Served, source: str = "127.0.0.1") -> tuple[socket.socket, bytes]:
    """A raw `stream/watch` request from `source`; returns the socket and the answer's head (a
    refusal's whole answer: headers and its JSON body)."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "stream/watch", "params": {}}).encode()
    sock = socket.create_connection(_address(served), timeout=10, source_address=(source, 0))
    sock.sendall(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(body) + body)
    head = sock.recv(4096)
    while b"\r\n\r\n" not in head:
        head += sock.recv(4096)
    headers, got = head.split(b"\r\n\r\n", 1)
    length = next((int(line.split(b":")[1]) for line in headers.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), None)
    while length is not None and len(got) < length:
        got += sock.recv(4096)
    return sock, headers + b"\r\n\r\n" + got


def _status(head: bytes) -> int:
    return int(head.split(b" ", 2)[1])


def _error_of(head: bytes) -> dict:
    return json.loads(head.split(b"\r\n\r\n", 1)[1])["error"]


def test_streams_past_their_cap_are_refused_and_ordinary_requests_keep_working(tmp_path: Path) -> None:
    capsule = chaos_capsule(tmp_path, lifecycle={"task_acceptance": "queue", "queue_depth": 3})
    with serving(capsule, tmp_path / "state", "--max-connections", "6", "--max-streams", "3",
                 "--max-streams-per-client", "3") as served:
        opened = []
        try:
            for _ in range(3):
                sock, head = _open_watch(served)
                opened.append(sock)
                assert _status(head) == 200 and b"text/event-stream" in head, head
            refused, head = _open_watch(served)
            opened.append(refused)
            assert _status(head) == 503, head
            error = _error_of(head)
            assert error["code"] == -32000 and error["data"] == {"limit_streams": 3}, error
            # a refused message/stream creates no task
            stream = served.post({"jsonrpc": "2.0", "id": 9, "method": "message/stream",
                                  "params": {"message": {"messageId": "s1", "role": "user", "parts": [{"text": "x"}]}}},
                                 headers={"accept": "text/event-stream"})
            assert stream.status_code == 503 and stream.json()["error"]["data"] == {"limit_streams": 3}
            assert not [e for e in served.trace() if e["event_type"] == "a2a_task_received"]
            for _ in range(10):  # more requests than the connection cap, streams still open
                answer = served.rpc("tasks/get", {"id": "nothing"})
                assert answer["error"]["code"] == -32001, answer
            task = served.send("still served")
            assert served.wait_state(task["id"], "completed")["status"]["response"] == "answer: still served"
            # a stream that ends gives its slot back
            opened.pop(0).close()
            deadline = time.monotonic() + 10
            while True:
                sock, head = _open_watch(served)
                opened.append(sock)
                if _status(head) == 200:
                    break
                assert time.monotonic() < deadline, "the closed stream's slot never came back"
                time.sleep(0.2)
        finally:
            for sock in opened:
                sock.close()
        _no_tracebacks(served)


def test_one_client_address_cannot_take_every_stream(tmp_path: Path) -> None:
    capsule = chaos_capsule(tmp_path)
    with serving(capsule, tmp_path / "state", "--max-connections", "10", "--max-streams", "4",
                 "--max-streams-per-client", "2") as served:
        opened = []
        try:
            for _ in range(2):
                sock, head = _open_watch(served)
                opened.append(sock)
                assert _status(head) == 200, head
            sock, head = _open_watch(served)
            opened.append(sock)
            assert _status(head) == 503 and _error_of(head)["data"] == {"limit_streams_per_client": 2}, head
            sock, head = _open_watch(served, source="127.0.0.2")  # another client still gets one
            opened.append(sock)
            assert _status(head) == 200, head
        finally:
            for sock in opened:
                sock.close()
        _no_tracebacks(served)


# -- finding 6: a small batch cannot make a huge answer, an unread answer is dropped ---------------

def _big_task(served: Served) -> str:
    answer = served.rpc("message/send", {"message": {"messageId": "big", "role": "user",
                                                     "parts": [{"text": "A" * 200_000}]},
                                         "configuration": {"blocking": True}})
    task_id = answer["result"]["id"]
    served.wait_state(task_id, "completed")
    return task_id


def _gets(task_id: str, count: int) -> bytes:
    return json.dumps([{"jsonrpc": "2.0", "id": i, "method": "tasks/get", "params": {"id": task_id, "historyLength": 10}}
                       for i in range(count)]).encode()


def test_a_batch_answer_stops_at_the_response_cap(tmp_path: Path) -> None:
    capsule = chaos_capsule(tmp_path)
    limit = 1024 * 1024
    with serving(capsule, tmp_path / "state", "--max-response-bytes", str(limit)) as served:
        task_id = _big_task(served)
        response = served.post(None, raw=_gets(task_id, 100))
        assert response.status_code == 200
        answers = response.json()
        assert len(response.content) < limit + 10_000
        assert [a["id"] for a in answers] == list(range(100))
        whole = [a for a in answers if "result" in a]
        assert 1 <= len(whole) < 10 and all(a["result"]["id"] == task_id for a in whole)
        cut = answers[len(whole)]["error"]
        assert cut["code"] == -32000 and cut["data"] == {"limit_response_bytes": limit, "carried_out": True}, cut
        rest = [a["error"]["data"] for a in answers[len(whole) + 1:]]
        assert rest and all(d == {"limit_response_bytes": limit, "carried_out": False} for d in rest)
        # the first answer is whole whatever its size, as it would be alone
        tiny = served.post(None, raw=_gets(task_id, 2))
        assert tiny.status_code == 200
        _no_tracebacks(served)


def _read_until_closed(sock: socket.socket, limit: float) -> tuple[int, bool]:
    """Bytes read until the server ends the connection (True) or `limit` seconds pass (False)."""
    sock.settimeout(0.5)
    total, start = 0, time.monotonic()
    while time.monotonic() - start < limit:
        try:
            data = sock.recv(1 << 20)
        except TimeoutError:
            continue
        except ConnectionResetError:
            return total, True
        if not data:
            return total, True
        total += len(data)
    return total, False


def test_an_answer_left_unread_past_the_write_timeout_is_dropped(tmp_path: Path) -> None:
    capsule = chaos_capsule(tmp_path)
    write_timeout = 1.0
    with serving(capsule, tmp_path / "state", "--write-timeout", str(write_timeout),
                 "--max-response-bytes", str(64 * 1024 * 1024)) as served:
        task_id = _big_task(served)
        body = _gets(task_id, 60)  # about 11 MB of answers: more than the kernel's buffers hold
        full = len(served.post(None, raw=body).content)
        assert full > 10_000_000
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(_address(served))
        try:
            sock.sendall(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(body) + body)
            time.sleep(write_timeout + SLACK)  # never reading meanwhile
            received, closed = _read_until_closed(sock, 10)
        finally:
            sock.close()
        assert closed and received < full // 2, (received, full)
        assert served.rpc("tasks/get", {"id": task_id, "historyLength": 0})["result"]["id"] == task_id
        _no_tracebacks(served)


def test_a_slow_reader_that_keeps_reading_gets_the_whole_answer(tmp_path: Path) -> None:
    """The write deadline times a stall, not a download: a reader draining steadily is served."""
    capsule = chaos_capsule(tmp_path)
    with serving(capsule, tmp_path / "state", "--write-timeout", "1") as served:
        task_id = _big_task(served)
        body = _gets(task_id, 10)
        full = len(served.post(None, raw=body).content)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        sock.connect(_address(served))
        received = 0
        try:
            sock.sendall(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nConnection: close\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(body) + body)
            sock.settimeout(10)
            start = time.monotonic()
            while time.monotonic() - start < 60:
                data = sock.recv(256 * 1024)
                if not data:
                    break
                received += len(data)
                time.sleep(0.1)  # about 2.5 MB/s at most
        finally:
            sock.close()
        assert received > full, (received, full)  # the headers come on top of the body
        _no_tracebacks(served)


def test_a_stream_left_unread_is_closed_and_gives_its_slot_back(tmp_path: Path) -> None:
    """A watcher that stops reading: its stream stalls once the kernel's buffers are full, and
    the write deadline closes the socket (not only the subscription) and frees the stream slot."""
    capsule = chaos_capsule(tmp_path, lifecycle={"task_acceptance": "queue", "queue_depth": 3})
    with serving(capsule, tmp_path / "state", "--write-timeout", "1", "--max-connections", "4",
                 "--max-streams", "1") as served:
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "stream/watch", "params": {}}).encode()
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(_address(served))
        try:
            sock.sendall(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(body) + body)
            time.sleep(0.5)
            published = 0
            for i in range(40):  # each task streams its 200 KB text twice (the text and the status frame)
                answer = served.rpc("message/send", {"message": {"messageId": f"w{i}", "role": "user",
                                                                 "parts": [{"text": "B" * 200_000}]},
                                                     "configuration": {"blocking": True}})
                assert answer["result"]["status"]["state"] == "completed", answer
                published += 400_000
            time.sleep(1 + SLACK)
            received, closed = _read_until_closed(sock, 10)
        finally:
            sock.close()
        assert closed and received < published // 2, (received, published)
        again, head = _open_watch(served)  # the one stream slot is free again
        again.close()
        assert _status(head) == 200, head
        _no_tracebacks(served)
