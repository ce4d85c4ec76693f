"""The capsule's event log shared by replicas through PostgreSQL.

Publishing stays synchronous and never waits (the `EventLog` contract): the event goes into a
local outbox, and one writer task per replica stores whatever has gathered in one transaction.
That transaction holds an advisory lock while it takes ids and commits, so event ids are
committed in id order across replicas (a reader that has seen id N never later finds N-1), and
sends one `NOTIFY` carrying the events themselves when they fit (under 8000 bytes), else only the
newest id (readers then fetch the rows by id). All of it is one function call, one round trip
(`murmurd_append_events`, stores/migrations.py). Every replica, the writer included, ingests
them in id order into its local `EventLog` (a hole in the ids means a fetch first): so every
replica's replay buffer holds the same events under the same ids, and a stream opened on any
replica (or reopened with `Last-Event-ID`) sees a task that runs on another. A slow backstop
(`catch_up` every few seconds) covers a notification lost with a dropped listener connection.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from typing import Any

import asyncpg

from murmurd.a2a.core.stream import BUFFER_BYTES, EVENT_TYPES, EventLog, StreamEvent
from murmurd.text import json_text

log = logging.getLogger("murmurd.a2a.replicas")

EVENTS_CHANNEL = "murmurd_events"
FETCH_BATCH = 1000


class SharedEventLog(EventLog):
    """An `EventLog` whose ids come from the database; `start` it on the replica's loop."""

    def __init__(self, pool: asyncpg.Pool, buffer_size: int = 4096, subscriber_queue: int = 1024,
                 buffer_bytes: int = BUFFER_BYTES) -> None:
        super().__init__(buffer_size, subscriber_queue, buffer_bytes)
        self.pool = pool
        self._outbox: deque[tuple[str, str, dict[str, Any], bool]] = deque()
        self._wakeup = asyncio.Event()
        self._fetching = asyncio.Lock()
        self._flushed = asyncio.Condition()

    def publish(self, type: str, task_id: str, data: dict[str, Any], final: bool | None = None) -> StreamEvent:
        """Queue the event for the database; subscribers get it (numbered) once it is stored."""
        if type not in EVENT_TYPES:
            raise ValueError(f"unknown stream event type {type!r}")
        if final is None:
            final = data.get("final") is True
        final = bool(final) and type == "status"
        self._outbox.append((type, task_id, data, final))
        self._wakeup.set()
        return StreamEvent(None, type, task_id, data, final)

    async def prime(self) -> None:
        """Fill the replay buffer with the newest stored events (a replica that starts late
        still replays what happened before it)."""
        rows = await self.pool.fetch("SELECT id, task_id, type, data, final FROM events ORDER BY id DESC LIMIT $1",
                                     self.buffer_size)
        for row in reversed(rows):
            self.ingest(_event(row))

    async def run_writer(self) -> None:
        """Store queued events, a batch per transaction, until cancelled."""
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._outbox:
                batch = [self._outbox.popleft() for _ in range(min(len(self._outbox), FETCH_BATCH))]
                await self._store(batch)
            async with self._flushed:
                self._flushed.notify_all()

    async def _store(self, batch: list[tuple[str, str, dict[str, Any], bool]]) -> None:
        types = [b[0] for b in batch]
        tasks = [b[1] for b in batch]
        datas = [json_text(b[2]) for b in batch]
        finals = [b[3] for b in batch]
        while True:
            try:
                await self.pool.fetchval("SELECT murmurd_append_events($1::text[], $2::text[], $3::text[], $4::bool[])",
                                         tasks, types, datas, finals)
                return
            except (asyncpg.PostgresError, OSError, asyncpg.InterfaceError):
                log.exception("storing %d stream events failed; retrying", len(batch))
                await asyncio.sleep(1.0)

    async def flush(self, timeout: float = 10.0) -> None:
        """Wait until everything published so far is stored (shutdown)."""
        async with self._flushed:
            async with asyncio.timeout(timeout):
                await self._flushed.wait_for(lambda: not self._outbox)

    async def catch_up(self) -> int:
        """Ingest every stored event after the newest one here, in id order; how many."""
        taken = 0
        async with self._fetching:
            while True:
                rows = await self.pool.fetch("SELECT id, task_id, type, data, final FROM events WHERE id > $1"
                                             " ORDER BY id LIMIT $2", self.last_id, FETCH_BATCH)
                for row in rows:
                    taken += self.ingest(_event(row))
                if len(rows) < FETCH_BATCH:
                    return taken

    async def take_notification(self, payload: str) -> None:
        """A `murmurd_events` notification: its events ingested in order when it carries them
        and nothing before them is missing, else the rows fetched by id."""
        if payload.startswith("["):
            try:
                events = [StreamEvent(int(i), type_, task_id, data, bool(final))
                          for i, task_id, type_, final, data in json.loads(payload)]
            except (ValueError, TypeError):
                events = []
            if events and events[0].id is not None and events[0].id <= self.last_id + 1:
                for event in events:
                    self.ingest(event)
                return
        elif payload.isdigit() and int(payload) <= self.last_id:
            return
        await self.catch_up()

    async def prune(self, keep: int) -> None:
        """Forget stored events older than the newest `keep` (replay reaches no further)."""
        await self.pool.execute("DELETE FROM events WHERE id <= (SELECT max(id) FROM events) - $1", keep)


def _event(row: asyncpg.Record) -> StreamEvent:
    return StreamEvent(row["id"], row["type"], row["task_id"], json.loads(row["data"]), bool(row["final"]))
