"""Prometheus metrics of one daemon, in a registry of its own (`prometheus_client`).

Nothing is registered in the library's global registry: each `DaemonMetrics` owns a
`CollectorRegistry`, so two daemons in one process never clash and each `/metrics` shows only
its own daemon. Updates are in-memory counter and histogram bumps (no I/O), safe on the event
loop; the gauges that mirror the daemon's state (running, queued, SSE streams) are read at
scrape time through callbacks.

Labels come from fixed sets only (task states, store method names): never a task, context or
client id, so the series count stays bounded and a scrape reveals no task content.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from murmurd.a2a.core.tasks import TaskRecord, TaskState

CONTENT_TYPE = CONTENT_TYPE_LATEST
# Agent tasks last from under a second (a scripted answer) to many minutes (a coding task).
TASK_DURATION_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
# A store call: SQLite on local disk is well under a millisecond; a network database a few.
STORE_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
_LIVE_STATES = tuple(s for s in TaskState if not s.terminal)
_TERMINAL_STATES = tuple(s for s in TaskState if s.terminal)


class DaemonMetrics:
    """The metrics of one served capsule. `task_changed` is told every stored state change;
    `watch_*` connect the scrape-time gauges; `timed_store` wraps the task store."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        self.tasks = Gauge("murmurd_tasks", "Tasks this daemon holds that have not finished, by state.",
                           ["state"], registry=registry)
        self.tasks_finished = Counter("murmurd_tasks_finished", "Tasks that reached a terminal state, by state.",
                                      ["state"], registry=registry)
        self.task_duration = Histogram(
            "murmurd_task_duration_seconds",
            "Seconds from a task's acceptance to its terminal state, by that state (rejected tasks excluded).",
            ["state"], buckets=TASK_DURATION_BUCKETS, registry=registry)
        self.tasks_running = Gauge("murmurd_tasks_running", "Tasks started and not yet ended (input-required included).",
                                   registry=registry)
        self.tasks_queued = Gauge("murmurd_tasks_queued", "Tasks accepted and waiting for a slot.", registry=registry)
        self.sse_subscribers = Gauge("murmurd_sse_subscribers", "Open SSE streams (message/stream, resubscribe, watch).",
                                     registry=registry)
        self.gc_frozen = Gauge("murmurd_gc_frozen_objects",
                               "Start-up objects the cyclic collector's passes skip (gc.freeze at start-up).",
                               registry=registry)  # set once, when `murmurd serve` freezes them
        self.store_latency = Histogram("murmurd_store_operation_seconds", "Seconds one task store call took, by method.",
                                       ["operation"], buckets=STORE_LATENCY_BUCKETS, registry=registry)
        for state in _LIVE_STATES:
            self.tasks.labels(state.value)
        for state in _TERMINAL_STATES:
            self.tasks_finished.labels(state.value)
        self._live: dict[str, str] = {}  # task id -> the state it is counted under in `tasks`

    def task_changed(self, record: TaskRecord) -> None:
        """A task's state was stored: move it between the `tasks` gauges; on a terminal state,
        count it and observe its duration (once: a task leaves `_live` when it finishes)."""
        previous = self._live.pop(record.id, None)
        if previous is not None:
            self.tasks.labels(previous).dec()
        state = record.state
        if not state.terminal:
            self._live[record.id] = state.value
            self.tasks.labels(state.value).inc()
            return
        self.tasks_finished.labels(state.value).inc()
        if state is not TaskState.REJECTED:
            self.task_duration.labels(state.value).observe(max(0.0, (record.updated_at - record.created_at) / 1000))

    def watch_tasks(self, running: Callable[[], int], queued: Callable[[], int]) -> None:
        self.tasks_running.set_function(running)
        self.tasks_queued.set_function(queued)

    def watch_streams(self, open_streams: Callable[[], int]) -> None:
        self.sse_subscribers.set_function(open_streams)

    def timed_store(self, store: Any) -> Any:
        return TimedStore(store, self.store_latency)

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format (what `GET /metrics` answers)."""
        return generate_latest(self.registry)


class TimedStore:
    """A task store whose every coroutine method is timed into `histogram`, labelled by the
    method's name; everything else passes through. Generic, so methods a store adds (a shared
    store's leases) are timed too without this class knowing them. `isinstance` sees the wrapped
    store's class (as `unittest.mock` specs do), so code asking which store it has still can."""

    def __init__(self, store: Any, histogram: Histogram) -> None:
        self._store = store
        self._histogram = histogram

    @property
    def inner(self) -> Any:
        return self._store

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # noqa: D105
        return type(self._store)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if not inspect.iscoroutinefunction(attr):
            return attr
        observe = self._histogram.labels(name).observe

        @functools.wraps(attr)
        async def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return await attr(*args, **kwargs)
            finally:
                observe(time.perf_counter() - start)

        # Kept: the next call finds it without this lookup, the wrapping and the label (a store
        # call or more per task state; the names are the store's methods, a bounded set).
        self.__dict__[name] = timed
        return timed
