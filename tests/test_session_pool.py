"""The session pool over real sessions of a staged capsule: one per context, reused while the
context is live, closed when idle or when room is needed. A session that ran no task writes no
trace line (upstream nests the session pair inside each task), so a close is read off the session."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from a2akit import chaos_capsule
from murmurd.a2a.peers.peer import PeerClient
from murmurd.a2a.core.pool import SessionPool, Slot
from murmurd.host import ComponentHost
from murmurd.session.session import Session
from murmurd.session.task import TaskSpec
from murmurd.staging.sessions import open_session_staging
from murmurd.staging.stage import StagedCapsule, stage_capsule

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _built(artifacts) -> None:
    for name in ("chaos-driver", "ask"):
        artifacts.fixture(name)
    artifacts.example("echo")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _trace(slot: Slot) -> list[str]:
    path = slot.session.staged.workdir.trace
    return [json.loads(line)["event_type"] for line in path.read_text().splitlines()]


async def _pool(tmp_path: Path, host: ComponentHost, capacity: int, clock: Clock) -> tuple[StagedCapsule, SessionPool]:
    staged = await asyncio.to_thread(stage_capsule, chaos_capsule(tmp_path), host=host)

    async def open_slot(context_id: str, first: TaskSpec | None) -> Slot:
        session = Session(open_session_staging(staged), host)
        if first is not None:
            session.begin_first_task(first)
        await session.open()
        return Slot(session, PeerClient(session.trace))

    return staged, SessionPool(None, capacity=capacity, idle_secs=10, open_slot=open_slot, clock=clock)


async def test_each_context_gets_its_own_session_and_keeps_it(tmp_path: Path, host: ComponentHost) -> None:
    clock = Clock()
    staged, pool = await _pool(tmp_path, host, 4, clock)
    try:
        a, b = await pool.acquire("ctx_a"), await pool.acquire("ctx_b")
        assert a is not b and a.session.staged.session_id != b.session.staged.session_id
        assert a.session.staged.workdir.root.parent == staged.workdir.root.parent
        pool.release("ctx_a", a)
        assert await pool.acquire("ctx_a") is a  # reused while open
        assert (a.session.staged.workdir.root / "tools" / "echo" / "murmur.yaml").is_file()
        assert not (a.session.staged.workdir.root / "tools" / "chaos-driver" / "chaos-driver.wasm").exists()
    finally:
        await pool.close_all()


async def test_a_full_pool_closes_the_least_recently_used_idle_session(tmp_path: Path, host: ComponentHost) -> None:
    clock = Clock()
    _staged, pool = await _pool(tmp_path, host, 2, clock)
    try:
        a, b = await pool.acquire("ctx_a"), await pool.acquire("ctx_b")
        pool.release("ctx_b", b)
        pool.release("ctx_a", a)  # a was used last: b is the least recently used
        c = await pool.acquire("ctx_c")
        assert pool.live == 2 and pool.slot_of("ctx_b") is None and pool.slot_of("ctx_a") is a
        assert b.session.closed and not a.session.closed and _trace(b) == []
        assert c.busy == 1
    finally:
        await pool.close_all()


async def test_idle_sessions_close_after_idle_secs_and_busy_ones_never(tmp_path: Path, host: ComponentHost) -> None:
    clock = Clock()
    _staged, pool = await _pool(tmp_path, host, 4, clock)
    try:
        idle, busy = await pool.acquire("ctx_idle"), await pool.acquire("ctx_busy")
        pool.release("ctx_idle", idle)
        clock.now = 9.0
        assert await pool.close_idle() == 0
        clock.now = 10.5
        assert await pool.close_idle() == 1
        assert pool.slot_of("ctx_idle") is None and pool.slot_of("ctx_busy") is busy
        assert idle.session.closed and not busy.session.closed
        clock.now = 1000.0
        assert await pool.close_idle() == 0  # still running a task
    finally:
        await pool.close_all()
    assert busy.session.closed and _trace(busy) == []


async def test_a_session_that_fails_to_close_never_stops_the_others(tmp_path: Path, host: ComponentHost) -> None:
    clock = Clock()
    _staged, pool = await _pool(tmp_path, host, 4, clock)
    broken, fine = await pool.acquire("ctx_broken"), await pool.acquire("ctx_fine")
    broken.session.trace.close()
    broken.session.spans = None  # type: ignore[assignment]  # its close raises
    await pool.close_all()
    assert pool.live == 0
    assert fine.session.closed
