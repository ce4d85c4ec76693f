"""WASM never runs on the event loop: the loop keeps serving while calls run in the pool."""

from __future__ import annotations

import asyncio
import time

import pytest

from hostile import SPIN, tool_component
from murmurd.host import CallGrant, ComponentHost, DeadlineExceeded, Limits, ToolInput

pytestmark = pytest.mark.anyio


async def test_the_loop_keeps_ticking_while_ten_calls_run(host: ComponentHost) -> None:
    spin = host.load_bytes(tool_component(SPIN), name="spin")
    grant = CallGrant(limits=Limits(deadline_seconds=0.5))
    ticks = 0
    stop = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not stop.is_set():
            await asyncio.sleep(0.01)
            ticks += 1

    ticking = asyncio.create_task(ticker())
    started = time.monotonic()
    results = await asyncio.gather(
        *(host.call_tool(spin, ToolInput(), grant=grant) for _ in range(10)), return_exceptions=True
    )
    elapsed = time.monotonic() - started
    stop.set()
    await ticking
    assert all(isinstance(r, DeadlineExceeded) for r in results)
    assert elapsed >= 0.5
    # A blocked loop would have ticked a handful of times at most; a free one ticks ~100/s.
    assert ticks >= int(elapsed * 100 * 0.3)


async def test_cancelling_the_awaiter_stops_the_guest_promptly() -> None:
    host = ComponentHost(max_workers=1, use_disk_cache=False)  # one worker: the next call waits for it
    spin = host.load_bytes(tool_component(SPIN), name="spin")
    call = asyncio.create_task(host.call_tool(spin, ToolInput(), grant=CallGrant(limits=Limits(deadline_seconds=60))))
    await asyncio.sleep(0.2)
    started = time.monotonic()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    # The only worker is free again quickly, so the cancelled guest really stopped.
    spin_again = host.call_tool(spin, ToolInput(), grant=CallGrant(limits=Limits(deadline_seconds=0.1)))
    with pytest.raises(DeadlineExceeded):
        await spin_again
    assert time.monotonic() - started < 1
    host.close()
