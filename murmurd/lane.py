"""`Lane`: `murmurd serve`'s one thread for short blocking work, where some work goes first.

Every thread that contends for the interpreter lock and is woken for a task's work costs CPU per
task, more than the work it does (issue 29: `docs/benchmarks.md`, the fifth sitting), so the
served loop's executor is one thread, and the SQLite store runs its batches on it too. A queue
of file work must not hold the store up (the readiness probe pings it within 2 s, and a task's
end waits on it), so a store's batch is submitted with `submit_first`: it waits for the work
running now, never for the work queued. What runs here is short by rule; a wait of seconds gets
a thread of its own (`session/own_thread.py`).

An executor: `asyncio.to_thread` and `run_in_executor` use it as the loop's default executor,
and `shutdown` (called by `asyncio.Runner` as it closes) runs what was queued and ends the
thread. Until then the thread lives: a CLI spawned on it with a parent-death signal
(`session/process/spawn.py`) would die with a thread that ended. It is a `ThreadPoolExecutor`
by type only (asyncio's own loop takes no other as its default): `submit` and `shutdown` are its
own, and none of the pool's threads ever starts.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

_Work = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class Lane(ThreadPoolExecutor):
    """One thread, started at the first submission, running `submit_first` work before any
    `submit` work not yet started, each kind in submission order."""

    def __init__(self, name: str = "murmurd-io") -> None:
        super().__init__(max_workers=1, thread_name_prefix=name)  # the type asyncio asks for; never used
        self._name = name
        self._lock = threading.Condition()
        self._first: deque[_Work] = deque()
        self._rest: deque[_Work] = deque()
        self._thread: threading.Thread | None = None
        self._shut = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        return self._queue(self._rest, fn, args, kwargs)

    def submit_first(self, fn: Callable[..., Any], /, *args: Any) -> Future[Any]:
        """`submit`, ahead of every `submit` work not started yet."""
        return self._queue(self._first, fn, args, {})

    def _queue(self, queue: deque[_Work], fn: Callable[..., Any], args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> Future[Any]:
        future: Future[Any] = Future()
        with self._lock:
            if self._shut:
                raise RuntimeError("cannot schedule new futures after shutdown")
            queue.append((future, fn, args, kwargs))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"{self._name}_0", daemon=True)
                self._thread.start()
            else:
                self._lock.notify()
        return future

    def _next(self) -> _Work | None:
        with self._lock:
            while not (self._first or self._rest):
                if self._shut:
                    return None
                self._lock.wait()
            return (self._first or self._rest).popleft()

    def _run(self) -> None:
        while (work := self._next()) is not None:
            future, fn, args, kwargs = work
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - the submitter's to see, as ThreadPoolExecutor does
                future.set_exception(exc)
            else:
                future.set_result(result)
            del work, future, fn, args, kwargs  # nothing of it is kept alive while the lane waits

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shut = True
            if cancel_futures:
                for queue in (self._first, self._rest):
                    while queue:
                        queue.popleft()[0].cancel()
            self._lock.notify_all()
            thread = self._thread
        if wait and thread is not None and thread is not threading.current_thread():
            thread.join()
