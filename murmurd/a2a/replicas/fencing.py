"""A replica cut off from the database stops its own work before the others call it dead, and
tasks whose outcome could not be stored are settled once the database answers again.

The others declare a replica dead when its heartbeat is a lease old, fail its running tasks and
run its queued ones. A replica whose heartbeats stop getting through cannot tell a partition from
an outage, so it assumes the worst: once it has been silent for `FENCE_AFTER` of a lease and a
heartbeat has failed (or hangs), it cancels its runs (their WASM stops) and drops its local queue
before any sweep can have happened, and claims nothing until a heartbeat sent after the fence
gets through. Then it settles, as it does every lease and after any failed heartbeat: ends the
database refused are stored now; tasks the database shows open and this replica's that it no
longer holds become FAILED (running) or go back to be claimed (queued). So a run whose final
write was lost to a short outage never stays `working`, nor a task `submitted`, for ever.

`Contact` is the pure part: what the replica knows of its own heartbeats, and the fence rule.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection
from dataclasses import dataclass

import asyncpg

from murmurd.a2a.stores.base import TERMINAL_VALUES
from murmurd.a2a.core.tasks import TaskRecord, TaskState, now_ms
from murmurd.text import json_text

log = logging.getLogger("murmurd.a2a.replicas")

# Of a lease. Silence is counted from the moment the last heartbeat that got through was sent
# (the database's `heartbeat_at` is no earlier), and a survivor sweeps a lease after it: a third
# of a lease is left for the runs to stop.
FENCE_AFTER = 2 / 3
OPEN_STATES = [TaskState.WORKING.value, TaskState.INPUT_REQUIRED.value]


@dataclass
class Contact:
    """This replica's heartbeats, on the event loop's clock (seconds)."""

    lease_secs: float
    last_ok: float  # when the last heartbeat that got through was sent
    sending_since: float | None = None  # a heartbeat in flight since then
    failed_since_ok: bool = False
    fenced_at: float | None = None  # when the fence came down (None: not fenced)

    @property
    def fenced(self) -> bool:
        return self.fenced_at is not None

    def sending(self, now: float) -> None:
        self.sending_since = now

    def got_through(self, sent_at: float) -> None:
        self.last_ok, self.sending_since, self.failed_since_ok = sent_at, None, False

    def failed(self) -> None:
        self.sending_since, self.failed_since_ok = None, True

    def fence(self, now: float) -> None:
        self.fenced_at = now

    def heard_since_fence(self) -> bool:
        """A heartbeat sent after the fence came down got through: the database answers again."""
        return self.fenced_at is not None and self.last_ok >= self.fenced_at

    def unfence(self) -> None:
        self.fenced_at = None

    def must_fence(self, now: float, *, stalled: bool = False) -> bool:
        """Silent for `FENCE_AFTER` of a lease with a heartbeat failed or hanging, or silent for
        a whole lease whatever the reason (a survivor may sweep now). Silence alone, as after
        the event loop stalled, is not enough: the heartbeat due is about to go out; and right
        after a stall (`stalled`) only a whole lease counts, as a beat may look hung for it."""
        if self.fenced:
            return False
        silent = now - self.last_ok
        if silent >= self.lease_secs:
            return True
        if stalled or silent < FENCE_AFTER * self.lease_secs:
            return False
        hanging = self.sending_since is not None and now - self.sending_since >= self.lease_secs / 6
        return self.failed_since_ok or hanging


def fenced_message(outcome: str, replica_id: str, silent_secs: float) -> str:
    """The status message of a task a fence stopped (`outcome`: canceled here, failed when settled)."""
    return (f"{outcome}: replica {replica_id} lost the database for {silent_secs:.1f} s and stopped "
            "its work (a partitioned replica never runs on beside the one that takes over)")


def unrecorded_message(replica_id: str) -> str:
    return (f"failed: the run on replica {replica_id} ended while the database was unreachable, "
            "and its outcome could not be stored")


def readable(raw: str, task_id: str) -> TaskRecord | None:
    """A stored record, or None (logged) when it cannot be read: one bad row never stops a loop."""
    try:
        return TaskRecord.from_json(json.loads(raw))
    except (ValueError, KeyError, TypeError, AttributeError):
        log.exception("task %s: its stored record cannot be read; left as it is", task_id)
        return None


async def store_ends(conn: asyncpg.Connection, replica_id: str,
                     records: list[TaskRecord]) -> tuple[list[str], list[str]]:
    """Store ends the database refused earlier, where the task is still open and this replica's
    (unowned or another's, it went on elsewhere: the end is moot). Returns (ids done: stored or
    moot, ids stored). A record the database refuses is stored brief instead; one refused even so
    stays to try again (each in a savepoint: one refusal spoils nothing else)."""
    done, stored = [], []
    for record in records:
        for candidate in (record, record.brief()):
            try:
                async with conn.transaction():
                    status = await conn.execute(
                        "UPDATE tasks SET state = $2, updated_at = $3, record = $4 WHERE id = $1"
                        " AND owner = $5 AND NOT (state = ANY($6::text[]))",
                        candidate.id, candidate.state.value, candidate.updated_at, json_text(candidate.to_json()),
                        replica_id, list(TERMINAL_VALUES))
            except asyncpg.PostgresError as exc:
                if isinstance(exc, asyncpg.PostgresConnectionError):
                    raise
                log.warning("task %s: its end was refused again: %s", record.id, exc)
                continue
            done.append(record.id)
            if not status.endswith(" 0"):
                stored.append(record.id)
            break
    return done, stored


async def open_tasks(conn: asyncpg.Connection, replica_id: str) -> dict[str, str]:
    """The tasks the database says are this replica's and not ended: id -> state."""
    rows = await conn.fetch("SELECT id, state FROM tasks WHERE owner = $1 AND state = ANY($2::text[])",
                            replica_id, [*OPEN_STATES, TaskState.SUBMITTED.value])
    return {r["id"]: r["state"] for r in rows}


async def fail_unheld(conn: asyncpg.Connection, replica_id: str, task_ids: Collection[str],
                      message: str) -> list[TaskRecord]:
    """In the caller's transaction: fail those of `task_ids` still open and owned here (the caller
    has checked it runs none of them). Returns the records failed (to publish)."""
    failed: list[TaskRecord] = []
    rows = await conn.fetch("SELECT id, record FROM tasks WHERE id = ANY($1::text[]) AND owner = $2"
                            " AND state = ANY($3::text[]) FOR UPDATE", list(task_ids), replica_id, OPEN_STATES)
    for row in rows:
        record = readable(row["record"], row["id"])
        if record is None:
            continue
        record.state = TaskState.FAILED
        record.status_message = message
        record.updated_at = now_ms()
        failed.append(record)
        await conn.execute("UPDATE tasks SET state = $2, updated_at = $3, record = $4 WHERE id = $1",
                           record.id, record.state.value, record.updated_at, json_text(record.to_json()))
    return failed


async def hand_back(conn: asyncpg.Connection, replica_id: str, task_ids: Collection[str]) -> None:
    """Queued tasks owned here but queued nowhere here (a claim whose answer was lost, a queue a
    fence dropped): unowned, for any replica to claim."""
    await conn.execute("UPDATE tasks SET owner = NULL WHERE id = ANY($1::text[]) AND owner = $2"
                       " AND state = 'submitted'", list(task_ids), replica_id)
