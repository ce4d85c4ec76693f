"""Session, task and context ids (issue 16, item 1): `ses_`/`tsk_`/`ctx_` + a UUIDv7 as 32
lowercase hex, time-ordered, so "latest" and `--since` work on names alone; ids minted before
(random hex) still load."""

from __future__ import annotations

import os
import re
import secrets
import time
import uuid
from pathlib import Path

import pytest

from murmurd import ids
from murmurd.a2a.stores.sqlite import SqliteTaskStore
from murmurd.a2a.core.tasks import TaskRecord, TaskState
from murmurd.traceview.sessions import uuid7_ms

ID = re.compile(r"(ses|tsk|ctx)_[0-9a-f]{32}")


@pytest.mark.parametrize("mint, prefix", [(ids.new_session_id, "ses_"), (ids.new_task_id, "tsk_"),
                                          (ids.new_context_id, "ctx_")])
def test_ids_are_a_prefix_and_a_uuid7_in_32_lowercase_hex(mint, prefix: str) -> None:
    before = time.time_ns() // 1_000_000
    minted = [mint() for _ in range(2000)]
    after = time.time_ns() // 1_000_000
    assert all(ID.fullmatch(i) and i.startswith(prefix) for i in minted)
    parsed = [uuid.UUID(hex=i[4:]) for i in minted]
    assert {u.version for u in parsed} == {7} and {u.variant for u in parsed} == {uuid.RFC_4122}
    stamps = [int(i[4:16], 16) for i in minted]  # the first 12 hex digits: Unix ms
    assert before <= stamps[0] and stamps[-1] <= after + 1  # +1: a counter overflow borrows a millisecond
    assert minted == sorted(minted) and len(set(minted)) == len(minted)  # ordered by minting, even within 1 ms


def test_every_place_that_mints_ids_mints_uuid7() -> None:
    from murmurd.a2a.core.tasks import new_context_id, new_task_id
    from murmurd.workdir import new_session_id

    for minted in (new_session_id(), new_task_id(), new_context_id()):
        assert uuid7_ms(minted) is not None, minted  # any four-character prefix


def test_the_reader_decodes_only_uuid7_times() -> None:
    now = time.time_ns() // 1_000_000
    assert abs(uuid7_ms(ids.new_session_id()) - now) < 5_000
    assert uuid7_ms("ses_" + uuid.uuid4().hex) is None  # random: no time in it
    assert uuid7_ms("ses_" + "f" * 32) is None  # version nibble f
    assert uuid7_ms("ses_SHORT") is None


@pytest.mark.anyio
async def test_a_task_store_holding_random_ids_from_before_still_loads(tmp_path: Path) -> None:
    """A state directory written before UUIDv7 ids: tasks with random hex ids load after a restart."""
    old_task, old_context = "tsk_" + secrets.token_hex(16), "ctx_" + secrets.token_hex(16)
    store = await SqliteTaskStore.open(tmp_path / "tasks.sqlite3")
    await store.put(TaskRecord(id=old_task, context_id=old_context, state=TaskState.COMPLETED, result_text="old",
                               created_at=1_600_000_000_000, updated_at=1_600_000_000_001))
    await store.close()
    store = await SqliteTaskStore.open(tmp_path / "tasks.sqlite3")
    try:
        loaded = await store.get(old_task)
        assert loaded is not None and (loaded.context_id, loaded.result_text) == (old_context, "old")
        assert [r.id for r in await store.list(context_id=old_context)] == [old_task]
    finally:
        await store.close()


def test_random_bytes_are_handed_out_once_across_refills() -> None:
    drawn = [ids.random_bytes(16) for _ in range(600)]  # 9,600 bytes: two refills of the pool
    assert len(set(drawn)) == len(drawn)
    assert all(len(chunk) == 16 for chunk in drawn)
    assert len(ids.random_bytes(10_000)) == 10_000  # more than one pool's worth at once


def test_a_forked_child_does_not_repeat_the_parents_random_bytes() -> None:
    ids.random_bytes(1)  # the parent's pool holds bytes now
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        os.write(writer, ids.random_bytes(32))
        os._exit(0)
    os.close(writer)
    try:
        from_child = os.read(reader, 64)
    finally:
        os.close(reader)
        os.waitpid(child, 0)
    assert len(from_child) == 32
    assert ids.random_bytes(32) != from_child
