"""The per-capsule event log behind `message/stream` and `stream/watch` (runtime-notes §6).

Every event of every task gets the next id of one capsule-wide counter and goes into a bounded
replay buffer, then to each live subscriber's bounded queue. Publishing is synchronous and never
waits: a subscriber whose queue is full is dropped ("lagged"); it drains what it already has and
ends, and its client reconnects with `Last-Event-ID`, getting a replay from the buffer or a `gap`
frame when the events it missed were evicted (the SSE handlers resume by themselves with
`follow_batches`; every framing then sends a frame saying what was dropped, the A2A ones as a
status-update, see `murmurd.a2a.wire.events`). So a slow or vanished reader costs at most one
full queue of memory, never slows the session worker or the other readers, and never loses an
event without being told.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from murmurd.text import json_text

HEARTBEAT_SECONDS = 15
"""The server sends a `:heartbeat` comment this often (sse-starlette `ping`)."""

EVENT_TYPES = frozenset({"status", "text", "thinking", "artifact", "error"})
GAP = "gap"
BUFFER_BYTES = 16 * 1024 * 1024
"""The replay buffer's default bound in bytes (of frame JSON), beside its bound in events."""


@dataclass(frozen=True)
class StreamEvent:
    """One upstream SSE frame. `id` is None only for the synthetic `gap` item, whose `task_id`
    is the subscription's (None for a watch stream)."""

    id: int | None
    type: str
    task_id: str | None
    data: dict[str, Any]
    final: bool = False  # True only for a `status` event whose frame says final: true
    after_id: int | None = None  # a gap only: the last id its subscriber had (None: unknown, an earlier run's)


def sse_frame(event: StreamEvent) -> dict[str, str]:
    """The event as keyword arguments for sse-starlette's `ServerSentEvent` (gap frames carry no
    id, so a client's `Last-Event-ID` keeps pointing at the last real event)."""
    frame = {"event": event.type, "data": json_text(event.data)}  # always encodable, see murmurd.text
    if event.id is not None:
        frame["id"] = str(event.id)
    return frame


class Subscription:
    """An async iterator over one subscriber's events: gap?, replay, then live events.

    Ends when closed, after yielding a final status event (with `close_on_final`), or once a
    lagged subscription has drained its queue (`lagged` is then True; resume with
    `EventLog.subscribe(after_id=sub.resume_after, ...)`, or use `EventLog.follow`).
    """

    def __init__(self, log: EventLog, task_id: str | None, close_on_final: bool, maxsize: int) -> None:
        self._log = log
        self.task_id = task_id
        self.close_on_final = close_on_final
        self._maxsize = maxsize
        self._replay: deque[StreamEvent] = deque()
        self._queue: deque[StreamEvent] = deque()
        self._wakeup = asyncio.Event()
        self._finished = False
        self.lagged = False
        self.closed = False
        self.resume_after = 0  # a Last-Event-ID that resumes this subscription without loss

    def _wants(self, event: StreamEvent) -> bool:
        return self.task_id is None or event.task_id == self.task_id

    def _offer(self, event: StreamEvent) -> bool:
        """Called by the publisher; False means "drop me" (queue full)."""
        if not self._wants(event):
            return True
        if len(self._queue) >= self._maxsize:
            self.lagged = True
            self._wakeup.set()
            return False
        self._queue.append(event)
        self._wakeup.set()
        return True

    @property
    def pending(self) -> int:
        """Events waiting to be read (replay plus live queue)."""
        return len(self._replay) + len(self._queue)

    def close(self) -> None:
        """Unregister and end the iteration (undelivered events are discarded)."""
        self.closed = True
        self._replay.clear()
        self._queue.clear()
        self._log._unregister(self)
        self._wakeup.set()

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> StreamEvent:
        while True:
            if self._finished or self.closed:
                raise StopAsyncIteration
            if self._replay:
                event = self._replay.popleft()
            elif self._queue:
                event = self._queue.popleft()
            elif self.lagged:
                self._finished = True
                raise StopAsyncIteration
            else:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            if self._admit(event):
                return event

    def take_ready(self, limit: int) -> list[StreamEvent]:
        """Up to `limit` more events that are already here, without waiting (for batching writes)."""
        ready: list[StreamEvent] = []
        while len(ready) < limit and not (self._finished or self.closed):
            if self._replay:
                event = self._replay.popleft()
            elif self._queue:
                event = self._queue.popleft()
            else:
                break
            if self._admit(event):
                ready.append(event)
        return ready

    def _admit(self, event: StreamEvent) -> bool:
        """Track the resume point; skip what the replay already gave; finish on a final status."""
        if event.id is None:  # gap: everything before the first available id is gone
            self.resume_after = max(self.resume_after, event.data["first_available_id"] - 1)
        elif event.id <= self.resume_after:
            return False  # already yielded from the replay snapshot
        else:
            self.resume_after = event.id
        if self.close_on_final and event.final:
            self._finished = True
            self._log._unregister(self)
        return True

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        self.close()


