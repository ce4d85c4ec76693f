"""`outlasting_cancels`: work that must finish once begun, whatever cancels the one awaiting it.

`asyncio.shield` keeps the work going when its awaiter is cancelled, but the awaiter leaves at
once: what it meant to do after the work (publish a stored state, close what the work left) is
skipped, and a second cancel meets no shield at all. Here the awaiter stays until the work has
ended, however many cancels arrive, and learns whether one did, to raise it then.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def outlasting_cancels(work: Awaitable[T]) -> tuple[T, bool]:
    """`work`'s result once it has ended, and whether the caller was cancelled meanwhile (the
    caller raises `CancelledError` when it has done what must follow the work). An exception of
    the work's own is raised as it would be without the cancel; the work cancelled itself, its
    `CancelledError`. When the work raised after a cancel arrived, the cancel is not lost: the
    caller's task is cancelled again, so its next wait ends with it (a loop that goes on after
    logging the work's error still stops)."""
    task = asyncio.ensure_future(work)
    interrupted = False
    while not task.done():
        try:
            await asyncio.wait({task})  # never cancels the work, never raises its error
        except asyncio.CancelledError:
            interrupted = True
    if interrupted and not task.cancelled() and task.exception() is not None:
        current = asyncio.current_task()
        if current is not None:
            current.cancel()
    return task.result(), interrupted
