"""SSE streams through a real daemon: resume, gaps, many watchers, and a stuck subscriber."""

from __future__ import annotations

import contextlib
import json
import socket
import sqlite3
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import yaml

from a2akit import chaos_capsule, serving
from conftest import EXAMPLES


@pytest.fixture(autouse=True)
def _built(artifacts) -> None:
    for name in ("chaos-driver", "ask"):
        artifacts.fixture(name)
    artifacts.example("echo")
    artifacts.example("scripted-driver")


def _message(text: str) -> dict:
    return {"message": {"messageId": f"m{time.monotonic_ns()}", "role": "user", "parts": [{"text": text}]}}


def test_last_event_id_resumes_without_duplicates_or_loss(tmp_path: Path) -> None:
    with serving(chaos_capsule(tmp_path), tmp_path / "state") as served:
        full = served.events("message/stream", _message("resume me"))
        task_id = full[0][2]["id"]
        for cut in range(1, len(full)):
            resumed = served.events("tasks/resubscribe", {"id": task_id}, headers={"Last-Event-ID": full[cut - 1][0]})
            assert resumed == full[cut:], cut


def test_watch_resumes_across_a_reconnect(tmp_path: Path) -> None:
    with serving(chaos_capsule(tmp_path), tmp_path / "state") as served:
        first: list = []
        watcher = threading.Thread(target=lambda: served.events("stream/watch", {}, limit=3, into=first))
        watcher.start()
        time.sleep(0.5)
        served.events("message/stream", _message("one"))
        served.events("message/stream", _message("two"))
        watcher.join(timeout=10)
        # Resume from the third frame: everything after it, across both tasks, in order.
        resumed: list = []

        def follow() -> None:
            with contextlib.suppress(httpx.HTTPError):  # the server goes away at the end of the test
                served.events("stream/watch", {}, headers={"Last-Event-ID": first[-1][0]}, into=resumed)

        reader = threading.Thread(target=follow)
        reader.daemon = True
        reader.start()
        deadline = time.monotonic() + 10
        while sum(1 for _i, e, d in resumed if e == "status" and d.get("final")) < 2:
            assert time.monotonic() < deadline, resumed
            time.sleep(0.05)
        ids = [int(i) for i, _e, _d in first + resumed]
        assert ids == list(range(ids[0], ids[0] + len(ids)))


def test_a_resume_past_the_buffer_gets_a_gap(tmp_path: Path) -> None:
    with serving(chaos_capsule(tmp_path), tmp_path / "state", "--stream-buffer", "2") as served:
        full = served.events("message/stream", _message("evict me"))
        assert len(full) == 4
        resumed = served.events("tasks/resubscribe", {"id": full[0][2]["id"]}, headers={"Last-Event-ID": full[0][0]})
        gap_id, gap_event, gap_data = resumed[0]
        assert gap_event == "gap" and gap_id is None
        assert gap_data["first_available_id"] == int(full[-1][0]) - 1
        assert resumed[1:] == full[-2:]


