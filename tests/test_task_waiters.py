"""A blocked caller is woken by its own task's changes only (issue 29: a shared condition woke
every blocked `message/send` at every change of every task, 3N wake-ups a task with N blocked)."""

from __future__ import annotations

import asyncio

import pytest

from murmurd.a2a.core.waiters import TaskWaiters

pytestmark = pytest.mark.anyio


class Looks:
    """A waiter's condition that counts how often it was looked at."""

    def __init__(self) -> None:
        self.ready = False
        self.looked = 0

    def __call__(self) -> bool:
        self.looked += 1
        return self.ready


async def test_a_change_wakes_only_the_callers_of_its_task() -> None:
    waiters = TaskWaiters()
    mine, others = Looks(), [Looks() for _ in range(200)]
    waiting = [asyncio.create_task(waiters.wait_for("tsk_mine", mine))]
    waiting += [asyncio.create_task(waiters.wait_for(f"tsk_{k}", look)) for k, look in enumerate(others)]
    await asyncio.sleep(0)  # every waiter looked once and registered
    assert len(waiters) == 201
    for _ in range(3):  # three changes of one task: submitted, working, completed
        waiters.wake("tsk_mine")
        await asyncio.sleep(0)
    mine.ready = True
    waiters.wake("tsk_mine")
    await asyncio.wait_for(waiting[0], 30)
    assert mine.looked == 5  # once at first, once per wake of its own task
    assert [look.looked for look in others] == [1] * 200  # nobody else was woken
    for k, look in enumerate(others):
        look.ready = True
        waiters.wake(f"tsk_{k}")
    await asyncio.wait_for(asyncio.gather(*waiting[1:]), 30)
    assert len(waiters) == 0


async def test_a_wait_that_times_out_leaves_nothing_behind_and_a_ready_one_never_registers() -> None:
    waiters = TaskWaiters()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await waiters.wait_for("tsk_x", lambda: False)
    assert len(waiters) == 0
    waiters.wake("tsk_x")  # a wake with nobody waiting is nothing
    await waiters.wait_for("tsk_y", lambda: True)  # already so: returns at once
    assert len(waiters) == 0


async def test_two_callers_of_one_task_are_both_woken() -> None:
    waiters = TaskWaiters()
    look = Looks()
    both = [asyncio.create_task(waiters.wait_for("tsk_z", look)) for _ in range(2)]
    await asyncio.sleep(0)
    look.ready = True
    waiters.wake("tsk_z")
    await asyncio.wait_for(asyncio.gather(*both), 30)
    assert len(waiters) == 0
