"""Durable task records: round trips, listing, restart recovery, concurrency (issue 5)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from murmurd.a2a.stores.base import INTERRUPTED_MESSAGE, TaskStore

from murmurd.a2a.stores.memory import MemoryTaskStore

from murmurd.a2a.stores.sqlite import SqliteTaskStore
from murmurd.a2a.core.tasks import TaskArtifact, TaskMessage, TaskRecord, TaskState, new_context_id, new_task_id

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parent.parent


def full_record(context_id: str | None = None, state: TaskState = TaskState.COMPLETED,
                at: int = 1_700_000_000_000) -> TaskRecord:
    task_id = new_task_id()
    return TaskRecord(
        id=task_id, context_id=context_id or new_context_id(), state=state,
        status_message="done ✓", result_text="the answer",
        artifacts=[
            TaskArtifact("fetch", [{"kind": "text", "text": "body"}, {"kind": "data", "data": {"n": [1, 2]}}]),
            TaskArtifact("prompt", [{"text": "which one?"}], artifact_id="art_fixed"),
        ],
        history=[
            TaskMessage("msg_1", "user", [
                {"text": "look at this"},
                {"kind": "file", "file": {"uri": "https://example.test/a.png", "mimeType": "image/png"}},
                {"type": "data", "data": {"nested": {"deep": True}}},
            ], context_id="ctx_x", task_id=task_id, metadata={"k": "v"}),
            TaskMessage("msg_2", "agent", [{"kind": "text", "text": "the answer"}]),
        ],
        origin="peer", trust="peer", created_at=at, updated_at=at + 5,
    )


async def test_round_trip_of_a_full_record(task_store: TaskStore) -> None:
    for store in [task_store]:
        record = full_record()
        await store.put(record)
        loaded = await store.get(record.id)
        assert loaded == record
        assert loaded is not record
        assert loaded.to_json() == record.to_json()
        assert loaded.history[0].parts[1]["file"]["mimeType"] == "image/png"
        assert await store.get("tsk_missing") is None

        # An upsert replaces; mutating a returned record changes nothing stored.
        loaded.state = TaskState.FAILED
        assert (await store.get(record.id)).state is TaskState.COMPLETED  # type: ignore[union-attr]
        await store.put(loaded)
        assert (await store.get(record.id)).state is TaskState.FAILED  # type: ignore[union-attr]
        assert len(await store.list()) == 1
        await store.close()


async def test_list_by_context_newest_first(task_store: TaskStore) -> None:
    for store in [task_store]:
        ctx_a, ctx_b = new_context_id(), new_context_id()
        a = [full_record(ctx_a, at=1000 + i * 10) for i in range(5)]
        b = [full_record(ctx_b, at=1003 + i * 10) for i in range(3)]
        for record in a + b:
            await store.put(record)

        assert [r.id for r in await store.list(ctx_a)] == [r.id for r in reversed(a)]
        assert [r.id for r in await store.list(ctx_b)] == [r.id for r in reversed(b)]
        everything = sorted(a + b, key=lambda r: r.updated_at, reverse=True)
        assert [r.id for r in await store.list()] == [r.id for r in everything]
        assert [r.id for r in await store.list(ctx_a, limit=2)] == [a[4].id, a[3].id]
        assert [r.id for r in await store.list(ctx_a, limit=2, offset=2)] == [a[2].id, a[1].id]
        assert await store.list("ctx_nobody") == []

        # Touching an old task moves it to the front.
        a[0].updated_at = 5000
        await store.put(a[0])
        assert (await store.list(ctx_a))[0].id == a[0].id
        await store.close()


async def test_state_filters_before_the_page_and_count_ignores_it(task_store: TaskStore) -> None:
    for store in [task_store]:
        ctx = new_context_id()
        states = [TaskState.COMPLETED, TaskState.FAILED] * 3 + [TaskState.COMPLETED]  # 4 completed, 3 failed
        records = [full_record(ctx, state=state, at=1000 + i * 10) for i, state in enumerate(states)]
        for record in [*records, full_record(state=TaskState.FAILED)]:  # one more failure elsewhere
            await store.put(record)
        failed = [r.id for r in reversed(records) if r.state is TaskState.FAILED]
        # a full page of the filtered state, not a page cut first and filtered after
        assert [r.id for r in await store.list(ctx, limit=2, state=TaskState.FAILED)] == failed[:2]
        assert [r.id for r in await store.list(ctx, limit=2, offset=2, state=TaskState.FAILED)] == failed[2:]
        assert await store.count(ctx) == 7
        assert await store.count(ctx, TaskState.COMPLETED) == 4
        assert await store.count(ctx, TaskState.FAILED) == 3
        assert await store.count(state=TaskState.FAILED) == 4
        assert await store.count() == 8
        assert await store.count("ctx_nobody") == 0 and await store.count(ctx, TaskState.WORKING) == 0
        await store.close()


async def test_the_creator_filter_applies_before_the_page_and_to_the_count(task_store: TaskStore) -> None:
    """A peer credential lists only the tasks it created (docs/security.md); the filter reads the
    creator from the stored record in every backend, before the page is cut."""
    ctx = new_context_id()
    creators = ["partner", "ops", "partner", None, "partner", "other"]
    records = [dataclasses.replace(full_record(ctx, at=2000 + i * 10), principal=who) for i, who in enumerate(creators)]
    for record in records:
        await task_store.put(record)
    partners = [r.id for r in reversed(records) if r.principal == "partner"]
    assert [r.id for r in await task_store.list(ctx, limit=2, principal="partner")] == partners[:2]
    assert [r.id for r in await task_store.list(ctx, limit=2, offset=2, principal="partner")] == partners[2:]
    assert await task_store.count(ctx, principal="partner") == 3
    assert await task_store.count(principal="ops") == 1
    assert await task_store.count(ctx, TaskState.COMPLETED, principal="other") == 1
    assert await task_store.count(principal="nobody") == 0 and await task_store.count(principal="") == 0
    assert await task_store.count(ctx) == 6  # no filter: every creator, and none


STATES = {
    "done": TaskState.COMPLETED, "running": TaskState.WORKING, "asking": TaskState.INPUT_REQUIRED,
    "queued": TaskState.SUBMITTED, "broken": TaskState.FAILED, "stopped": TaskState.CANCELED,
    "refused": TaskState.REJECTED,
}
NON_TERMINAL = {"running", "asking", "queued"}


def records_by_name() -> dict[str, TaskRecord]:
    return {name: full_record(state=state) for name, state in STATES.items()}


async def check_recovery(path: Path, written: dict[str, dict]) -> None:
    """A new store on the file: finished tasks intact, interrupted ones failed."""
    store = await SqliteTaskStore.open(path)
    ids = {name: data["id"] for name, data in written.items()}
    interrupted = await store.mark_interrupted()
    assert sorted(interrupted) == sorted(ids[n] for n in NON_TERMINAL)
    for name, data in written.items():
        record = await store.get(ids[name])
        assert record is not None
        if name in NON_TERMINAL:
            assert record.state is TaskState.FAILED
            assert record.status_message == INTERRUPTED_MESSAGE
            assert record.updated_at >= data["updated_at"]
            assert record.history == TaskRecord.from_json(data).history
        else:
            assert record.to_json() == data
    assert await store.mark_interrupted() == []  # idempotent
    await store.close()


async def test_restart_marks_unfinished_tasks_interrupted(tmp_path: Path) -> None:
    path = tmp_path / "state" / "tasks.sqlite3"
    store = await SqliteTaskStore.open(path)
    records = records_by_name()
    for record in records.values():
        await store.put(record)
    await store.close()
    with pytest.raises(RuntimeError):
        await store.get("anything")
    await check_recovery(path, {name: r.to_json() for name, r in records.items()})


async def test_restart_after_the_writing_process_died(tmp_path: Path) -> None:
    """Another process writes and dies without closing anything; this one recovers."""
    path = tmp_path / "state" / "tasks.sqlite3"
    script = textwrap.dedent(f"""
        import asyncio, json, os, sys
        sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
        from test_store import records_by_name
        from murmurd.a2a.stores.sqlite import SqliteTaskStore

        async def main():
            store = await SqliteTaskStore.open(sys.argv[1])
            records = records_by_name()
            for record in records.values():
                await store.put(record)
            print(json.dumps({{name: r.to_json() for name, r in records.items()}}), flush=True)
            os._exit(0)  # a crash: no close, no checkpoint

        asyncio.run(main())
    """)
    done = subprocess.run([sys.executable, "-c", script, str(path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=True)
    written = json.loads(done.stdout)
    assert set(written) == set(STATES)
    await check_recovery(path, written)

    # And the recovered state is what yet another process sees.
    reader = textwrap.dedent("""
        import asyncio, json, sys
        from murmurd.a2a.stores.sqlite import SqliteTaskStore

        async def main():
            store = await SqliteTaskStore.open(sys.argv[1])
            print(json.dumps({r.id: [r.state.value, r.status_message] for r in await store.list()}))
            await store.close()

        asyncio.run(main())
    """)
    seen = json.loads(subprocess.run([sys.executable, "-c", reader, str(path)], cwd=ROOT, capture_output=True,
                                     text=True, timeout=60, check=True).stdout)
    for name, data in written.items():
        if name in NON_TERMINAL:
            assert seen[data["id"]] == ["failed", INTERRUPTED_MESSAGE]
        else:
            assert seen[data["id"]] == [data["state"], data["status_message"]]


async def test_memory_store_marks_interrupted_too() -> None:
    store = MemoryTaskStore()
    records = records_by_name()
    for record in records.values():
        await store.put(record)
    assert sorted(await store.mark_interrupted("gone")) == sorted(records[n].id for n in NON_TERMINAL)
    assert (await store.get(records["running"].id)).status_message == "gone"  # type: ignore[union-attr]
    assert (await store.get(records["done"].id)).state is TaskState.COMPLETED  # type: ignore[union-attr]


async def test_concurrent_puts_from_many_tasks_all_land(tmp_path: Path) -> None:
    store = await SqliteTaskStore.in_state_dir(tmp_path / "state")
    assert store.path == tmp_path / "state" / "tasks.sqlite3"
    context_id = new_context_id()

    async def writer(n: int) -> str:
        record = full_record(context_id, state=TaskState.SUBMITTED, at=n)
        await store.put(record)
        for state in (TaskState.WORKING, TaskState.COMPLETED):
            record.state = state
            record.updated_at += 1
            await store.put(record)
        return record.id

    ids = await asyncio.gather(*(writer(n) for n in range(20)))
    listed = await store.list(context_id)
    assert sorted(r.id for r in listed) == sorted(ids)
    assert all(r.state is TaskState.COMPLETED for r in listed)
    await store.close()

    reopened = await SqliteTaskStore.open(store.path)
    assert len(await reopened.list(context_id)) == 20
    await reopened.close()


async def test_the_event_loop_keeps_running_during_store_calls(tmp_path: Path) -> None:
    store = await SqliteTaskStore.open(tmp_path / "tasks.sqlite3")
    ticks = 0
    stop = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0)

    running = asyncio.create_task(ticker())
    for _ in range(30):
        await store.put(full_record())
    stop.set()
    await running
    assert ticks > 30  # the loop ran while each commit waited on disk
    await store.close()
