"""`/healthz`, `/readyz` and `/metrics` against real daemons: a `murmurd serve` subprocess on
loopback running real tasks, and an in-process daemon behind uvicorn whose real SQLite store is
closed or kept busy."""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from murmurd.containment.host import probe_host
from murmurd.containment.plan import plan_containment
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from a2akit import Served, chaos_capsule, in_process, serving
from murmurd.a2a.http.health import acceptance, uncompiled
from murmurd.a2a.core.metrics import CONTENT_TYPE, DaemonMetrics
from murmurd.a2a.core.tasks import TaskRecord, TaskState
from murmurd.host import ComponentHost
from murmurd.staging.stage import stage_capsule


@pytest.fixture(autouse=True)
def _built(artifacts) -> None:
    for name in ("chaos-driver", "ask"):
        artifacts.fixture(name)
    artifacts.example("echo")


def _http(served: Served, path: str) -> httpx.Response:
    return httpx.get(served.url.rstrip("/") + path, timeout=10)


def scrape(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a Prometheus text exposition, by (name, labels)."""
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def sample(samples: dict, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def _metrics(served: Served) -> dict:
    response = _http(served, "/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"] == CONTENT_TYPE
    return scrape(response.text)


def _wait_metric(served: Served, name: str, value: float, timeout: float = 20, **labels: str) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        samples = _metrics(served)
        if sample(samples, name, **labels) == value:
            return samples
        assert time.monotonic() < deadline, (name, labels, sample(samples, name, **labels))
        time.sleep(0.05)


@contextmanager
def _watching(served: Served) -> Iterator[threading.Event]:
    """A `stream/watch` SSE stream held open on a thread until the block ends."""
    opened, done = threading.Event(), threading.Event()
    body = {"jsonrpc": "2.0", "id": 1, "method": "stream/watch", "params": {}}

    def hold() -> None:
        with httpx.Client(timeout=30) as client, client.stream("POST", served.url, json=body) as response:
            assert response.status_code == 200
            opened.set()
            done.wait(30)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    try:
        assert opened.wait(20)
        yield opened
    finally:
        done.set()
        thread.join(timeout=10)


def test_probes_and_metrics_follow_real_tasks(tmp_path: Path) -> None:
    capsule = chaos_capsule(tmp_path, lifecycle={"task_acceptance": "queue", "queue_depth": 2,
                                                 "max_concurrent_tasks": 1})
    with serving(capsule, tmp_path / "state") as served:
        health = _http(served, "/healthz")
        assert (health.status_code, health.json()) == (200, {"status": "alive"})
        ready = _http(served, "/readyz")
        assert ready.status_code == 200
        body = ready.json()
        assert body == {"status": "ready", "checks": {"store": "ok", "components": "ok", "accepting": "ok"},
                        "failed": [], "containment": body["containment"]}
        here = plan_containment(probe_host(), "auto")
        assert body["containment"] == {"declared": "advisory", "achieved": here.achieved, "mechanism": here.mechanism}

        before = _metrics(served)
        assert sample(before, "murmurd_tasks_finished_total", state="completed") == 0
        # the start-up heap frozen (murmurd.heap): the collector's full passes skip its objects
        assert sample(before, "murmurd_gc_frozen_objects") > 10_000
        assert sample(before, "murmurd_store_operation_seconds_count", operation="ping") == 1  # the /readyz above
        assert ("murmurd_store_operation_seconds_count", frozenset({("operation", "put")})) not in before

        done = served.send("hello")
        failed = served.send("mode:failed")
        served.wait_state(done["id"], "completed")
        served.wait_state(failed["id"], "failed")
        after = _wait_metric(served, "murmurd_tasks_finished_total", 1, state="failed")
        assert sample(after, "murmurd_tasks_finished_total", state="completed") == 1
        assert sample(after, "murmurd_task_duration_seconds_count", state="completed") == 1
        assert sample(after, "murmurd_task_duration_seconds_count", state="failed") == 1
        assert 0 < sample(after, "murmurd_task_duration_seconds_sum", state="completed") < 60
        # each task created (submitted, one atomic insert), then its working and terminal states put
        assert sample(after, "murmurd_store_operation_seconds_count", operation="create") == 2
        assert sample(after, "murmurd_store_operation_seconds_count", operation="put") == 4
        assert sample(after, "murmurd_store_operation_seconds_bucket", operation="put", le="+Inf") == 4
        assert sample(after, "murmurd_store_operation_seconds_count", operation="get") >= 1  # tasks/get of a finished task
        assert sample(after, "murmurd_tasks_running") == 0 and sample(after, "murmurd_tasks_queued") == 0
        assert sample(after, "murmurd_tasks", state="working") == 0

        hanging = served.send("mode:hang")
        served.wait_state(hanging["id"], "working")
        waiting = served.send("after the hang")  # held behind the bound of 1
        assert waiting["status"]["state"] == "submitted"
        busy = _wait_metric(served, "murmurd_tasks_queued", 1)
        assert sample(busy, "murmurd_tasks_running") == 1
        assert sample(busy, "murmurd_tasks", state="working") == 1
        assert sample(busy, "murmurd_tasks", state="submitted") == 1
        assert sample(busy, "murmurd_sse_subscribers") == 0
        with _watching(served):
            assert sample(_metrics(served), "murmurd_sse_subscribers") == 1
        _wait_metric(served, "murmurd_sse_subscribers", 0)
        served.rpc("tasks/cancel", {"id": hanging["id"]})
        served.wait_state(waiting["id"], "completed")
        _wait_metric(served, "murmurd_tasks_finished_total", 2, state="completed")

        asking = served.send("mode:ask")
        served.wait_state(asking["id"], "input-required")
        paused = _wait_metric(served, "murmurd_tasks", 1, state="input-required")
        assert sample(paused, "murmurd_tasks_running") == 1 and sample(paused, "murmurd_tasks_queued") == 0
        reply = {"messageId": "reply-1", "role": "user", "parts": [{"text": "yes"}], "taskId": asking["id"]}
        served.rpc("message/send", {"message": reply})
        served.wait_state(asking["id"], "completed")
        end = _wait_metric(served, "murmurd_tasks_finished_total", 3, state="completed")
        assert sample(end, "murmurd_task_duration_seconds_count", state="completed") == 3
        assert sample(end, "murmurd_tasks_finished_total", state="canceled") == 1
        assert sample(end, "murmurd_task_duration_seconds_count", state="canceled") == 1
        assert sample(end, "murmurd_tasks_running") == 0 and sample(end, "murmurd_tasks_queued") == 0
        assert all(sample(end, "murmurd_tasks", state=s) == 0 for s in ("submitted", "working", "input-required"))
        assert sample(end, "murmurd_tasks_finished_total", state="rejected") == 0


def test_a_rejected_task_is_counted_without_a_duration(tmp_path: Path) -> None:
    with serving(chaos_capsule(tmp_path), tmp_path / "state") as served:  # single: one task at a time
        hanging = served.send("mode:hang")
        served.wait_state(hanging["id"], "working")
        refused = served.send("one too many")
        assert refused["status"]["state"] == "rejected"
        samples = _wait_metric(served, "murmurd_tasks_finished_total", 1, state="rejected")
        assert ("murmurd_task_duration_seconds_count", frozenset({("state", "rejected")})) not in samples
        assert sample(samples, "murmurd_tasks", state="working") == 1
        served.rpc("tasks/cancel", {"id": hanging["id"]})


def test_readiness_fails_while_the_daemon_drains_and_liveness_holds(tmp_path: Path) -> None:
    with serving(chaos_capsule(tmp_path), tmp_path / "state", "--grace", "6") as served:
        asking = served.send("mode:ask")
        served.wait_state(asking["id"], "input-required")
        assert _http(served, "/readyz").status_code == 200
        served.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 5
        while (ready := _http(served, "/readyz")).status_code == 200:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert ready.status_code == 503
        body = ready.json()
        assert body["status"] == "not ready" and body["failed"] == ["accepting"]
        assert body["checks"]["accepting"].startswith("shutting down")
        assert body["checks"]["store"] == "ok"
        assert _http(served, "/healthz").status_code == 200  # draining is not dead: no restart
        assert served.proc.wait(timeout=30) == 0


# -- in process: a real daemon and SQLite store behind uvicorn on loopback ------------------


def test_readiness_names_a_store_that_is_closed_or_does_not_answer(tmp_path: Path, host: ComponentHost) -> None:
    with in_process(tmp_path, host) as (daemon, store, url, loop):
        assert httpx.get(url + "/readyz", timeout=10).status_code == 200
        # the store's one thread is held by a slow call: the ping waits behind it and times out
        busy = asyncio.run_coroutine_threadsafe(store._call(lambda db: time.sleep(3)), loop)
        started = time.monotonic()
        stuck = httpx.get(url + "/readyz", timeout=10)
        assert stuck.status_code == 503 and stuck.json()["failed"] == ["store"]
        assert stuck.json()["checks"]["store"] == "unreachable: no answer within 2 s"
        assert 1.5 < time.monotonic() - started < 3.0
        busy.result(10)
        assert httpx.get(url + "/readyz", timeout=10).status_code == 200

        asyncio.run_coroutine_threadsafe(store.close(), loop).result(10)
        closed = httpx.get(url + "/readyz", timeout=10)
        assert closed.status_code == 503
        assert closed.json()["failed"] == ["store"]
        # the kind of failure, never the store's own text (it can name a database host and user)
        assert closed.json()["checks"]["store"] == "unreachable: RuntimeError (the daemon's log says more)"
        assert "closed" not in closed.text
        assert closed.json()["checks"]["accepting"] == "ok"
        assert httpx.get(url + "/healthz", timeout=10).status_code == 200  # liveness never touches the store
        assert httpx.get(url + "/metrics", timeout=10).status_code == 200


def test_two_daemons_in_one_process_keep_their_own_registries() -> None:
    first, second = DaemonMetrics(), DaemonMetrics()  # a shared registry would refuse the second
    record = TaskRecord("tsk_1", "ctx_1", TaskState.SUBMITTED, created_at=1_000, updated_at=1_000)
    first.task_changed(record)
    record = dataclasses.replace(record, state=TaskState.COMPLETED, updated_at=3_500)
    first.task_changed(record)
    mine, theirs = scrape(first.exposition().decode()), scrape(second.exposition().decode())
    assert sample(mine, "murmurd_tasks_finished_total", state="completed") == 1
    assert sample(mine, "murmurd_task_duration_seconds_sum", state="completed") == 2.5
    assert sample(mine, "murmurd_tasks", state="submitted") == 0
    assert sample(theirs, "murmurd_tasks_finished_total", state="completed") == 0
    assert not [name for name in REGISTRY._names_to_collectors if name.startswith("murmurd")]


def test_the_readiness_verdicts(tmp_path: Path, host: ComponentHost) -> None:
    assert acceptance(accepting=True, stopping=False) == "ok"
    assert acceptance(accepting=False, stopping=False) == "not accepting tasks"
    assert acceptance(accepting=False, stopping=True).startswith("shutting down")
    staged = stage_capsule(chaos_capsule(tmp_path), host=host)
    assert uncompiled(staged) == []
    staged.artifacts["echo"] = dataclasses.replace(staged.artifacts["echo"], component=None)
    assert uncompiled(staged) == ["echo"]


def test_the_timed_store_times_every_awaited_method_and_passes_the_rest(tmp_path: Path) -> None:
    from murmurd.a2a.stores.memory import MemoryTaskStore

    metrics = DaemonMetrics()
    store = metrics.timed_store(MemoryTaskStore())
    assert isinstance(store, MemoryTaskStore)  # code asking which store it has is not fooled

    async def use() -> None:
        await store.put(TaskRecord("tsk_1", "ctx_1"))
        assert (await store.get("tsk_1")).id == "tsk_1"
        await store.ping()
        await store.close()
        with pytest.raises(RuntimeError, match="closed"):
            await store.ping()

    asyncio.run(use())
    samples = scrape(metrics.exposition().decode())
    assert {op: sample(samples, "murmurd_store_operation_seconds_count", operation=op)
            for op in ("put", "get", "ping", "close")} == {"put": 1, "get": 1, "ping": 2, "close": 1}
    assert store.retention == store.inner.retention  # attributes pass through untouched