def test_fifty_watchers_of_one_task_receive_every_event_in_order(tmp_path: Path) -> None:
    with serving(chaos_capsule(tmp_path), tmp_path / "state") as served:
        task = served.send("mode:ask")
        served.wait_state(task["id"], "input-required")
        results: list[list] = [[] for _ in range(50)]
        threads = [threading.Thread(target=served.events, args=("tasks/resubscribe", {"id": task["id"]}),
                                    kwargs={"headers": {"Last-Event-ID": "0"}, "into": results[i]})
                   for i in range(50)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 20
        while not all(any(d.get("status", {}).get("state") == "input-required" for _i, _e, d in r) for r in results):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        served.send("yes", taskId=task["id"])
        for thread in threads:
            thread.join(timeout=30)
        first = results[0]
        assert first[-1][2]["status"]["state"] == "completed"
        assert all(r == first for r in results)
        ids = [int(i) for i, _e, _d in first]
        assert ids == sorted(ids)


def _long_text_capsule(root: Path) -> Path:
    words = " ".join(f"word{i}" for i in range(3000))
    directory = root / "talker"
    directory.mkdir()
    manifest = {
        "name": "talker", "version": "1.0.0",
        "artifacts": [{"name": "scripted-driver", "runtime": "driver", "source": str(EXAMPLES / "scripted-driver"),
                       "local_source": True}],
        "inference": {"endpoint": "http://127.0.0.1:9", "model": "m", "driver": {
            "artifact": "scripted-driver",
            "config": {"responses": [{"stop_reason": "end_turn", "content": [{"type": "text", "text": words}]}]}}},
        "lifecycle": {"after_task": "sleep", "task_acceptance": "queue", "queue_depth": 10},
    }
    (directory / "murmur.yaml").write_text(yaml.safe_dump(manifest))
    return directory


def test_a_subscriber_that_stops_reading_does_not_stall_the_task(tmp_path: Path) -> None:
    with serving(_long_text_capsule(tmp_path), tmp_path / "state") as served:
        address = urlsplit(served.url)
        stuck = socket.create_connection((address.hostname, address.port))
        stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "stream/watch", "params": {}}).encode()
        stuck.sendall(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        time.sleep(0.3)  # the stuck watcher is registered; it never reads a byte
        started = time.monotonic()
        tasks = [served.send("talk") for _ in range(5)]
        for task in tasks:
            served.wait_state(task["id"], "completed", timeout=60)
        elapsed = time.monotonic() - started
        healthy = served.events("message/stream", _message("after"))
        assert healthy[-1][2]["status"]["state"] == "completed"
        assert sum(1 for _i, e, _d in healthy if e == "text") > 1000
        stuck.close()
        assert elapsed < 30


def test_a_subscribe_snapshot_agrees_with_the_stream_after_it(tmp_path: Path) -> None:
    """The live record is saved before its status is published: a subscriber that arrives in
    between (held open here by a real SQLite write lock) gets the task as it is, and the status
    event that then announces the same state is not sent again (a2a-sdk clients saw a second
    WORKING after a WORKING snapshot on a loaded machine)."""
    with serving(chaos_capsule(tmp_path), tmp_path / "state") as served:
        def v10(text: str, **extra: str) -> dict:
            return {"message": {"messageId": f"m{time.monotonic_ns()}", "role": "ROLE_USER",
                                "parts": [{"text": text}], **extra}}

        asked = served.rpc("SendMessage", v10("mode:ask"))["result"]["task"]
        assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        lock = sqlite3.connect(tmp_path / "state" / "tasks.sqlite3", isolation_level=None, timeout=30)
        replied: list[dict] = []
        try:
            lock.execute("BEGIN IMMEDIATE")  # the daemon's next save waits here
            reply = threading.Thread(target=lambda: replied.append(
                served.rpc("SendMessage", v10("approved", taskId=asked["id"]))))
            reply.start()
            served.wait_state(asked["id"], "working")  # the live record moved on; its save waits
            frames: list = []
            reader = threading.Thread(target=lambda: served.events("SubscribeToTask", {"id": asked["id"]}, into=frames))
            reader.start()
            deadline = time.monotonic() + 30
            while not frames:
                assert time.monotonic() < deadline, "no snapshot"
                time.sleep(0.02)
        finally:
            lock.execute("ROLLBACK")
            lock.close()
        reader.join(timeout=30)
        reply.join(timeout=30)
        assert replied and replied[0]["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", replied
        results = [data["result"] for _id, _event, data in frames]
        assert results[0]["task"]["status"]["state"] == "TASK_STATE_WORKING"
        assert [m["parts"][0]["text"] for m in results[0]["task"]["history"]] == ["mode:ask", "approved"]
        states = [r["statusUpdate"]["status"]["state"] for r in results if "statusUpdate" in r]
        assert states == ["TASK_STATE_COMPLETED"]  # the WORKING its save announced is not repeated
