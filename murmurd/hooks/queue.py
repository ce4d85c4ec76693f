"""The queue of one `async` hook: bounded, ordered, one worker, drained before `session_end`.

Each async hook gets one queue and one worker task per session, so its events are delivered in
the order they happened and never two at once. What a full queue does is the hook entry's
`on_overflow`: `drop` discards the new event (counted, and reported as a `queue-overflow` fault),
`block` makes the dispatcher, and so the agent loop, wait for room (back-pressure). Before each
attempt's `session_end`, and once more when the session closes, every queue drains within one
shared budget (the worker restarts with the next event); a hook still running when it is spent is
abandoned (its call cancelled) and reported as a `timeout` fault of the `drain` event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger("murmurd.hooks")

QUEUE_BOUND = 256  # events waiting per async hook: minutes of a busy loop, a few MB at most
DRAIN_BUDGET_SECONDS = 10.0  # all queues together, at session end (a hook call's own deadline is 30 s)

Deliver = Callable[[str, Any], Awaitable[None]]  # (handler, event); records its own faults, never raises
Report = Callable[[str, str, str], None]  # (event, arm, detail): a fault of this hook


class HookQueue:
    def __init__(self, name: str, deliver: Deliver, report: Report, *, overflow: str = "drop",
                 bound: int = QUEUE_BOUND) -> None:
        self.name = name
        self.overflow = overflow
        self.bound = bound
        self.dropped = 0
        self._deliver = deliver
        self._report = report
        self._queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue(bound)
        self._worker: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._worker is None:
            self._worker = asyncio.create_task(self._work(), name=f"murmurd-hook-{self.name}")

    async def put(self, handler: str, event: Any) -> None:
        """Enqueue one event: wait for room under `block`, drop and report under `drop`."""
        self.start()
        if self.overflow == "block":
            await self._queue.put((handler, event))
            return
        try:
            self._queue.put_nowait((handler, event))
        except asyncio.QueueFull:
            self.dropped += 1
            self._report(handler, "queue-overflow",
                         f"queue full ({self.bound} events); this {handler} event dropped "
                         f"({self.dropped} dropped so far)")

    async def _work(self) -> None:
        while True:
            handler, event = await self._queue.get()
            try:
                await self._deliver(handler, event)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - deliver records its faults; a bug must not kill the queue
                log.exception("async hook %s: delivering %s failed", self.name, handler)
            finally:
                self._queue.task_done()

    async def drain(self, budget: float) -> bool:
        """Wait until every queued event is delivered, at most `budget` seconds; then stop the
        worker. False when the budget ran out (the running call is abandoned and reported)."""
        drained = True
        if self._worker is not None:
            try:
                async with asyncio.timeout(budget):
                    await self._queue.join()
            except TimeoutError:
                drained = False
                self._report("drain", "timeout",
                             f"still running after the {budget:g} s drain budget; abandoned with "
                             f"{self._queue.qsize()} queued event(s) undelivered")
        await self.stop()
        return drained

    async def stop(self) -> None:
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker


async def drain_all(queues: list[HookQueue], budget: float) -> None:
    """Drain every queue concurrently under one budget."""
    if queues:
        await asyncio.gather(*(queue.drain(budget) for queue in queues))
