"""The thread a SQLite task store runs on: its operations in arrival order, a batch at a time.

The thread is its own, or (`executor`: `murmurd serve`'s `Lane`, its one thread for short
blocking work) an executor's, whose other work (the sessions' files) runs between the store's
batches: a second thread contending for the interpreter lock, woken for every operation, cost
about a tenth of a task's CPU (`docs/benchmarks.md`, issue 29's fifth sitting). On a `Lane` a
batch after an idle spell goes ahead of the file work queued (it waits for the work running
only); the next batches of a backlog go behind it.

Every operation queued while one batch ran is the next batch. Writes commit without a sync
(WAL, `synchronous=NORMAL`: a commit survives a crash of the daemon, not of the machine); a
durable one (a terminal state, which carries the task's answer) is answered only after the
batch's one sync of what was written (a last commit at `synchronous=FULL`), so tasks that end
together cost one sync between them, not one each (group commit). What ran before the batch's
first durable write is answered before that sync; what ran after it (a read that may have seen
that write's answer) only after it: no caller hears of a terminal state the disk may not hold.

A sync the disk refuses is sticky (`LostSync`): the kernel may drop the pages of a failed fsync,
so no later sync vouches for what was written before it, and every durable write is refused
until the store is opened again.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from murmurd.a2a.stores.base import TaskStoreError
from murmurd.lane import Lane

_T = TypeVar("_T")
log = logging.getLogger("murmurd.a2a.stores")


class LostSync(TaskStoreError):
    """The disk refused to sync the store: what was written since the last good sync may be lost."""


BATCH_LIMIT = 256  # operations run before the waiting ones are answered (a read's latency bound)


@dataclass
class _Op:
    fn: Callable[[sqlite3.Connection], Any]
    durable: bool
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop


@dataclass
class _Outcomes:
    """What a batch answers, grouped by the event loop each caller waits on."""

    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Any, BaseException | None]]] = \
        field(default_factory=dict)

    def add(self, op: _Op, result: Any, error: BaseException | None) -> None:
        self.by_loop.setdefault(op.loop, []).append((op.future, result, error))

    def post(self) -> None:
        """One wake-up per loop for the whole group."""
        for loop, settled in self.by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle, settled)
            except RuntimeError:  # that loop is closed: no one is left to answer
                pass
        self.by_loop = {}


def _settle(settled: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
    for future, result, error in settled:
        if future.done():  # its caller was cancelled
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)


_STOP = object()


class StoreThread:
    """Runs `fn(connection)` calls for one store on one thread of its own, or as batches on
    `executor` (one batch at a time: the connection is never used by two threads at once).

    `connect` opens (or returns) the connection, on this thread; `sync` makes every commit so far
    durable (a commit that syncs the log), or raises what every durable caller of the batch is told."""

    def __init__(self, connect: Callable[[], sqlite3.Connection], sync: Callable[[], None],
                 name: str = "murmurd-taskstore", *, executor: Executor | None = None) -> None:
        self._connect = connect
        self._sync = sync
        self._queue: queue.SimpleQueue[_Op | object] = queue.SimpleQueue()
        self._name = name
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._executor = executor
        self._draining = False  # (on an executor) a batch is submitted or running: under _start_lock
        self.batches = 0  # batches run (the benches and tests read it)
        self.syncs = 0  # syncs made
        self._lost: str | None = None  # why durable writes are refused (a sync the disk refused)

    async def run(self, fn: Callable[[sqlite3.Connection], _T], *, durable: bool = False) -> _T:
        """`fn(connection)` on the store thread; with `durable`, answered once it is synced."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_T] = loop.create_future()
        if self._executor is not None:
            self._enqueue_on_executor(_Op(fn, durable, future, loop))
        else:
            self._ensure_started()
            self._queue.put(_Op(fn, durable, future, loop))
        return await future

    def _enqueue_on_executor(self, op: _Op) -> None:
        with self._start_lock:
            self._queue.put(op)
            if self._draining:
                return  # the batch running takes it, or the one it submits next
            self._draining = True
        self._submit_drain(first=True)

    def _submit_drain(self, *, first: bool) -> None:
        """A batch to the executor: the first after an idle spell ahead of the executor's queued
        work (a `Lane`'s `submit_first`: it waits for the work running, not for a queue of it),
        the next of a backlog behind it (so neither starves the other)."""
        executor = self._executor
        assert executor is not None
        try:
            if first and isinstance(executor, Lane):
                executor.submit_first(self._drain)
            else:
                executor.submit(self._drain)
        except RuntimeError:  # the executor is shut down: what is queued is answered here, refused
            with self._start_lock:
                self._draining = False
            self._refuse_queued(RuntimeError("task store is closed"))

    def _drain(self) -> None:
        """On the executor: one batch of what is queued; then the next batch, if any."""
        try:
            items = self._take_queued()
            if items:
                self._run_batch(items)
        except Exception:  # noqa: BLE001 - a defect here must not leave the store waiting for good
            log.exception("a task store batch failed outside its operations")
        finally:
            with self._start_lock:
                self._draining = more = not self._queue.empty()
            if more:
                self._submit_drain(first=False)

    def _take_queued(self) -> list[_Op]:
        items: list[_Op] = []
        while len(items) < BATCH_LIMIT:
            try:
                items.append(self._queue.get_nowait())  # type: ignore[arg-type]
            except queue.Empty:
                break
        return items

    def _refuse_queued(self, error: BaseException) -> None:
        refused = _Outcomes()
        while items := self._take_queued():
            for op in items:
                refused.add(op, None, error)
        refused.post()

    def _ensure_started(self) -> None:
        if self._thread is None:
            with self._start_lock:
                if self._thread is None:
                    thread = threading.Thread(target=self._serve, name=self._name, daemon=True)
                    thread.start()
                    self._thread = thread

    async def stop(self) -> None:
        """Let every queued operation run and end the thread (on an executor there is none: the
        store's last operation, its close, was awaited after every one queued before it)."""
        if self._thread is None:
            return
        self._queue.put(_STOP)
        await asyncio.get_running_loop().run_in_executor(None, self._thread.join)

    def _serve(self) -> None:
        while True:
            items = [self._queue.get()]  # waits for work; then takes what else is queued
            while len(items) < BATCH_LIMIT and items[-1] is not _STOP:
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            batch: list[_Op] = [item for item in items if item is not _STOP]  # type: ignore[misc]
            if batch:
                self._run_batch(batch)
            if items[-1] is _STOP:
                return

    def _run_batch(self, batch: list[_Op]) -> None:
        self.batches += 1
        early, late = _Outcomes(), _Outcomes()  # answered before the sync, after it
        unsynced: list[tuple[_Op, Any]] = []
        for op in batch:
            try:
                result, error = op.fn(self._connect()), None
            except BaseException as exc:  # noqa: BLE001 - handed to its caller, never lost here
                result, error = None, exc
            if op.durable and error is None:
                unsynced.append((op, result))
            else:
                (late if unsynced else early).add(op, result, error)
        early.post()
        if not unsynced:
            return
        refused = self._synced()
        for op, result in unsynced:  # each caller its own exception (a traceback is per raise)
            late.add(op, None if refused else result, None if refused is None else refused[0](refused[1]))
        late.post()

    def _synced(self) -> tuple[type[TaskStoreError], str] | None:
        """Sync; None when done, else the error (class, words) each durable write waiting on it gets."""
        if self._lost is not None:
            return LostSync, self._lost
        try:
            self._sync()
        except LostSync as exc:
            self._lost = f"{exc}; durable writes are refused until the store is opened again"
            return LostSync, self._lost
        except BaseException as exc:  # noqa: BLE001 - told to every durable caller of the batch
            return TaskStoreError, f"the task store could not sync ({type(exc).__name__}: {exc})"
        self.syncs += 1
        return None
