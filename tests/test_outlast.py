"""`outlasting_cancels`: the awaiter stays until the work has ended, however often it is cancelled."""

from __future__ import annotations

import asyncio

import pytest

from murmurd.outlast import outlasting_cancels

pytestmark = pytest.mark.anyio


async def test_work_outlasts_two_cancels_and_the_awaiter_learns_of_them() -> None:
    started, release = asyncio.Event(), asyncio.Event()
    after: list[str] = []

    async def work() -> str:
        started.set()
        await release.wait()
        return "stored"

    async def awaiter() -> None:
        result, interrupted = await outlasting_cancels(work())
        after.append(f"{result} {interrupted}")
        if interrupted:
            raise asyncio.CancelledError

    task = asyncio.ensure_future(awaiter())
    await started.wait()
    task.cancel()
    await asyncio.sleep(0)  # the first cancel is taken in
    task.cancel()
    await asyncio.sleep(0)
    assert not task.done()  # still waiting for the work
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert after == ["stored True"]


async def test_an_uninterrupted_work_gives_its_result_or_its_own_exception() -> None:
    async def fine() -> int:
        return 7

    async def broken() -> int:
        raise OSError("disk full")

    assert await outlasting_cancels(fine()) == (7, False)
    with pytest.raises(OSError, match="disk full"):
        await outlasting_cancels(broken())


async def test_work_that_cancels_itself_raises_its_cancel() -> None:
    async def gives_up() -> None:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await outlasting_cancels(gives_up())


async def test_a_cancel_that_arrived_before_the_work_failed_is_not_lost() -> None:
    """The work's own error comes first; the caller's next wait then ends with the cancel."""
    started, release = asyncio.Event(), asyncio.Event()
    seen: list[str] = []

    async def failing() -> None:
        started.set()
        await release.wait()
        raise OSError("store down")

    async def loop_that_logs_and_goes_on() -> None:
        while True:
            try:
                await outlasting_cancels(failing())
            except OSError as exc:
                seen.append(str(exc))
            await asyncio.Event().wait()  # the next round's wait

    task = asyncio.ensure_future(loop_that_logs_and_goes_on())
    await started.wait()
    task.cancel()
    await asyncio.sleep(0)
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 60)
    assert seen == ["store down"]
