"""A blocking `message/send` is answered when its task ends, whatever the store did with the end
(attack review of `TaskWaiters`: a queued task whose cancel the store refused was left with its
caller blocked for ever, once only the task's own changes woke it, and the daemon could not stop)."""

from __future__ import annotations

import sqlite3
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import httpx

from a2akit import chaos_capsule, serving

QUEUE = {"task_acceptance": "queue", "queue_depth": 64, "max_concurrent_tasks": 1}


def _blocking_send(url: str, text: str, context_id: str) -> dict[str, Any]:
    message = {"messageId": f"m{time.monotonic_ns()}", "role": "user", "parts": [{"text": text}], "contextId": context_id}
    body = {"jsonrpc": "2.0", "id": 1, "method": "message/send",
            "params": {"message": message, "configuration": {"blocking": True}}}
    return httpx.post(url, json=body, timeout=120).json()


def _in_thread(fn, *args) -> Future:  # type: ignore[no-untyped-def]
    future: Future = Future()

    def run() -> None:
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            future.set_exception(exc)

    threading.Thread(target=run, daemon=True).start()
    return future


def _task_in_context(served, context_id: str) -> str:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + 60
    while True:
        tasks = served.rpc("ListTasks", {"contextId": context_id, "pageSize": 10}).get("result", {}).get("tasks", [])
        if tasks:
            return tasks[0]["id"]
        assert time.monotonic() < deadline, f"no task stored in {context_id}"
        time.sleep(0.05)


def test_a_queued_task_whose_cancel_the_store_refuses_still_answers_its_blocked_caller(tmp_path: Path) -> None:
    capsule = chaos_capsule(tmp_path, lifecycle=QUEUE, deadline=600)
    with serving(capsule, tmp_path / "state", "--grace", "0.5") as served:
        running = served.send("mode:hang", contextId="ctx_run")
        served.wait_state(running["id"], "working")
        blocked = _in_thread(_blocking_send, served.url, "queued", "ctx_q")
        queued = _task_in_context(served, "ctx_q")
        assert served.get(queued)["status"]["state"] == "submitted"
        holder = sqlite3.connect(tmp_path / "state" / "tasks.sqlite3", isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # an operator's sqlite3 shell, a backup: past the busy timeout
        try:
            refused = served.rpc("tasks/cancel", {"id": queued})
        finally:
            holder.rollback()
            holder.close()
        assert refused["error"]["code"] == -32603, refused  # the store refused the canceled state
        answer = blocked.result(timeout=120)  # no other task's change is needed to wake it
        assert answer["result"]["status"]["state"] == "canceled", answer
        served.rpc("tasks/cancel", {"id": running["id"]})
