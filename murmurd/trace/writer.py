"""`TraceWriter`: the one writer of a session's `trace.jsonl` (runtime-notes §7).

Every event gets `event_type`, `session_id` and `timestamp` (Unix ms) when it is written, and is
appended as one JSON line. `write` only queues the event (callers on the event loop never touch
the file); the lines keep the order of the `write` calls. `flush` is the barrier: it returns once
every event queued before it is in the file, so a reader of `trace.jsonl` after a task or a
session ends sees every line. A barrier with nothing queued or being written returns at once.

The file writes are done by a `TraceDrain`: a few threads shared by every writer of the process
(issue 29: a thread per session made threads grow with contexts). A writer with queued events is
handed to one drain thread at a time, which writes what is queued and flushes the file, so a
session's lines stay in order; the threads exit after `IDLE_SECONDS` with nothing to write, so an
idle process (and an idle session) holds no thread for its traces.

Waking a thread costs more than writing a line, so the drain wakes for lines at most once per
`LINGER_SECONDS` and writes what has gathered by then; a barrier or a close wakes it at once. A
barrier from a thread that may block (`flush_blocking`) writes the queued lines itself when no
drain thread is writing that trace: the drain is not woken, and the caller waits for no other
thread. A line reaches the file at a barrier or within about `LINGER_SECONDS`. `write_through`
is a line and its blocking barrier in one step (written by the caller when the trace is idle),
and `mark` / `flush_to` a barrier up to a point, free once the drain has written that far.

A failed write is sticky: the writer stops writing, and every later `write` or `flush` raises
`TraceWriteError` naming the first event that could not be written ("E-RUN-007: cannot write
task_start to trace ..."). The session decides what that means (it ends the session for every
event but `compaction`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from murmurd import workdir_fs

log = logging.getLogger("murmurd.trace")

# The writer thread exits after this long with nothing to write, and starts again on the next
# event, so an idle session (or a writer nobody closed) holds no thread.
IDLE_SECONDS = 10.0


# Upstream's code for a trace write that failed and ended the session (observability fact sheet §1).
TRACE_WRITE_FAILED = "E-RUN-007"


class TraceWriteError(RuntimeError):
    pass


# Fields upstream always writes, as `null` when there is no value (observability fact sheet §2);
# every other field is left out when it has none.
ALWAYS_PRESENT: dict[str, frozenset[str]] = {
    "session_start": frozenset({"system_prompt_sha256"}),
    "inference": frozenset({"tool_name"}),
    "a2a_task_received": frozenset({"traceparent_from_caller"}),
    "a2a_send": frozenset({"traceparent"}),
    "egress_denied": frozenset({"origin"}),
}

_CLOSE = object()  # the queue item after which the writer closes the file
DRAIN_THREADS = 2  # every trace of the process is written by at most this many threads
LINGER_SECONDS = 0.02  # lines wait at most about this long for a drain thread, barriers never


def trace_line(event: dict[str, Any]) -> str:
    return json.dumps(event, ensure_ascii=False, separators=(",", ":"), default=str) + "\n"


def stamped(session_id: str, event_type: str, fields: dict[str, Any]) -> dict[str, Any]:
    """The event as written: its type, session and time (Unix ms) first, then the fields that have
    a value (or are always present)."""
    event = {"event_type": event_type, "session_id": session_id, "timestamp": int(time.time() * 1000)}
    keep = ALWAYS_PRESENT.get(event_type, frozenset())
    event.update({k: v for k, v in fields.items() if v is not None or k in keep})
    return event


class TraceDrain:
    """The threads that write every `TraceWriter`'s queued events: at most `threads`, started on
    demand, each gone after `idle_seconds` without work. A writer is in the ready queue at most
    once, so only one thread writes a given trace at a time."""

    def __init__(self, threads: int = DRAIN_THREADS, idle_seconds: float = IDLE_SECONDS,
                 linger_seconds: float = LINGER_SECONDS) -> None:
        self.max_threads = threads
        self.idle_seconds = idle_seconds
        self.linger_seconds = linger_seconds
        self.lock = threading.Condition()  # guards this drain and every writer's queue
        self._ready: deque[TraceWriter] = deque()
        self._due: float | None = None  # when the lines waiting in `_ready` are to be written
        self._hurry = False  # a writer in `_ready` holds a barrier or a close: write now
        self._threads = 0
        self._idle = 0
        self._lingering = 0  # threads in a linger wait: they wake by the next `_due` on their own
        self.wakes = 0  # times a thread was woken or started for work (read by tests and benches)

    @property
    def threads(self) -> int:
        """Drain threads alive now."""
        with self.lock:
            return self._threads

    def schedule(self, writer: TraceWriter, urgent: bool) -> None:
        """Called under `lock`: `writer` has items queued and no thread on it yet; `urgent` when
        one of them is a barrier or a close."""
        first = self._enqueue(writer)
        if urgent:
            self.hurry()
        elif first and not self._lingering:  # the first lines of a linger: a thread must watch the clock
            self._wake()

    def _enqueue(self, writer: TraceWriter) -> bool:
        """Called under `lock`: `writer` to the ready queue; True when that starts a linger."""
        self._ready.append(writer)
        if self._due is not None:
            return False
        self._due = time.monotonic() + self.linger_seconds
        return True

    def _dequeue(self, writer: TraceWriter | None = None) -> TraceWriter:
        """Called under `lock`: the next writer (or `writer`) off the ready queue; an empty queue
        has no linger and nothing to hurry."""
        if writer is None:
            writer = self._ready.popleft()
        else:
            self._ready.remove(writer)
        if not self._ready:
            self._due, self._hurry = None, False
        return writer

    def hurry(self) -> None:
        """Called under `lock`: a writer in the ready queue holds a barrier or a close."""
        if not self._hurry:
            self._hurry = True
            self._wake()

    def _wake(self) -> None:
        self.wakes += 1
        if self._idle:
            self.lock.notify()
        elif self._threads < self.max_threads:
            self._threads += 1
            threading.Thread(target=self._run, name=f"murmurd-trace-{self._threads}", daemon=True).start()

    def unready(self, writer: TraceWriter) -> None:
        """Called under `lock`: `writer` leaves the ready queue (its caller writes it instead)."""
        self._dequeue(writer)

    def _requeue(self, writer: TraceWriter, urgent: bool) -> None:
        """Called under `lock` by a drain thread: `writer` got more items while it was written."""
        self._enqueue(writer)
        self._hurry = self._hurry or urgent

    def _wait(self, seconds: float) -> bool:
        self._idle += 1
        try:
            return self.lock.wait(seconds)
        finally:
            self._idle -= 1

    def _run(self) -> None:
        with self.lock:
            try:
                while True:
                    if not self._ready:
                        woken = self._wait(self.idle_seconds)
                        if not self._ready and not woken:  # a whole idle period: gone
                            return
                        continue
                    left = 0.0 if self._hurry or self._due is None else self._due - time.monotonic()
                    if left > 0:
                        self._lingering += 1
                        try:
                            self._wait(min(left, self.idle_seconds))
                        finally:
                            self._lingering -= 1
                        continue
                    writer = self._dequeue()
                    items = writer._take()
                    self.lock.release()
                    try:
                        writer._write_batch(items)
                    finally:
                        self.lock.acquire()
                    writer._done_batch()
            finally:
                self._threads -= 1


DEFAULT_DRAIN = TraceDrain()  # the process's trace threads (stateless between uses: no session's data)


class TraceWriter:
    def __init__(
        self, root: Path, rel: str, session_id: str, mirror: Callable[[dict[str, Any]], None] | None = None,
        *, drain: TraceDrain | None = None, fd: int | None = None, written: tuple[dict[str, Any], ...] = (),
    ) -> None:
        """Appends to `rel` beneath the workdir `root`; a symlink there is refused, never followed.
        With `fd`, the trace is that descriptor (the writer owns it): a file the runtime just
        created exclusively at `rel` and opened for appending, so nothing is walked again;
        `written`, the events another process put in it before (counted, mirrored)."""
        self._root, self._rel = root, rel
        self.session_id = session_id
        self._mirror = mirror  # e.g. OTel spans; never allowed to fail a write
        self._drain = drain or DEFAULT_DRAIN
        self._cond = self._drain.lock
        self._pending: deque[Any] = deque()  # events, barriers and _CLOSE, in order
        self._scheduled = False  # queued on the drain or being written by one of its threads
        self._writing = False  # a thread (a drain's, or one in flush_blocking) is writing a batch
        self._urgent = False  # a barrier or the close is among the queued items
        self._closing: concurrent.futures.Future[None] | None = None  # done once a queued close is written
        self._closed = False  # close() was called: no further event is taken
        self._failure: str | None = None  # the first failed write, named
        self._queued = len(written)  # events taken so far (`mark`)
        self._written = len(written)  # events in the file so far, flushed (only ever grows: read without the lock)
        for event in written:
            self._mirrored(event)
        if fd is not None:
            self._file: TextIO | None = workdir_fs.text_appender(fd)
            return
        try:
            self._file = workdir_fs.open_append_text(root, rel)
        except OSError as exc:
            raise TraceWriteError(f"cannot open trace {self.path}: {exc.strerror}") from exc

    @property
    def path(self) -> Path:
        """The trace file's path (for messages; the file itself is never reopened by name)."""
        return self._root / self._rel

    # -- the caller's side (any thread, the event loop included: nothing here blocks) ---------

    def write(self, event_type: str, **fields: Any) -> dict[str, Any]:
        """Queue one event; raises `TraceWriteError` once a write has failed or the trace is closed."""
        event = self._event(event_type, fields)
        self._put(event)
        self._mirrored(event)
        return event

    def write_through(self, event_type: str, **fields: Any) -> dict[str, Any]:
        """`write` and then `flush_blocking`, for a caller that may block (a worker thread). When
        nothing is queued and no drain thread has this trace, the line is written on the calling
        thread at once and no drain thread is woken for it; else it is queued behind what is
        there, and the barrier waits. `TraceWriteError` if it, or a line before it, failed."""
        event = self._event(event_type, fields)
        with self._cond:
            self._raise_if_failed()
            if self._closed:
                raise TraceWriteError(f"trace {self.path} is closed")
            mine = not self._scheduled
            if mine:  # claimed for this thread, as `_claim` does: the trace's only writer until `_unclaim`
                self._scheduled = self._writing = True
                self._queued += 1
            else:
                self._append(event)
        self._mirrored(event)
        if mine:
            try:
                self._write_batch([event])
            finally:
                self._unclaim()
            self._raise_if_failed()
        else:
            self.flush_blocking()
        return event

    def _event(self, event_type: str, fields: dict[str, Any]) -> dict[str, Any]:
        return stamped(self.session_id, event_type, fields)

    def _mirrored(self, event: dict[str, Any]) -> None:
        if self._mirror is not None:
            try:
                self._mirror(event)
            except Exception:  # noqa: BLE001 - observability must never end a session
                log.exception("trace mirror failed for %s", event["event_type"])

    def event(self, event_type: str, **fields: Any) -> dict[str, Any]:
        return self._event(event_type, fields)  # stamped now, not queued: for `TraceHandover.settle`

    def failed_elsewhere(self, event_type: str, why: str) -> None:
        """Another process could not write `event_type` here: the trace fails, as on a write of its own."""
        self._fail(event_type, OSError(why))

    def hand_over(self) -> TraceHandover | None:
        """Everything queued, taken for another process (`session/file_process.py`) to append with
        lines of the caller's own: the trace's only writer until the handover settles (what is
        written meanwhile queues behind). None while a drain thread writes it, or closed or failed."""
        with self._cond:
            if self._closed or self._failure is not None or self._file is None:
                return None
            if not self._scheduled:
                self._scheduled = self._writing = True
                items: list[Any] = []
            elif self._writing:
                return None
            else:
                self._drain.unready(self)  # scheduled and not being written: it waits there
                items = self._take()
        return TraceHandover(self, items)

    def mark(self) -> int:
        """How many events were taken so far: `flush_to(mark())` waits for those alone."""
        with self._cond:
            return self._queued

    async def flush_to(self, mark: int) -> None:
        """`flush`, unless the first `mark` events are in the file already (the drain wrote
        them since): then no barrier, and no thread is woken. `TraceWriteError` if one failed."""
        if self._written >= mark:
            self._raise_if_failed()
            return
        await self.flush()

    async def flush(self) -> None:
        """Wait until every event queued so far is written; `TraceWriteError` if one failed. Costs
        no thread hand-off when the drain has already written everything."""
        loop = asyncio.get_running_loop()
        closing = None
        with self._cond:
            if self._closed:
                barrier, closing = None, self._closing  # a close is queued: it is the barrier
            elif self._failure is not None or not (self._scheduled or self._pending):
                barrier = None  # nothing more will be written, or nothing is left to write
            else:
                barrier = loop.create_future()
                self._append((loop, barrier))
        if barrier is not None:
            await barrier
        elif closing is not None and not closing.done():
            await asyncio.wrap_future(closing)
        self._raise_if_failed()

    def flush_blocking(self, timeout: float | None = None) -> None:
        """`flush` for a caller that is not on an event loop (a worker thread). What is queued is
        written on the calling thread when no drain thread is writing this trace (`timeout` does
        not bound that: it is this thread's own file writes); else the caller waits (up to
        `timeout`) for the drain to write past its barrier."""
        items = self._claim()
        if items:  # a claim: this thread is the trace's only writer until _unclaim
            try:
                self._write_batch(items)
            finally:
                self._unclaim()
        elif items is None:
            barrier = self._barrier()
            if barrier is not None:
                barrier.result(timeout)
        self._raise_if_failed()

    async def aclose(self) -> None:
        """Write what is queued, then close the file. Never raises for a failed write. With
        nothing queued or being written, the file (its lines all flushed) is closed here, with no
        hand-off to a drain thread."""
        if self._close_idle():
            return
        done = self._close()
        if done is not None:
            await asyncio.wrap_future(done)

    def close(self, timeout: float | None = None) -> None:
        """`aclose` for a caller that is not on an event loop."""
        if self._close_idle():
            return
        done = self._close()
        if done is not None:
            done.result(timeout)

    @property
    def failure(self) -> str | None:
        return self._failure

    def _put(self, item: Any) -> None:
        with self._cond:
            self._raise_if_failed()
            if self._closed:
                raise TraceWriteError(f"trace {self.path} is closed")
            self._append(item)

    def _append(self, item: Any) -> None:
        """Called under the lock: queue `item`, and hand the writer to the drain if it has no
        thread; a barrier or the close hurries the drain (a line may wait for the linger)."""
        self._pending.append(item)
        urgent = not isinstance(item, dict)
        self._queued += not urgent
        self._urgent = self._urgent or urgent
        if not self._scheduled:
            self._scheduled = True
            self._drain.schedule(self, self._urgent)
        elif urgent and not self._writing:  # waiting in the ready queue: hurry it
            self._drain.hurry()

    def _claim(self) -> list[Any] | None:
        """Everything queued, taken off the drain for the calling thread to write ([]: nothing
        is queued, or nothing more will be written); None while a drain thread writes it or a
        close is queued (the caller waits on a barrier)."""
        with self._cond:
            if self._closed:
                return None  # a queued close is the barrier (`_barrier`)
            if self._failure is not None or not self._scheduled:
                return []
            if self._writing:
                return None
            self._drain.unready(self)  # scheduled and not being written: it waits there
            return self._take()

    def _unclaim(self) -> None:
        """After the calling thread's batch: to the drain if more was queued meanwhile."""
        with self._cond:
            self._writing = False
            if self._pending:
                self._drain.schedule(self, self._urgent)
            else:
                self._scheduled = False

    def _barrier(self) -> concurrent.futures.Future[None] | None:
        barrier: concurrent.futures.Future[None] = concurrent.futures.Future()
        with self._cond:
            if self._closed:
                return self._closing  # a close is queued (None: the file is closed): it is the barrier
            if self._failure is not None:
                return None  # nothing more will be written
            if not (self._scheduled or self._pending):
                return None  # everything queued is written
            self._append(barrier)
        return barrier

    def _close_idle(self) -> bool:
        """Close now if no drain thread has or will have this writer (True: closed, or was)."""
        with self._cond:
            if self._closed:
                return self._closing is None or self._closing.done()  # else wait for the queued close
            if self._scheduled or self._pending:
                return False
            self._closed = True
            file, self._file = self._file, None
        _close_file(file, self.path)
        return True

    def _close(self) -> concurrent.futures.Future[None] | None:
        done: concurrent.futures.Future[None] = concurrent.futures.Future()
        with self._cond:
            if self._closed:
                return self._closing  # closed by another caller: wait for its close too
            self._closed = True
            self._closing = done
            self._append(_CLOSE)
            self._append(done)
        return done

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise TraceWriteError(self._failure)

    # -- a drain thread ------------------------------------------------------------------------

    def _take(self) -> list[Any]:
        """Under the lock: everything queued, for one batch (its thread the trace's only writer)."""
        items = list(self._pending)
        self._pending.clear()
        self._writing, self._urgent = True, False
        return items

    def _done_batch(self) -> None:
        """Under the lock: back to the drain if more was queued meanwhile, else off it."""
        self._writing = False
        if self._pending:
            self._drain._requeue(self, self._urgent)
        else:
            self._scheduled = False

    def _write_batch(self, items: list[Any]) -> None:
        """The lines of a batch, one flush of the file before each barrier and at the end."""
        unflushed: str | None = None  # the first event written since the last flush
        written = 0
        for item in items:
            if isinstance(item, dict):
                written += 1
                if self._failure is None and self._file is not None:
                    unflushed = unflushed or item["event_type"]
                    try:
                        self._file.write(trace_line(item))
                    except Exception as exc:  # noqa: BLE001 - an unwritable event fails the trace, never the drain
                        self._fail(item["event_type"], exc)
                continue
            unflushed = self._flush_file(unflushed)
            self._written += written  # this batch's thread is the trace's only writer
            written = 0
            if item is _CLOSE:
                file, self._file = self._file, None
                _close_file(file, self.path)
            else:
                _release(item)
        self._flush_file(unflushed)
        self._written += written

    def _flush_file(self, unflushed: str | None) -> None:
        if unflushed is None or self._failure is not None or self._file is None:
            return None
        try:
            self._file.flush()
        except (OSError, ValueError) as exc:
            self._fail(unflushed, exc)
        return None

    def _fail(self, event_type: str, exc: Exception) -> None:
        with self._cond:
            self._failure = f"{TRACE_WRITE_FAILED}: cannot write {event_type} to trace {self.path}: {exc}"
        log.error("%s", self._failure)


