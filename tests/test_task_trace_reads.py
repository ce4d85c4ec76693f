"""What an operator's trace read may hold (`GET /tasks/{id}/trace`): at most `TRACE_READERS`
reads at once, one more refused with 503 and `Retry-After` (an in-process daemon behind uvicorn,
its reads held on their threads), a read's slot kept until its thread ends even when its caller
is gone (real threads), and only the last `MAX_EVENTS` events of a trace kept while it is parsed."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from a2akit import in_process
from murmurd.a2a.http import task_trace
from murmurd.a2a.http.task_trace import MAX_EVENTS, TRACE_READERS, TaskTrace, _ReadSlots
from murmurd.host import ComponentHost

@pytest.fixture(autouse=True)
def _built(artifacts) -> None:
    artifacts.fixture("chaos-driver")
    artifacts.fixture("ask")
    artifacts.example("echo")


def _completed_task(url: str) -> str:
    body = {"jsonrpc": "2.0", "id": 1, "method": "message/send",
            "params": {"message": {"messageId": "m1", "role": "user", "parts": [{"text": "hello"}]}}}
    task_id = httpx.post(url + "/", json=body, timeout=60).json()["result"]["id"]
    deadline = time.monotonic() + 60
    while True:
        get = {"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": task_id}}
        state = httpx.post(url + "/", json=get, timeout=10).json()["result"]["status"]["state"]
        if state == "completed":
            return task_id
        assert time.monotonic() < deadline, state
        time.sleep(0.05)


def test_at_most_two_trace_reads_run_at_once_and_one_more_is_told_to_retry(
        tmp_path: Path, host: ComponentHost, monkeypatch: pytest.MonkeyPatch) -> None:
    with in_process(tmp_path, host) as (_daemon, _store, url, _loop):
        trace_url = f"{url}/tasks/{_completed_task(url)}/trace"
        assert httpx.get(trace_url, timeout=30).status_code == 200
        entered, release = threading.Semaphore(0), threading.Event()
        real = task_trace.read_task_trace

        def held(*args: object) -> TaskTrace:  # the real read, once the test lets it go on
            entered.release()
            assert release.wait(60)
            return real(*args)  # type: ignore[arg-type]

        monkeypatch.setattr(task_trace, "read_task_trace", held)
        with ThreadPoolExecutor(TRACE_READERS) as pool:
            reads = [pool.submit(httpx.get, trace_url, timeout=60) for _ in range(TRACE_READERS)]
            try:
                for _ in range(TRACE_READERS):
                    assert entered.acquire(timeout=60)
                busy = httpx.get(trace_url, timeout=30)
                assert busy.status_code == 503, busy.text
                assert busy.headers["retry-after"] == "1"
                error = busy.json()["error"]
                assert error["message"] == f"Server limit reached: {TRACE_READERS} trace reads are running; try again"
                assert error["data"] == {"limit_trace_reads": TRACE_READERS}
            finally:
                release.set()
            answers = [read.result(60) for read in reads]
        assert [a.status_code for a in answers] == [200] * TRACE_READERS
        assert all("task_end" in [e["event_type"] for e in a.json()["events"]] for a in answers)
        assert httpx.get(trace_url, timeout=30).status_code == 200  # the slots came back


@pytest.mark.anyio
async def test_a_read_whose_caller_went_away_holds_its_slot_until_its_thread_ends() -> None:
    slots, release = _ReadSlots(1), threading.Event()
    caller = asyncio.ensure_future(slots.run(release.wait, 60))
    while slots.running == 0:  # the read's slot is taken in the caller's first step
        await asyncio.sleep(0)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert slots.running == 1  # its thread still reads: the slot is still taken
    release.set()
    deadline = time.monotonic() + 60
    while slots.running:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)


def test_only_the_last_events_of_a_trace_are_kept_and_every_session_it_names_is_found() -> None:
    session = "ses_" + "a" * 32
    lines = [json.dumps({"event_type": "a2a_task_session", "task_id": "A", "task_session_id": session,
                         "timestamp": 0}),
             json.dumps({"event_type": "a2a_task_session", "task_id": "A", "task_session_id": "../etc",
                         "timestamp": 0})]
    lines += [json.dumps({"event_type": "inference", "task_id": "A", "turn": n, "timestamp": n})
              for n in range(1, 2 * MAX_EVENTS + 1)]
    lines += [json.dumps({"event_type": "inference", "task_id": "B", "timestamp": 1})]
    found, sessions = TaskTrace(), set()
    found.add(lines, "A", sessions)
    assert found.total == 2 * MAX_EVENTS + 2
    assert len(found.events) == MAX_EVENTS  # the session lines were dropped from what is kept...
    assert sessions == {session}  # ...but the session they name is found (a malformed name is not)
    found.add([json.dumps({"event_type": "task_end", "task_id": "A", "timestamp": 5})], "A")  # an older line
    last = found.ordered()
    assert len(last) == MAX_EVENTS and [e.get("turn") for e in last[-2:]] == [2 * MAX_EVENTS - 1, 2 * MAX_EVENTS]
    assert "task_end" not in [e["event_type"] for e in last]  # older than the last MAX_EVENTS
    assert found.total == 2 * MAX_EVENTS + 3
