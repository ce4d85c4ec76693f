"""`TaskWaiters`: callers waiting for one task's state to change, woken by that task only.

A blocking `message/send` waits until its task settles, a cancel until its task reads terminal.
They used to share one condition that every state change of every task notified, so each change
woke every blocked caller to re-check its own task: with N callers blocked, a task's three
changes cost 3N wake-ups, and 256 slow tasks in flight spent more CPU re-checking than running.
Here a change wakes only the callers of the task it is about; every place that changes what a
waiter reads (a stored state, a record this daemon lets go of) calls `wake` with the task's id.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class TaskWaiters:
    """Futures by task id, resolved by `wake(task_id)`. Event-loop only (no locks)."""

    def __init__(self) -> None:
        self._waiting: dict[str, list[asyncio.Future[None]]] = {}

    def wake(self, task_id: str) -> None:
        """Whoever waits on `task_id` looks again at what it waits for."""
        for future in self._waiting.pop(task_id, ()):
            if not future.done():
                future.set_result(None)

    async def wait_for(self, task_id: str, ready: Callable[[], bool]) -> None:
        """Return once `ready()` holds, looking again at each `wake(task_id)`. Cancellable (a
        timeout around it leaves nothing registered)."""
        loop = asyncio.get_running_loop()
        while not ready():
            future: asyncio.Future[None] = loop.create_future()
            waiting = self._waiting.setdefault(task_id, [])
            waiting.append(future)
            try:
                await future
            finally:
                if future.cancelled() or not future.done():  # not woken (a cancel): take it back out
                    self._drop(task_id, future)

    def _drop(self, task_id: str, future: asyncio.Future[None]) -> None:
        waiting = self._waiting.get(task_id)
        if waiting is None:
            return
        try:
            waiting.remove(future)
        except ValueError:
            pass
        if not waiting:
            del self._waiting[task_id]

    def __len__(self) -> int:
        """Tasks with a waiter now (read by tests)."""
        return len(self._waiting)
