"""Which replica runs what, and word between replicas, through PostgreSQL.

- A replica registers in `replicas` and heartbeats every `lease / 3`; one silent for `lease`
  is dead. Every replica sweeps for the dead: their working and input-required tasks become
  FAILED (published, so streams and blocked callers end), their queued tasks lose their owner
  (another replica claims them), their context leases go. All under the database clock.
- A task is claimed by exactly one replica: `UPDATE tasks SET owner = me WHERE ... AND owner IS
  NULL AND state = 'submitted'` is atomic, whoever else tries (`murmurd_claim`, one round trip).
- A context is leased to one replica at a time (`contexts`): only the lease holder claims the
  context's tasks, in arrival order, so its per-context order, its session and its workdir
  stay on one replica. The lease lasts while its holder heartbeats; a graceful stop releases
  it and hands queued tasks back.
- A reply or cancel for a task that runs elsewhere goes into `inbox` for its owner, with a
  `NOTIFY` naming the owner; new unowned work is announced the same way.
LISTEN runs on one dedicated connection. Work and inbox notifications only wake a loop that
reads the tables (stream events may ride in theirs, see `events`), and every loop also reads
them every lease/3 seconds, so a lost notification costs at most that.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import socket
from collections import deque
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import asyncpg

from murmurd.a2a.replicas import fencing
from murmurd.a2a.replicas.events import EVENTS_CHANNEL, SharedEventLog
from murmurd.a2a.stores.base import TERMINAL_VALUES
from murmurd.a2a.core.tasks import TaskMessage, TaskRecord, TaskState, now_ms
from murmurd.text import json_text

log = logging.getLogger("murmurd.a2a.replicas")

WORK_CHANNEL = "murmurd_work"
INBOX_CHANNEL = "murmurd_inbox"
REPLICA_ENV = "MURMURD_REPLICA_ID"
DEFAULT_LEASE_SECS = 15.0
EVENTS_KEPT = 100_000  # stored events beyond the replay buffers, for Last-Event-ID from anywhere
LOOP_STOP_SECS = 5.0  # how long a graceful stop waits for its background loops to end


def dead_message(replica_id: str) -> str:
    return f"failed: replica {replica_id} stopped (no heartbeat within its lease)"


def new_replica_id() -> str:
    """`MURMURD_REPLICA_ID` (a pod name: a restart under it fails its own leftovers), else
    host, pid and a random suffix."""
    chosen = os.environ.get(REPLICA_ENV, "").strip()
    return chosen[:128] if chosen else f"{socket.gethostname()[:64]}-{os.getpid()}-{secrets.token_hex(3)}"


class ReplicaHost(Protocol):
    """What the coordinator asks of the daemon it serves, through `coordination.ReplicaCoordination`."""

    def room(self) -> int:
        """Tasks of new contexts this replica can take now."""

    async def take_claimed(self, records: list[TaskRecord]) -> None:
        """Queue tasks this replica has just claimed (arrival order)."""

    async def deliver_reply(self, task_id: str, message: TaskMessage) -> None: ...

    async def cancel_local(self, task_id: str) -> None: ...

    def busy_contexts(self) -> set[str]:
        """Contexts with a task queued or running here (their leases are never released)."""

    def held_tasks(self) -> set[str]:
        """Ids of the tasks queued or running here (ending included)."""

    def unrecorded_ends(self) -> list[TaskRecord]:
        """Task ends the store refused (the database was unreachable), to store later."""

    def recorded(self, task_ids: Iterable[str]) -> None:
        """These ends are stored now (or moot): forget them."""

    async def abandon(self, reason: str) -> None:
        """Drop the local queue and cancel every run (their WASM stops)."""

    def stop_after_failure(self, exc: BaseException) -> None:
        """A coordination loop died of a bug: stop serving (and exit non-zero)."""


@dataclass(frozen=True)
class Claim:
    """One claiming pass: what was claimed here, and which other replicas own waiting work."""

    records: list[TaskRecord]
    owners_to_wake: set[str]


class ReplicaCoordinator:
    def __init__(self, pool: asyncpg.Pool, dsn: str, replica_id: str, log_: SharedEventLog,
                 *, lease_secs: float = DEFAULT_LEASE_SECS, idle_secs: float = 60.0, url: str | None = None) -> None:
        self.pool = pool
        self.dsn = dsn
        self.replica_id = replica_id
        self.log = log_
        self.lease_secs = lease_secs
        self.idle_secs = idle_secs  # a context without a task here this long is released
        self.url = url
        self._host: ReplicaHost | None = None
        self._listener: asyncpg.Connection | None = None
        self._work = asyncio.Event()
        self._inbox = asyncio.Event()
        self._events = asyncio.Event()
        self._event_notes: deque[str] = deque()  # murmurd_events payloads, in commit order
        self._claiming = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self._contact = fencing.Contact(lease_secs, last_ok=0.0)
        self._in_contact_since: float | None = None  # since when heartbeats get through (None: failing)
        self._fence_silence = 0.0  # seconds without a heartbeat when the fence came down
        self._settle_due = False  # contact came back: settle what ended unrecorded meanwhile

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self, host: ReplicaHost) -> None:
        """Register, listen, prime the event buffer, and start the background loops."""
        self._host = host
        await self.pool.execute(
            "INSERT INTO replicas (id, url) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET url = excluded.url,"
            " started_at = now(), heartbeat_at = now()", self.replica_id, self.url)
        await self._listen()
        await self.log.prime()
        self._contact.last_ok = self._in_contact_since = asyncio.get_running_loop().time()
        for work, name in ((self.log.run_writer(), "events-writer"), (self._follow_events(), "events-reader"),
                           (self._heartbeat(), "heartbeat"), (self._upkeep(), "upkeep"),
                           (self._watch_contact(), "fence"),
                           (self._follow_work(), "claims"), (self._follow_inbox(), "inbox")):
            self._tasks.append(asyncio.create_task(self._forever(work, name), name=f"murmurd-replica-{name}"))
        self._work.set()

    async def _forever(self, work: Awaitable[None], name: str) -> None:
        try:
            await work
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("replica %s: %s stopped", self.replica_id, name)
            if self._host is not None:
                self._host.stop_after_failure(exc)  # a replica that cannot coordinate stops serving
            raise

    async def _listen(self) -> None:
        conn = await asyncpg.connect(self.dsn, timeout=10)
        await conn.add_listener(EVENTS_CHANNEL, self._on_events)
        await conn.add_listener(WORK_CHANNEL, self._on_work)
        await conn.add_listener(INBOX_CHANNEL, self._on_inbox)
        self._listener = conn

    def _on_events(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        self._event_notes.append(payload)
        self._events.set()

    def _on_work(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        if payload in ("", self.replica_id):
            self._work.set()

    def _on_inbox(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        if payload == self.replica_id:
            self._inbox.set()

    async def stop(self) -> None:
        """A graceful leave: queued tasks handed back, context leases released, others woken.
        Call after the daemon has ended or canceled its running tasks."""
        try:
            await self.log.flush()
        except (TimeoutError, asyncpg.PostgresError, OSError):
            log.warning("replica %s: some stream events were not stored before stopping", self.replica_id)
        for task in self._tasks:
            task.cancel()
        if self._tasks:  # bounded: a loop that ignores its cancel must not hold the stop forever
            _, stuck = await asyncio.wait(self._tasks, timeout=LOOP_STOP_SECS)
            if stuck:
                log.error("replica %s: %s did not stop when cancelled; handing work back regardless",
                          self.replica_id, ", ".join(sorted(task.get_name() for task in stuck)))
        # Bounded by waiting on a task, not by cancelling the work: a cancelled query's rollback
        # would wait on the database again (a partition holds it for minutes).
        leaving = asyncio.create_task(self._leave(), name="murmurd-replica-leave")
        if not (await asyncio.wait({leaving}, timeout=LOOP_STOP_SECS))[0]:
            log.error("replica %s: the database did not take its leave within %g s; its lease will expire",
                      self.replica_id, LOOP_STOP_SECS)
        if self._listener is not None:
            closing = asyncio.create_task(self._listener.close())
            if not (await asyncio.wait({closing}, timeout=LOOP_STOP_SECS))[0]:
                self._listener.terminate()

    async def _leave(self) -> None:
        try:
            async with self.pool.acquire() as conn, conn.transaction():
                await conn.execute("UPDATE tasks SET owner = NULL WHERE owner = $1 AND state = 'submitted'",
                                   self.replica_id)
                await conn.execute("DELETE FROM contexts WHERE owner = $1", self.replica_id)
                await conn.execute("DELETE FROM inbox WHERE replica = $1", self.replica_id)
                await conn.execute("DELETE FROM replicas WHERE id = $1", self.replica_id)
                await conn.execute(f"NOTIFY {WORK_CHANNEL}, ''")
        except (asyncpg.PostgresError, OSError, asyncpg.InterfaceError):
            log.exception("replica %s: could not hand its work back; its lease will expire", self.replica_id)

    # -- the loops ----------------------------------------------------------------------------

    async def _follow_events(self) -> None:
        """Ingest events as notifications bring them, and read the table every few seconds
        regardless (the backstop for a notification lost with a dropped listener)."""
        while True:
            if not await _woken(self._events, max(1.0, self.lease_secs / 3)):
                self._event_notes.append("")  # nothing heard for a while: read the table
            self._events.clear()
            try:
                while self._event_notes:
                    await self.log.take_notification(self._event_notes.popleft())
            except (asyncpg.PostgresError, OSError, asyncpg.InterfaceError):
                log.exception("replica %s: reading stream events failed", self.replica_id)
                await asyncio.sleep(1.0)

    async def _heartbeat(self) -> None:
        """Beat every lease/3, each beat bounded by lease/3 (a partition that drops packets fails
        it instead of holding it for minutes). Nothing else waits in this loop: a slow sweep,
        prune or claim must never make this replica look cut off, to others or to its fence."""
        loop = asyncio.get_running_loop()
        delay = self.lease_secs / 3
        while True:
            await asyncio.sleep(delay)
            delay = self.lease_secs / 3
            sent = loop.time()
            self._contact.sending(sent)
            try:
                async with asyncio.timeout(self.lease_secs / 3):
                    alive = await self.pool.fetchval(
                        "UPDATE replicas SET heartbeat_at = now() WHERE id = $1 RETURNING id", self.replica_id)
            except (asyncpg.PostgresError, OSError, asyncpg.InterfaceError, TimeoutError):
                log.exception("replica %s: heartbeat failed", self.replica_id)
                self._contact.failed()
                self._in_contact_since = None
                self._settle_due = True
                delay = self.lease_secs / 12  # try again soon: one slow answer is not a partition
                continue
            self._contact.got_through(sent)
            if self._in_contact_since is None:
                self._in_contact_since = loop.time()
            if alive is None:
                await self._rejoin_swept()

    async def _rejoin_swept(self) -> None:
        """Swept while away: the running tasks were failed by another replica, the queued ones
        handed on. Stop what still runs here and register afresh."""
        log.error("replica %s was declared dead by another replica; its work went on elsewhere, "
                  "it starts afresh", self.replica_id)
        assert self._host is not None
        await self._host.abandon("canceled: this replica was declared dead")
        try:
            async with self.pool.acquire() as conn, conn.transaction():
                await conn.execute("INSERT INTO replicas (id, url) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING",
                                   self.replica_id, self.url)
                # whatever it still owns but no longer runs goes back to the others
                await conn.execute("UPDATE tasks SET owner = NULL WHERE owner = $1 AND state = 'submitted'",
                                   self.replica_id)
                await conn.execute(f"NOTIFY {WORK_CHANNEL}, ''")
        except (asyncpg.PostgresError, OSError, asyncpg.InterfaceError):
            log.exception("replica %s: could not register again; the next heartbeat tries", self.replica_id)

    async def _upkeep(self) -> None:
        """Settle after lost contact or a fence, sweep the dead, release idle leases, keep the
        listener alive, forget old events.

        A replica sweeps others only after a whole lease of its own heartbeats getting through:
        after a database outage every replica's heartbeat is old, and the first one back must
        give the others a lease to beat again before it calls them dead."""
        loop = asyncio.get_running_loop()
        rounds = 0
        while True:
            await asyncio.sleep(self.lease_secs / 3)
            since = self._in_contact_since
            if since is None or (self._contact.fenced and not self._contact.heard_since_fence()):
                continue
            assert self._host is not None
            try:
                rounds += 1
                if self._contact.fenced or self._settle_due or rounds % 3 == 0 or self._host.unrecorded_ends():
                    await self._settle()
                if loop.time() - since >= self.lease_secs:
                    await self.sweep()
                await self._release_idle()
                if self._listener is None or self._listener.is_closed():
                    await self._listen()
                    self._events.set()
                    self._work.set()
                    self._inbox.set()
                if rounds % 90 == 0:
                    await self.log.prune(EVENTS_KEPT)
            except (asyncpg.PostgresError, OSError, asyncpg.InterfaceError, TimeoutError):
                log.exception("replica %s: upkeep failed", self.replica_id)

    async def _watch_contact(self) -> None:
        """Fence (see `fencing`): stop this replica's runs and queue once its heartbeats stop
        getting through, whatever the other loops are waiting on."""
        loop = asyncio.get_running_loop()
        tick = self.lease_secs / 12
        while True:
            before = loop.time()
            await asyncio.sleep(tick)
            now = loop.time()
            if self._contact.must_fence(now, stalled=now - before > 2 * tick):
                silent = now - self._contact.last_ok
                log.error("replica %s: no heartbeat has reached the database for %.1f s; it stops its "
                          "runs and queue before another replica takes them over", self.replica_id, silent)
                assert self._host is not None
                self._contact.fence(now)  # from here on nothing is claimed
                self._in_contact_since = None
                self._fence_silence = silent
                await self._host.abandon(fencing.fenced_message("canceled", self.replica_id, silent))

    async def _settle(self) -> None:
        """Put the database right about this replica's tasks (see `fencing`): ends it refused are
        stored; open tasks this replica no longer holds fail (running) or go back (queued). After
        a fence, unfence and claim again."""
        assert self._host is not None
        fenced = self._contact.fenced
        message = (fencing.fenced_message("failed", self.replica_id, self._fence_silence) if fenced
                   else fencing.unrecorded_message(self.replica_id))
        ends = self._host.unrecorded_ends()
        async with self._claiming:  # no claim adds to the local queue meanwhile
            async with self.pool.acquire() as conn, conn.transaction():
                done, stored = await fencing.store_ends(conn, self.replica_id, ends)
                listed = await fencing.open_tasks(conn, self.replica_id)
                held = self._host.held_tasks()  # read after the rows: a task queued here since is held
                unheld = {task_id: state for task_id, state in listed.items() if task_id not in held}
                running = [t for t, state in unheld.items() if state != TaskState.SUBMITTED.value]
                queued = [t for t, state in unheld.items() if state == TaskState.SUBMITTED.value]
                failed = await fencing.fail_unheld(conn, self.replica_id, running, message) if running else []
                if queued:
                    await fencing.hand_back(conn, self.replica_id, queued)
                    await conn.execute(f"NOTIFY {WORK_CHANNEL}, ''")
            self._host.recorded(done)
            self._settle_due = False
            if fenced:
                self._contact.unfence()  # contact is dated by the heartbeat that got through
        for record in failed:
            self.log.publish("status", record.id, record.status_frame(True), final=True)
        if fenced or stored or failed or queued:
            log.warning("replica %s settled its tasks%s: %d end(s) stored late, %d that no longer run here "
                        "failed, %d queued handed back", self.replica_id,
                        " (in contact with the database again)" if fenced else "", len(stored), len(failed),
                        len(queued))
        if fenced or queued:
            self._work.set()

    async def _release_idle(self) -> None:
        """Give up the leases of contexts with no task here for `idle_secs` (their next task may
        run on any replica, with the history from the database)."""
        assert self._host is not None
        await self.pool.execute(
            "DELETE FROM contexts WHERE owner = $1 AND claimed_at < now() - make_interval(secs => $2)"
            " AND NOT (context_id = ANY($3::text[]))", self.replica_id, self.idle_secs,
            sorted(self._host.busy_contexts()))

    async def sweep(self) -> list[str]:
        """Fail the running tasks of every replica silent for a lease, unown their queued ones,
        drop their leases; returns the ids of the tasks failed."""
        failed: list[TaskRecord] = []
        async with self.pool.acquire() as conn, conn.transaction():
            dead = [r["id"] for r in await conn.fetch(
                "DELETE FROM replicas WHERE heartbeat_at < now() - make_interval(secs => $1) RETURNING id",
                self.lease_secs)]
            if not dead:
                return []
            rows = await conn.fetch(
                "SELECT id, record, owner FROM tasks WHERE owner = ANY($1::text[]) AND NOT (state = ANY($2::text[]))"
                " FOR UPDATE", dead, list(TERMINAL_VALUES))
            for row in rows:
                record = fencing.readable(row["record"], row["id"])
                if record is None or record.state is TaskState.SUBMITTED:
                    continue
                record.state = TaskState.FAILED
                record.status_message = dead_message(row["owner"])
                record.updated_at = now_ms()
                failed.append(record)
                # owned by the survivor from now on: the dead one, should it wake, cannot overwrite it
                await conn.execute("UPDATE tasks SET state = $2, updated_at = $3, record = $4, owner = $5"
                                   " WHERE id = $1", record.id, record.state.value, record.updated_at,
                                   json_text(record.to_json()), self.replica_id)
            await conn.execute("UPDATE tasks SET owner = NULL WHERE owner = ANY($1::text[]) AND state = 'submitted'",
                               dead)
            await conn.execute("DELETE FROM contexts WHERE owner = ANY($1::text[])", dead)
            await conn.execute("DELETE FROM inbox WHERE replica = ANY($1::text[])", dead)
            await conn.execute(f"NOTIFY {WORK_CHANNEL}, ''")
        for record in failed:
            self.log.publish("status", record.id, record.status_frame(True), final=True)
        if dead:
            log.warning("replicas %s stopped heartbeating: %d running task(s) failed", ", ".join(dead), len(failed))
        return [r.id for r in failed]

    async def _follow_work(self) -> None:
        while True:
            await _woken(self._work, self.lease_secs / 3)
            self._work.clear()
            try:
                await self.claim()
            except (asyncpg.PostgresError, OSError, asyncpg.InterfaceError):
                log.exception("replica %s: claiming tasks failed", self.replica_id)
                await asyncio.sleep(1.0)

    def wake(self) -> None:
        """Claim again soon (a task ended here: there may be room)."""
        self._work.set()

    # -- claims -------------------------------------------------------------------------------

    async def claim(self) -> list[TaskRecord]:
        """Claim the waiting tasks this replica should run: every one of a context it holds, and
        those of free contexts while it has room (taking their leases); queue them here."""
        assert self._host is not None
        async with self._claiming:
            if self._contact.fenced:  # cut off: claims wait for the settling after contact returns
                return []
            result = await self._claim_once(self._host.room())
            if self._contact.fenced:  # fenced meanwhile: owned here, queued nowhere; the settling hands them back
                return []
            if result.records:
                await self._host.take_claimed(result.records)
        for owner in result.owners_to_wake:
            await self.pool.execute("SELECT pg_notify($1, $2)", WORK_CHANNEL, owner)
        return result.records

    async def _claim_once(self, room: int) -> Claim:
        """One round trip: `murmurd_claim` (stores/migrations.py, version 2) leases free contexts
        while there is room, refreshes this replica's leases, and claims their waiting tasks."""
        rows = await self.pool.fetch("SELECT kind, value FROM murmurd_claim($1, $2)", self.replica_id, room)
        records = [TaskRecord.from_json(json.loads(r["value"])) for r in rows if r["kind"] == "task"]
        return Claim(records, {r["value"] for r in rows if r["kind"] == "wake"})

    async def claim_own(self, task_id: str, context_id: str) -> bool:
        """Claim a task this replica has just stored for itself (the launch task), leasing its
        context here, in one statement; False when the context is leased elsewhere or another
        replica was first."""
        taken = await self.pool.fetchval(
            "WITH lease AS (INSERT INTO contexts (context_id, owner) VALUES ($2, $3) ON CONFLICT (context_id)"
            " DO UPDATE SET claimed_at = now() WHERE contexts.owner = excluded.owner RETURNING 1)"
            " UPDATE tasks SET owner = $3 WHERE id = $1 AND owner IS NULL AND state = 'submitted'"
            " AND EXISTS (SELECT 1 FROM lease) RETURNING id", task_id, context_id, self.replica_id)
        return taken is not None

    async def announce_work(self) -> None:
        """New unowned tasks: every replica looks (this one first, by the caller)."""
        await self.pool.execute(f"NOTIFY {WORK_CHANNEL}, ''")

    async def cancel_waiting(self, task_id: str, message: str) -> TaskRecord | None:
        """Cancel an unclaimed queued task, out of every replica's reach in the same transaction
        (no claim, no settling comes between); the canceled record, or None when a replica has
        claimed it (or it is no longer queued). The caller publishes it."""
        async with self.pool.acquire() as conn, conn.transaction():
            row = await conn.fetchval("SELECT record FROM tasks WHERE id = $1 AND owner IS NULL AND state = 'submitted'"
                                      " FOR UPDATE", task_id)
            record = fencing.readable(row, task_id) if row is not None else None
            if record is None:
                return None
            record.state = TaskState.CANCELED
            record.status_message = message
            record.updated_at = now_ms()
            await conn.execute("UPDATE tasks SET owner = $2, state = $3, updated_at = $4, record = $5 WHERE id = $1",
                               task_id, self.replica_id, record.state.value, record.updated_at,
                               json_text(record.to_json()))
        return record

    async def owner_of(self, task_id: str) -> str | None:
        return await self.pool.fetchval("SELECT owner FROM tasks WHERE id = $1", task_id)

    # -- word between replicas ----------------------------------------------------------------

    async def send(self, owner: str, kind: str, task_id: str, body: dict[str, Any]) -> None:
        """A reply or a cancel for `owner`, stored, then announced."""
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute("INSERT INTO inbox (replica, kind, task_id, body) VALUES ($1, $2, $3, $4)",
                               owner, kind, task_id, json_text(body))
            await conn.execute("SELECT pg_notify($1, $2)", INBOX_CHANNEL, owner)

    async def _follow_inbox(self) -> None:
        while True:
            await _woken(self._inbox, self.lease_secs / 3)
            self._inbox.clear()
            try:
                await self._drain_inbox()
            except (asyncpg.PostgresError, OSError, asyncpg.InterfaceError):
                log.exception("replica %s: reading its inbox failed", self.replica_id)
                await asyncio.sleep(1.0)

    async def _drain_inbox(self) -> None:
        assert self._host is not None
        rows = await self.pool.fetch("DELETE FROM inbox WHERE replica = $1 RETURNING id, kind, task_id, body",
                                     self.replica_id)
        host = self._host
        for row in sorted(rows, key=lambda r: r["id"]):
            try:
                if row["kind"] == "reply":
                    await host.deliver_reply(row["task_id"], TaskMessage.from_json(json.loads(row["body"])))
                else:
                    await host.cancel_local(row["task_id"])
            except Exception:  # one bad message never stops the inbox
                log.exception("replica %s: %s for task %s failed", self.replica_id, row["kind"], row["task_id"])


async def _woken(event: asyncio.Event, timeout: float) -> bool:
    """Wait for `event` at most `timeout` seconds; whether it was set.

    `asyncio.timeout`, not `asyncio.wait_for`: on Python 3.11 `wait_for` swallows a cancel that
    arrives just as the event is set, and a loop built on it then never stops (a replica's
    graceful stop waited forever on its events reader that way)."""
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return False
    return True