class TraceHandover:
    """A trace's queued events, taken off its writer (`TraceWriter.hand_over`) for another process
    to append, followed by events of the caller's own; `settle` once that process has answered."""

    def __init__(self, writer: TraceWriter, items: list[Any]) -> None:
        self._writer, self._items, self._settled = writer, items, False
        self.events = [item for item in items if isinstance(item, dict)]

    @property
    def fd(self) -> int:
        """The trace's descriptor, for the other process (nothing is buffered: batches end flushed)."""
        assert self._writer._file is not None  # handed over open; nothing closes it meanwhile
        return self._writer._file.fileno()

    def text(self, extra: list[dict[str, Any]]) -> str:
        """The lines to append: the queued events', then `extra`'s."""
        return "".join(trace_line(event) for event in (*self.events, *extra))

    def settle(self, extra: list[dict[str, Any]], failure: str | None) -> None:
        """The other process answered: every line is in the file (counted, `extra` mirrored), or
        `failure` fails the trace as a write of its own would. The barriers taken are released,
        the writer goes back to its drain. Once only."""
        if self._settled:
            return
        self._settled = True
        writer = self._writer
        every = [*self.events, *extra]
        if failure is not None and every:
            writer._fail(every[0]["event_type"], OSError(failure))
        with writer._cond:
            writer._queued += len(extra)
        if failure is None:
            writer._written += len(every)  # this handover is the trace's only writer
        for event in extra:
            writer._mirrored(event)
        for item in self._items:
            if not isinstance(item, dict):
                _release(item)  # nothing else is queued among events: a close is never handed over
        writer._unclaim()

    def give_back(self, extra: list[dict[str, Any]] = ()) -> None:  # type: ignore[assignment]
        """Nothing was written: what was taken, then `extra`, goes back to the queue's head, ahead of a close."""
        if self._settled:
            return
        self._settled = True
        writer = self._writer
        with writer._cond:
            writer._pending.extendleft(reversed([*self._items, *extra]))
            writer._queued += len(extra)
            writer._urgent = writer._urgent or len(self.events) < len(self._items)
        for event in extra:
            writer._mirrored(event)
        writer._unclaim()


def _close_file(file: TextIO | None, path: Path) -> None:
    if file is not None:
        try:
            file.close()
        except (OSError, ValueError) as exc:
            log.warning("trace %s did not close cleanly: %s", path, exc)


def _release(barrier: Any) -> None:
    """Wake a barrier's waiter: a thread's future, or a future of the event loop it came from."""
    if isinstance(barrier, concurrent.futures.Future):
        try:
            barrier.set_result(None)
        except concurrent.futures.InvalidStateError:
            pass  # its waiter went away
        return
    loop, future = barrier
    try:
        loop.call_soon_threadsafe(_settle, future)
    except RuntimeError:
        pass  # the loop is closed: nobody waits any more


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
