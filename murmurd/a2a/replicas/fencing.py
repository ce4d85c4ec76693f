"""A replica cut off from the database stops its own work before the others call it dead.

The others declare a replica dead when its heartbeat is a lease old, fail its running tasks and
run its queued ones. A replica whose heartbeats stop getting through cannot tell a partition from
an outage, so it assumes the worst: after `FENCE_AFTER` of a lease without a heartbeat it cancels
its runs (their WASM stops) and drops its local queue, before any sweep can have happened, and
claims nothing until a heartbeat gets through again. Then, if nobody swept it meanwhile (a
database outage, not a partition), it settles what it stopped: those tasks still open and still
its own become FAILED, its queued tasks go back to be claimed.
"""

from __future__ import annotations

import json

import asyncpg

from murmurd.a2a.stores.base import TERMINAL_VALUES
from murmurd.a2a.tasks import TaskRecord, TaskState, now_ms
from murmurd.text import json_text

# Of a lease: two missed heartbeats (one every lease/3). The sweep comes a lease after the last
# one that got through, so a third of a lease is left for the runs to stop.
FENCE_AFTER = 2 / 3


def cut_off(last_beat: float, now: float, lease_secs: float) -> bool:
    """Whether a replica whose last heartbeat got through at `last_beat` must stop its work."""
    return now - last_beat >= FENCE_AFTER * lease_secs


def fenced_message(outcome: str, replica_id: str, silent_secs: float) -> str:
    """The status message of a task a fence stopped (`outcome`: canceled here, failed when settled)."""
    return (f"{outcome}: replica {replica_id} lost the database for {silent_secs:.1f} s and stopped "
            "its work (a partitioned replica never runs on beside the one that takes over)")


async def settle(conn: asyncpg.Connection, replica_id: str, stopped: list[str],
                 message: str) -> list[TaskRecord]:
    """In the caller's transaction: fail the tasks in `stopped` still open and still owned here,
    and hand every queued task owned here back. Returns the records failed (to publish)."""
    failed: list[TaskRecord] = []
    rows = await conn.fetch(
        "SELECT record FROM tasks WHERE owner = $1 AND id = ANY($2::text[]) AND state <> 'submitted'"
        " AND NOT (state = ANY($3::text[])) FOR UPDATE", replica_id, stopped, list(TERMINAL_VALUES))
    for row in rows:
        record = TaskRecord.from_json(json.loads(row["record"]))
        record.state = TaskState.FAILED
        record.status_message = message
        record.updated_at = now_ms()
        failed.append(record)
        await conn.execute("UPDATE tasks SET state = $2, updated_at = $3, record = $4 WHERE id = $1",
                           record.id, record.state.value, record.updated_at, json_text(record.to_json()))
    await conn.execute("UPDATE tasks SET owner = NULL WHERE owner = $1 AND state = 'submitted'", replica_id)
    return failed
