"""Long blocking waits on a thread of their own, never on the loop's shared executor.

A shell command, a native tool or a CLI capsule's process runs for as long as its deadline
allows: seconds to minutes. On the loop's default executor (`asyncio.to_thread`) each would hold
one of its few threads for that long, and every session's short file work (a new context's
workdir, `task.md`, a result, the trace's barrier) would queue behind them. So such a wait gets
a thread made for it, which ends with it: threads grow with the calls running (at most a few
per running task), never with contexts, and the shared executor stays small (`docs/decisions.md`,
"Issue 29: long waits on threads of their own, a small executor for short work").

As with `asyncio.to_thread`, cancelling the awaiter does not stop the thread: the caller's
cancel flag does (the process group dies), and the thread's result is then dropped.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


async def on_own_thread(fn: Callable[..., T], /, *args: Any) -> T:
    """`fn(*args)` on a new thread (its context copied, as `asyncio.to_thread` copies it)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()
    context = contextvars.copy_context()

    def settle(outcome: Callable[[], None]) -> None:
        if not done.done():  # cancelled meanwhile: nobody waits for the answer
            outcome()

    def run() -> None:
        try:
            result = context.run(fn, *args)
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiter, whatever it was
            answer = exc
            deliver: Callable[[], None] = lambda: done.set_exception(answer)  # noqa: E731
        else:
            deliver = lambda: done.set_result(result)  # noqa: E731
        try:
            loop.call_soon_threadsafe(settle, deliver)
        except RuntimeError:
            pass  # the loop has closed: nobody is left to tell

    threading.Thread(target=run, name=f"murmurd-wait-{getattr(fn, '__name__', 'call')}").start()
    return await done
