"""The coordination protocol (issue 23 item 3): what a single daemon's `LocalCoordination`
answers, and the replica-only bookkeeping `ReplicaCoordination` keeps out of the core (start
retries, ends the store refused), without a database: its coordinator is never reached here."""

from __future__ import annotations

import asyncio
from typing import Any

from murmurd.a2a.core.coordination import Coordination, LocalCoordination
from murmurd.a2a.core.intake import Submission
from murmurd.a2a.core.tasks import TaskMessage, TaskRecord, TaskState
from murmurd.a2a.replicas import coordination as replica_coordination
from murmurd.a2a.replicas.coordination import ReplicaCoordination
from murmurd.a2a.stores.base import StoreUnreachable
from murmurd.a2a.stores.memory import MemoryTaskStore


def _record(task_id: str, context_id: str = "ctx") -> TaskRecord:
    return TaskRecord(id=task_id, context_id=context_id, history=[TaskMessage("m1", "user", [{"text": "hi"}])])


class FakeHost:
    """Just enough of `CoordinationHost` to watch what a coordination asks of it."""

    def __init__(self) -> None:
        self.store = MemoryTaskStore()
        self.accepting = True
        self.held: dict[str, TaskRecord] = {}
        self.queue: list[TaskRecord] = []
        self.taken: list[tuple[list[str], bool]] = []

    def hold(self, record: TaskRecord, traceparent: str | None) -> None:
        self.held[record.id] = record

    def take(self, records: list[TaskRecord], *, first: bool = False) -> None:
        self.taken.append(([r.id for r in records], first))
        self.queue = [*records, *self.queue] if first else [*self.queue, *records]

    def live(self, task_id: str) -> TaskRecord | None:
        return self.held.get(task_id)

    def tasks_here(self) -> set[str]:
        return {r.id for r in self.queue}

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the coordination asked the host for {name}")


def test_a_daemon_alone_runs_everything_here() -> None:
    async def main() -> None:
        host = FakeHost()
        local: Coordination = LocalCoordination()
        await local.start(host)  # type: ignore[arg-type]
        record = _record("t1")
        stored: list[str] = []

        async def store() -> None:
            stored.append(record.id)
            assert record.id not in host.held  # stored first, then held and queued in one step

        await local.place(record, "00-trace", store)
        assert stored == ["t1"] and host.held == {"t1": record} and host.taken == [(["t1"], False)]
        assert await local.claim(record)
        assert not local.runs_elsewhere(_record("t2"))
        assert not await local.hand_back(record)  # canceled by the stopping daemon, not kept
        assert not await local.put_off(record, StoreUnreachable("down"))  # the task fails here
        assert list(local.deferred()) == [] and local.take_deferred() == []
        assert await local.route_reply(Submission(message=TaskMessage("m2", "user", [{"text": "x"}]))) is None
        assert await local.route_cancel(record) is record
        local.end_unrecorded(record)  # nothing kept: nothing else will ever store it
        local.wake()
        await local.stop()

    asyncio.run(main())


def test_a_replica_keeps_a_start_the_database_refused_and_starts_it_again_first(monkeypatch: Any) -> None:
    monkeypatch.setattr(replica_coordination, "START_RETRY_SECS", 0.01)

    async def main() -> None:
        host = FakeHost()
        coordination = ReplicaCoordination(coordinator=None)  # type: ignore[arg-type]
        coordination._host = host  # type: ignore[assignment]  # as `start` does, without its coordinator
        behind, record = _record("behind"), _record("t1")
        host.queue = [behind]
        assert await coordination.put_off(record, StoreUnreachable("database unreachable"))
        assert [r.id for r in coordination.deferred()] == ["t1"]
        assert coordination.held_tasks() == {"behind", "t1"}  # settling leaves it alone meanwhile
        while coordination.deferred():
            await asyncio.sleep(0.01)
        assert [r.id for r in host.queue] == ["t1", "behind"] and host.taken == [(["t1"], True)]

    asyncio.run(main())


def test_a_replica_keeps_refused_ends_for_the_settling_bounded(monkeypatch: Any) -> None:
    monkeypatch.setattr(replica_coordination, "MAX_UNRECORDED", 2)
    coordination = ReplicaCoordination(coordinator=None)  # type: ignore[arg-type]
    coordination._host = FakeHost()  # type: ignore[assignment]
    for task_id in ("a", "b", "c"):
        ended = _record(task_id)
        ended.state = TaskState.FAILED
        coordination.end_unrecorded(ended)
    assert [r.id for r in coordination.unrecorded_ends()] == ["b", "c"]  # the oldest went first
    assert coordination.held_tasks() == {"b", "c"}
    coordination.recorded(["b"])
    assert [r.id for r in coordination.unrecorded_ends()] == ["c"]
