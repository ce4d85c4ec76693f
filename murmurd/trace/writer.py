"""`TraceWriter`: the one writer of a session's `trace.jsonl` (runtime-notes §7).

Every event gets `event_type`, `session_id` and `timestamp` (Unix ms) when it is written, and is
appended as one JSON line, flushed per event, by the writer's own thread: `write` only queues
the event (callers on the event loop never touch the file), so the lines keep the order of the
`write` calls. `flush` is the barrier: it returns once every event queued before it is in the
file, so a reader of `trace.jsonl` after a task or a session ends sees every line.

A failed write is sticky: the writer stops writing, and every later `write` or `flush` raises
`TraceWriteError` naming the event that could not be written ("E-RUN-007: cannot write
task_start to trace ..."). The session decides what that means (it ends the session for every event but
`compaction`).
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


def trace_line(event: dict[str, Any]) -> str:
    return json.dumps(event, ensure_ascii=False, separators=(",", ":"), default=str) + "\n"


class TraceWriter:
    def __init__(
        self, root: Path, rel: str, session_id: str, mirror: Callable[[dict[str, Any]], None] | None = None
    ) -> None:
        """Appends to `rel` beneath the workdir `root`; a symlink there is refused, never followed."""
        self.path = root / rel
        self.session_id = session_id
        self._mirror = mirror  # e.g. OTel spans; never allowed to fail a write
        self._cond = threading.Condition()
        self._pending: deque[Any] = deque()  # events, barriers (futures) and _CLOSE, in order
        self._draining = False  # a writer thread is running
        self._closed = False  # close() was called: no further event is taken
        self._failure: str | None = None  # the first failed write, named
        try:
            self._file: TextIO | None = workdir_fs.open_append_text(root, rel)
        except OSError as exc:
            raise TraceWriteError(f"cannot open trace {self.path}: {exc.strerror}") from exc

    # -- the caller's side (any thread, the event loop included: nothing here blocks) ---------

    def write(self, event_type: str, **fields: Any) -> dict[str, Any]:
        """Queue one event; raises `TraceWriteError` once a write has failed or the trace is closed."""
        event = {"event_type": event_type, "session_id": self.session_id, "timestamp": int(time.time() * 1000)}
        keep = ALWAYS_PRESENT.get(event_type, frozenset())
        event.update({k: v for k, v in fields.items() if v is not None or k in keep})
        self._put(event)
        if self._mirror is not None:
            try:
                self._mirror(event)
            except Exception:  # noqa: BLE001 - observability must never end a session
                log.exception("trace mirror failed for %s", event_type)
        return event

    async def flush(self) -> None:
        """Wait (off the loop) until every event queued so far is written; `TraceWriteError` if one failed."""
        barrier = self._barrier()
        if barrier is not None:
            await asyncio.shield(asyncio.wrap_future(barrier))
        self._raise_if_failed()

    def flush_blocking(self, timeout: float | None = None) -> None:
        """`flush` for a caller that is not on an event loop (a worker thread)."""
        barrier = self._barrier()
        if barrier is not None:
            barrier.result(timeout)
        self._raise_if_failed()

    async def aclose(self) -> None:
        """Write what is queued, then close the file. Never raises for a failed write."""
        done = self._close()
        if done is not None:
            await asyncio.shield(asyncio.wrap_future(done))

    def close(self, timeout: float | None = None) -> None:
        """`aclose` for a caller that is not on an event loop."""
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
            self._pending.append(item)
            self._wake()

    def _barrier(self) -> concurrent.futures.Future[None] | None:
        barrier: concurrent.futures.Future[None] = concurrent.futures.Future()
        with self._cond:
            if self._closed or self._failure is not None:
                return None  # nothing more will be written
            self._pending.append(barrier)
            self._wake()
        return barrier

    def _close(self) -> concurrent.futures.Future[None] | None:
        done: concurrent.futures.Future[None] = concurrent.futures.Future()
        with self._cond:
            if self._closed:
                return None
            self._closed = True
            self._pending.append(_CLOSE)
            self._pending.append(done)
            self._wake()
        return done

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise TraceWriteError(self._failure)

    def _wake(self) -> None:
        """Called under the lock: start the writer thread, or wake the one waiting."""
        if self._draining:
            self._cond.notify()
            return
        self._draining = True
        threading.Thread(target=self._drain, name=f"trace-{self.session_id}", daemon=True).start()

    # -- the writer thread ---------------------------------------------------------------------

    def _drain(self) -> None:
        while True:
            with self._cond:
                if not self._pending:
                    self._cond.wait(IDLE_SECONDS)
                if not self._pending:
                    self._draining = False
                    return
                item = self._pending.popleft()
            self._handle(item)

    def _handle(self, item: Any) -> None:
        if isinstance(item, concurrent.futures.Future):
            try:
                item.set_result(None)
            except concurrent.futures.InvalidStateError:
                pass  # its waiter went away
        elif item is _CLOSE:
            file, self._file = self._file, None
            if file is not None:
                try:
                    file.close()
                except (OSError, ValueError) as exc:
                    log.warning("trace %s did not close cleanly: %s", self.path, exc)
        elif self._failure is None and self._file is not None:
            try:
                self._file.write(trace_line(item))
                self._file.flush()
            except (OSError, ValueError) as exc:
                with self._cond:
                    self._failure = f"{TRACE_WRITE_FAILED}: cannot write {item['event_type']} to trace {self.path}: {exc}"
                log.error("%s", self._failure)
