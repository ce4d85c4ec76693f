"""What an operator's trace read may hold (`GET /tasks/{id}/trace`): at most `TRACE_READERS`
reads at once, one more refused with 503 and `Retry-After` (an in-process daemon behind uvicorn,
its reads held on their threads); a read's slot kept until its answer is sent, or until its
thread ends when its caller is gone (real threads); and of a trace only the latest `MAX_EVENTS`
events, at most `MAX_KEPT_BYTES` of them, kept while it is read a line at a time (real files)."""

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
from murmurd import workdir_fs
from murmurd.a2a.http.task_trace import MAX_EVENTS, MAX_KEPT_BYTES, TRACE_READERS, TaskTrace, _ReadSlots, _SlotResponse
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


@pytest.mark.anyio
@pytest.mark.parametrize("fails", [False, True])
async def test_a_read_holds_its_slot_until_its_answer_is_sent(fails: bool) -> None:
    slots, sending, go_on = _ReadSlots(1), asyncio.Event(), asyncio.Event()
    body, release = await slots.run(lambda: b'{"events":[]}')
    sent: list[dict] = []

    async def send(message: dict) -> None:  # a client that reads only when the test says so
        sending.set()
        await go_on.wait()
        if fails:
            raise OSError("the client went away")
        sent.append(message)

    answer = asyncio.ensure_future(_SlotResponse(body, release=release)({"type": "http"}, None, send))
    await sending.wait()
    assert slots.running == 1  # the answer is not sent yet: the slot is still taken
    go_on.set()
    if fails:
        with pytest.raises(OSError):
            await answer
    else:
        await answer
        assert sent[-1]["body"] == body
    assert slots.running == 0


def _events(task: str, stamps: list[int], text: str = "") -> list[str]:
    return [json.dumps({"event_type": "inference", "task_id": task, "timestamp": t, "text": text}) for t in stamps]


def test_only_the_latest_events_are_kept_and_every_session_named_is_found() -> None:
    session = "ses_" + "a" * 32
    lines = [json.dumps({"event_type": "a2a_task_session", "task_id": "A", "task_session_id": session,
                         "timestamp": 0}),
             json.dumps({"event_type": "a2a_task_session", "task_id": "A", "task_session_id": "../etc",
                         "timestamp": 0})]
    lines += _events("A", list(range(1, 2 * MAX_EVENTS + 1))) + _events("B", [1])
    found, sessions = TaskTrace(), set()
    found.add(lines, "A", sessions)
    assert found.total == 2 * MAX_EVENTS + 2 and found.truncated
    assert sessions == {session}  # the session line was dropped from what is kept, its session found
    found.add(_events("A", [5]), "A")  # an older line, from another trace
    kept = found.ordered()
    assert [e["timestamp"] for e in kept] == list(range(MAX_EVENTS + 1, 2 * MAX_EVENTS + 1))


def test_the_latest_by_timestamp_are_kept_whatever_the_file_order() -> None:
    """A clock stepped back: the last lines of the file are older than one before them."""
    start = json.dumps({"event_type": "task_start", "task_id": "A", "timestamp": 10_000})
    found = TaskTrace()
    found.add([start, *_events("A", list(range(1, MAX_EVENTS + 1)))], "A")
    kept = found.ordered()
    assert len(kept) == MAX_EVENTS and kept[-1]["event_type"] == "task_start" and kept[0]["timestamp"] == 2


def test_what_a_read_keeps_is_bounded_in_bytes_and_a_line_too_long_is_skipped_unread(tmp_path: Path) -> None:
    big = "x" * (MAX_KEPT_BYTES // 4)
    lines = _events("A", [1, 2, 3, 4, 5], big)
    (tmp_path / "trace.jsonl").write_text("\n".join([*lines[:2], "y" * (MAX_KEPT_BYTES + 10), *lines[2:]]) + "\n")
    read = list(workdir_fs.read_lines(tmp_path, "trace.jsonl", max_bytes=64 * MAX_KEPT_BYTES, max_line=MAX_KEPT_BYTES))
    assert read[2] is None and [line is None for line in read].count(True) == 1 and len(read) == 6
    found = TaskTrace()
    found.add(read, "A")
    kept = found.ordered()
    assert [e["timestamp"] for e in kept] == [3, 4, 5]  # four would pass the bytes kept
    assert found.total == 5 and found.skipped == 1 and found.truncated
    with pytest.raises(workdir_fs.FileTooLarge):
        list(workdir_fs.read_lines(tmp_path, "trace.jsonl", max_bytes=MAX_KEPT_BYTES, max_line=MAX_KEPT_BYTES))


def test_a_trace_a_guest_replaced_with_a_symlink_is_refused_never_followed(tmp_path: Path, host: ComponentHost) -> None:
    with in_process(tmp_path, host) as (daemon, _store, url, _loop):
        task_id = _completed_task(url)
        workdir = daemon.staged.workdir
        trace = workdir.root / workdir.book("trace.jsonl")
        secret = tmp_path / "secret.jsonl"
        secret.write_text(json.dumps({"event_type": "task_start", "task_id": task_id, "stolen": True}) + "\n")
        trace.unlink()  # the writer keeps its open file; the name now leads elsewhere
        trace.symlink_to(secret)
        refused = httpx.get(f"{url}/tasks/{task_id}/trace", timeout=30)
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["message"].endswith("symlink; murmurd follows no symlink inside the workdir")
        assert "stolen" not in refused.text
        trace.unlink()
        assert httpx.get(f"{url}/tasks/{task_id}/trace", timeout=30).status_code == 200  # the slot came back