class EventLog:
    """One capsule's event ids, replay buffer and subscribers. Use it on the event loop thread
    (`publish_threadsafe` from other threads)."""

    def __init__(self, buffer_size: int = 4096, subscriber_queue: int = 1024,
                 buffer_bytes: int = BUFFER_BYTES) -> None:
        if buffer_size < 1 or subscriber_queue < 1 or buffer_bytes < 1:
            raise ValueError("buffer_size, subscriber_queue and buffer_bytes must be at least 1")
        self.buffer_size = buffer_size
        self.buffer_bytes = buffer_bytes
        self.subscriber_queue = subscriber_queue
        self._buffer: deque[StreamEvent] = deque()
        self._sizes: deque[int] = deque()  # each buffered event's frame size, in step with _buffer
        self._held_bytes = 0
        self._subscribers: dict[Subscription, None] = {}  # insertion-ordered set
        self._next_id = 1
        self._closed = False  # set at shutdown: every subscription ends at once from then on

    @property
    def last_id(self) -> int:
        """The id of the newest event (0 before the first)."""
        return self._next_id - 1

    @property
    def first_available_id(self) -> int:
        """The oldest id still in the replay buffer (`last_id + 1` when it is empty)."""
        return self._buffer[0].id if self._buffer and self._buffer[0].id is not None else self._next_id

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)

    def buffered(self) -> tuple[StreamEvent, ...]:
        return tuple(self._buffer)

    def publish(self, type: str, task_id: str, data: dict[str, Any], final: bool | None = None) -> StreamEvent:
        """Record one event and hand it to every live subscriber without waiting.

        `final` defaults to the frame's own `final` member; it only counts for `status` events
        (a final text frame ends a turn, not the stream).
        """
        if type not in EVENT_TYPES:
            raise ValueError(f"unknown stream event type {type!r}")
        if final is None:
            final = data.get("final") is True
        event = StreamEvent(self._next_id, type, task_id, data, final=bool(final) and type == "status")
        self._deliver(event)
        return event

    def ingest(self, event: StreamEvent) -> bool:
        """Take an event numbered elsewhere (a shared log's database), as `publish` would have
        taken it; ids must rise, so one seen before is ignored (False)."""
        if event.id is None or event.id < self._next_id:
            return False
        self._deliver(event)
        return True

    def _deliver(self, event: StreamEvent) -> None:
        assert event.id is not None
        self._next_id = event.id + 1
        self._keep(event)
        lagged = [sub for sub in self._subscribers if not sub._offer(event)]
        for sub in lagged:
            self._unregister(sub)

    @property
    def buffered_bytes(self) -> int:
        """The replay buffer's size: the sum of its frames' JSON text."""
        return self._held_bytes

    def _keep(self, event: StreamEvent) -> None:
        """Into the replay buffer; the oldest events leave while it holds more than `buffer_size`
        events or `buffer_bytes` of frames (the newest event always stays)."""
        size = len(json_text(event.data))
        self._buffer.append(event)
        self._sizes.append(size)
        self._held_bytes += size
        while len(self._buffer) > 1 and (len(self._buffer) > self.buffer_size or self._held_bytes > self.buffer_bytes):
            self._buffer.popleft()
            self._held_bytes -= self._sizes.popleft()

    def publish_threadsafe(self, loop: asyncio.AbstractEventLoop, type: str, task_id: str,
                           data: dict[str, Any], final: bool | None = None) -> None:
        """`publish` from any thread (a WASM call's sink runs on a pool thread, or on the loop
        when the loop reads the call); events keep their calling order. On the loop itself it
        publishes at once: a hop through the loop's queue would let what the caller publishes
        next overtake it."""
        if asyncio._get_running_loop() is loop:
            self.publish(type, task_id, data, final)
        else:
            loop.call_soon_threadsafe(self.publish, type, task_id, data, final)

    def subscribe(self, after_id: int | None = None, task_id: str | None = None,
                  close_on_final: bool = True) -> Subscription:
        """A new subscriber; `after_id` (a `Last-Event-ID`) first replays buffered events after it.

        `after_id=0` replays the whole buffer. An `after_id` beyond `last_id` comes from an
        earlier daemon run (ids restart at 1), so it gets a gap and the whole buffer.
        """
        sub = Subscription(self, task_id, close_on_final, self.subscriber_queue)
        if self._closed:
            sub.closed = True
            return sub
        # Register before snapshotting: nothing published from here on can be missed, and
        # anything seen twice is skipped by id in `__anext__`.
        self._subscribers[sub] = None
        if after_id is None:
            sub.resume_after = self.last_id
        else:
            first = self.first_available_id
            stale = after_id > self.last_id
            if stale or after_id + 1 < first:
                sub._replay.append(StreamEvent(None, GAP, task_id, {"first_available_id": first},
                                               after_id=None if stale else after_id))
            sub.resume_after = 0 if stale else after_id
            sub._replay.extend(e for e in self._buffer
                               if e.id is not None and e.id > sub.resume_after and sub._wants(e))
        return sub

    async def follow(self, after_id: int | None = None, task_id: str | None = None,
                     close_on_final: bool = True) -> AsyncIterator[StreamEvent]:
        """Like `subscribe`, but a lagged subscription resumes from its last id by itself (replay,
        or a gap if the buffer moved on) instead of ending: what an SSE handler wants when it
        would rather not make the client reconnect. While it is lagged it is unregistered, so a
        reader stuck on a dead socket still costs the publisher nothing."""
        async for batch in self.follow_batches(after_id, task_id, close_on_final, max_batch=1):
            for event in batch:
                yield event

    async def follow_batches(self, after_id: int | None = None, task_id: str | None = None,
                             close_on_final: bool = True, max_batch: int = 256) -> AsyncIterator[list[StreamEvent]]:
        """`follow`, yielding every event that is already waiting together with the next one, so
        an SSE handler writes a burst of chunks to its socket once instead of once per chunk."""
        sub = self.subscribe(after_id, task_id, close_on_final)
        try:
            while True:
                async for event in sub:
                    yield [event, *sub.take_ready(max_batch - 1)]
                if not sub.lagged:
                    return
                sub = self.subscribe(sub.resume_after, task_id, close_on_final)
        finally:
            sub.close()

    def close_subscribers(self) -> None:
        """End every subscription (at shutdown): each stream's response then completes, so the
        HTTP server is not left waiting on streams that would never end by themselves."""
        self._closed = True
        for sub in list(self._subscribers):
            sub.close()

    def _unregister(self, sub: Subscription) -> None:
        self._subscribers.pop(sub, None)
