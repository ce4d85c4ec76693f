"""One log line per task accepted and per task finished (logger `murmurd.tasks`).

The daemon reports every state it stores (`changed`) and every agent loop's outcome
(`outcome`, for the turns); this turns them into two lines per task: `task accepted` the first
time a live task is seen, `task finished` when it reaches a terminal state, with its context,
origin, state, duration, turns and, for a task that did not complete, the reason. A task
refused on arrival (rejected) has only its `task finished` line.

What is kept between the two lines is bounded by the live tasks, never by the tasks ever seen.
"""

from __future__ import annotations

import logging
import time

from murmurd.a2a.core.tasks import TaskRecord, TaskState

logger = logging.getLogger("murmurd.tasks")
MAX_REASON_CHARS = 500  # a failure's reason in one line; the full text is in tasks/get and the trace


def _reason(text: str | None) -> str:
    reason = " ".join((text or "").split())
    return reason if len(reason) <= MAX_REASON_CHARS else reason[:MAX_REASON_CHARS - 1] + "…"


class TaskLog:
    def __init__(self, log: logging.Logger = logger) -> None:
        self._log = log
        self._live: dict[str, float] = {}  # task id -> monotonic time accepted
        self._turns: dict[str, int] = {}  # task id -> turns its agent loops ran so far

    def changed(self, record: TaskRecord) -> None:
        """A state the store now holds."""
        if not record.state.terminal:
            if record.id not in self._live:
                self._live[record.id] = time.monotonic()
                self._log.info("task accepted", extra={
                    "task_id": record.id, "context_id": record.context_id, "origin": record.origin,
                    "state": record.state.value})
            return
        started = self._live.pop(record.id, None)
        turns = self._turns.pop(record.id, 0)
        duration_ms = int((time.monotonic() - started) * 1000) if started is not None else 0
        fields: dict[str, object] = {
            "task_id": record.id, "context_id": record.context_id, "origin": record.origin,
            "state": record.state.value, "duration_ms": duration_ms, "turns": turns}
        level = logging.INFO
        if record.state is not TaskState.COMPLETED:
            fields["reason"] = _reason(record.status_message) or record.state.value
            level = logging.WARNING if record.state is TaskState.FAILED else logging.INFO
        self._log.log(level, "task finished", extra=fields)

    def turns(self, task_id: str, turns: int) -> None:
        """An agent loop of `task_id` ran `turns` inference turns (a reply's resume adds more)."""
        if task_id in self._live:
            self._turns[task_id] = self._turns.get(task_id, 0) + turns
