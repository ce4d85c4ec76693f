"""A cancel that arrives in the same loop step as the thing being waited for is never lost.

On Python 3.11 `asyncio.wait_for` returns the result and swallows such a cancel; a replica's
background loop built on it then never stopped, and a graceful SIGTERM hung (issue 17)."""

from __future__ import annotations

import asyncio

from murmurd.a2a.replicas.coordinator import _woken


async def _cancel_as_it_is_set() -> str:
    event = asyncio.Event()
    waiter = asyncio.create_task(_woken(event, 10.0))
    await asyncio.sleep(0.01)  # waiting now
    event.set()
    waiter.cancel()
    try:
        return f"returned {await waiter}"
    except asyncio.CancelledError:
        return "cancelled"


def test_a_cancel_that_arrives_with_the_event_is_honoured() -> None:
    assert asyncio.run(_cancel_as_it_is_set()) == "cancelled"


def test_the_wait_tells_a_wakeup_from_a_timeout() -> None:
    async def both() -> tuple[bool, bool]:
        event = asyncio.Event()
        timed_out = await _woken(event, 0.01)
        event.set()
        return timed_out, await _woken(event, 10.0)

    assert asyncio.run(both()) == (False, True)
