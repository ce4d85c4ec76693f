"""The one bridge between the asyncio event loop and the WASM worker threads.

WASM runs only on `WasmPool` threads, never on the loop. A host import that has to wait for
something the loop owns (a supervisor's reply, an HTTP response) calls `LoopBridge.wait`,
which schedules the coroutine on the loop and blocks only the worker thread until it is done.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopBridge:
    """Runs coroutines on `loop` on behalf of worker threads."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def wait(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if self._on_loop_thread():
            coro.close()
            raise RuntimeError("LoopBridge.wait called on the event loop thread; it would deadlock")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    def _on_loop_thread(self) -> bool:
        try:
            return asyncio.get_running_loop() is self.loop
        except RuntimeError:
            return False


class WasmPool:
    """A bounded pool of worker threads; the only place WASM executes."""

    def __init__(self, max_workers: int = 8) -> None:
        self.max_workers = max_workers
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix="murmurd-wasm"
        )

    def ensure_workers(self, count: int) -> None:
        """At least `count` threads: a served capsule sizes the pool to its concurrency bound
        (a driver waiting on its provider holds a thread). Growing only; no call is lost."""
        if count <= self.max_workers:
            return
        old, self.max_workers = self._executor, count
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=count, thread_name_prefix="murmurd-wasm")
        old.shutdown(wait=False)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        context = contextvars.copy_context()
        return await loop.run_in_executor(self._executor, functools.partial(context.run, fn, *args))

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
