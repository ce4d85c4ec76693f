"""The log written by a thread of its own: the caller only queues the record.

Why (issue 29): the daemon logs two lines per task (`murmurd.tasks`) from the event loop, and a
`StreamHandler` formats and writes each one there, a `write(2)` per line into a pipe whose reader
(journald, a supervisor, a test) the kernel wakes every time. Under load that was a tenth of the
loop's time, and a reader that falls behind fills the pipe and stops the loop outright. Here the
caller's part is a copy of the record with its message and exception rendered (what may change
or die with the caller's frames); the writer thread formats what is queued and writes it with
one `write`, so many lines cost one system call and the loop never waits on stderr. Woken from
idle by a line, the writer lets the lines of the next `LINGER_SECONDS` join it: a busy daemon's
lines then wake it a hundred times a second at most, not once each (each wake-up a thread
switch, and the interpreter lock handed over: issue 29's eighth sitting). A backlog is written
without a linger (as fast as before), and a warning or worse, a `flush` or the close cuts a
linger short: the line before a crash is not the one held back.

One writer owns the stream, so its lines keep their order and are never cut: `QueuedStderr`
stands in for `sys.stderr` once `logsetup.configure` installed the log, and queues what anyone
prints there (the serve banner, a last error, a traceback) in whole lines, in order with the
log's. On a file descriptor each `write` holds whole lines and at most `PIPE_BUF` bytes (one
longer line alone), so what another process sharing the descriptor writes (a WASM worker) lands
between lines.

Bounded: past `max_pending` lines or `max_pending_bytes` queued (a reader that stopped reading)
a line is dropped, and a warning record where the lines went missing says how many. `flush()`
waits (bounded) until everything queued before it is written; `logging.shutdown` calls it at
exit. A forked child gets a queue, locks and writer of its own.
"""

from __future__ import annotations

import io
import logging
import os
import select
import threading
import weakref
from queue import Empty, SimpleQueue
from typing import Any, TextIO

from murmurd.workdir_fs import write_all

MAX_BATCH = 512  # lines written with one `write`
MAX_PENDING = 10_000  # lines queued and not yet written; past it a line is dropped, and counted
MAX_PENDING_BYTES = 16 * 1024 * 1024  # the same, in (roughly counted) bytes
RECORD_BYTES = 256  # what a record counts against MAX_PENDING_BYTES besides its message and traceback
LINGER_SECONDS = 0.01  # a line waits this long at most for the lines that follow it, to share its write
FLUSH_SECONDS = 5.0  # how long `flush` and `close` wait for the writer (a reader that stopped reading)
DROPPED_LOGGER = "murmurd.log"


class _Dropped:
    """Where lines were dropped, queued after the last line kept: the writer says how many."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 1


_Item = logging.LogRecord | str | _Dropped | threading.Event | None  # str: text written as it is


class BackgroundStreamHandler(logging.Handler):
    def __init__(self, stream: TextIO, *, max_pending: int = MAX_PENDING,
                 max_pending_bytes: int = MAX_PENDING_BYTES) -> None:
        super().__init__()
        self.stream = stream
        self.max_pending = max_pending
        self.max_pending_bytes = max_pending_bytes
        self.closed = False
        self._reset()
        self_ref = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: (handler := self_ref()) is not None and handler._reset())

    def _reset(self) -> None:
        """A queue and no writer yet (a forked child's: the parent's thread is not there, and a
        lock it held at the fork would never be released)."""
        self._queue: SimpleQueue[_Item] = SimpleQueue()
        self._hurry = threading.Event()  # cuts a linger short: a warning, a flush, the close
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._count_lock = threading.Lock()
        self._pending = 0  # lines queued, not yet written (under `_count_lock`)
        self._pending_bytes = 0
        self._dropping: _Dropped | None = None  # the mark lines are dropped at now, if any

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if self.closed:  # after `logging.shutdown`: no thread to start at the exit, written here
                self.stream.write(self.format(record) + "\n")
                self.stream.flush()
                return
            self._enqueue(self._prepared(record))
        except Exception:  # noqa: BLE001 - as every handler: a failed record never fails its caller
            self.handleError(record)

    def queue_text(self, text: str) -> None:
        """`text` written as it is (a newline included or not), in order with the records."""
        self._enqueue(text)

    def _enqueue(self, item: logging.LogRecord | str) -> None:
        size = _cost(item)
        with self._count_lock:
            if self._pending >= self.max_pending or self._pending_bytes + size > self.max_pending_bytes:
                if self._dropping is not None:
                    self._dropping.count += 1
                    return
                self._dropping = _Dropped()
                self._queue.put(self._dropping)  # the mark takes the line's place, after every line kept
                return
            self._dropping = None
            self._pending += 1
            self._pending_bytes += size
            self._queue.put(item)  # under the lock: a mark never overtakes a line kept before it
        if _urgent(item):
            self._hurry.set()  # a warning is not kept waiting by a linger (the process may die next)
        if self._thread is None:
            self._start_writer()

    def _prepared(self, record: logging.LogRecord) -> logging.LogRecord:
        """A copy with what may change or die with the caller rendered now: the message with
        its arguments, and the exception's traceback (its frames). The original is left as it
        is for the other handlers."""
        ready = logging.LogRecord.__new__(logging.LogRecord)
        ready.__dict__.update(record.__dict__)
        ready.msg, ready.args = record.getMessage(), None
        if record.exc_info:
            if not ready.exc_text:
                ready.exc_text = (self.formatter or logging.Formatter()).formatException(record.exc_info)
            ready.exc_info = None
        return ready

    def _start_writer(self) -> None:
        with self._start_lock:
            if self._thread is None:
                thread = threading.Thread(target=self._write_queued, args=(self._queue,),
                                          name="murmurd-log", daemon=True)
                thread.start()
                self._thread = thread

    def _write_queued(self, queue: SimpleQueue[_Item]) -> None:
        while True:
            try:
                batch = [queue.get_nowait()]  # a backlog: written at once, as fast as it can go
            except Empty:
                batch = [queue.get()]  # woken from idle: what comes within the linger joins this write
                if not _urgent(batch[0]):
                    self._hurry.wait(LINGER_SECONDS)
            self._hurry.clear()
            while len(batch) < MAX_BATCH:
                try:
                    batch.append(queue.get_nowait())
                except Empty:
                    break
            self._write([item for item in batch if isinstance(item, (logging.LogRecord, str, _Dropped))])
            for item in batch:
                if isinstance(item, threading.Event):
                    item.set()  # a `flush`: everything queued before it is written
            if None in batch:  # `close`
                return

    def _write(self, items: list[logging.LogRecord | str | _Dropped]) -> None:
        texts: list[str] = []
        kept = [item for item in items if not isinstance(item, _Dropped)]
        with self._count_lock:  # what was counted when queued, however its writing goes
            self._pending -= len(kept)
            self._pending_bytes -= sum(_cost(item) for item in kept)
        for item in items:
            if isinstance(item, _Dropped):
                with self._count_lock:
                    count = item.count
                    if self._dropping is item:  # no line dropped at this mark after now
                        self._dropping = None
                item = _dropped_record(count)
            try:
                texts.append(item if isinstance(item, str) else self.format(item) + "\n")
            except Exception:  # noqa: BLE001
                self.handleError(item)
        if texts:
            self._write_texts(texts, items)

    def _write_texts(self, texts: list[str], items: list[Any]) -> None:
        try:
            fd = self._descriptor()
            if fd is None:
                self.stream.write("".join(texts))
                self.stream.flush()
            else:
                encoding = getattr(self.stream, "encoding", None) or "utf-8"
                errors = getattr(self.stream, "errors", None) or "backslashreplace"
                for chunk in _whole_lines([text.encode(encoding, errors) for text in texts]):
                    write_all(fd, chunk)
        except Exception:  # noqa: BLE001 - a closed or broken stream: reported as logging does
            last = next((item for item in reversed(items) if isinstance(item, logging.LogRecord)), None)
            if last is not None:
                self.handleError(last)

    def _descriptor(self) -> int | None:
        """The stream's file descriptor (None for a stream without one)."""
        try:
            return self.stream.fileno()
        except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
            return None

    def flush(self) -> None:
        """Wait until everything queued before this call is written (at most FLUSH_SECONDS)."""
        thread = self._thread
        if thread is None or not thread.is_alive() or thread is threading.current_thread():
            return
        written = threading.Event()
        self._queue.put(written)
        self._hurry.set()
        written.wait(FLUSH_SECONDS)

    def close(self) -> None:
        """Write what is queued and stop the writer; what comes after is written at once."""
        with self._start_lock:
            self.closed = True
            thread, self._thread = self._thread, None
            if thread is not None:
                self._queue.put(None)
                self._hurry.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(FLUSH_SECONDS)
        super().close()


def _urgent(item: _Item) -> bool:
    """Written without a linger: a record of a warning or worse, a flush, the close."""
    if isinstance(item, logging.LogRecord):
        return item.levelno >= logging.WARNING
    return not isinstance(item, (str, _Dropped))


class QueuedStderr(io.TextIOBase):
    """`sys.stderr` while the log is written by `handler`: what is printed goes to its queue in
    whole lines (each thread's unfinished line is kept until its newline, or a `flush`), so one
    writer owns the descriptor and nothing printed is cut by, or overtakes, a log line."""

    def __init__(self, handler: BackgroundStreamHandler, original: TextIO) -> None:
        super().__init__()
        self.handler = handler
        self.original = original
        self._partial: dict[int, str] = {}  # thread -> its text after its last newline
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        if self.handler.closed:
            written = self.original.write(text)
            self.original.flush()
            return written
        ident = threading.get_ident()
        with self._lock:
            pending = self._partial.pop(ident, "") + text
            cut = pending.rfind("\n") + 1
            if cut < len(pending):
                self._partial[ident] = pending[cut:]
        if cut:
            self.handler.queue_text(pending[:cut])
        return len(text)

    def flush(self) -> None:
        """This thread's unfinished line is written as it is (a prompt, a progress dot)."""
        with self._lock:
            pending = self._partial.pop(threading.get_ident(), "")
        if pending:
            self.handler.queue_text(pending)

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.original.fileno()

    def isatty(self) -> bool:
        return self.original.isatty()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.original.encoding

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return self.original.errors


def _cost(item: logging.LogRecord | str) -> int:
    """What a queued item counts against MAX_PENDING_BYTES (roughly its size)."""
    if isinstance(item, str):
        return len(item)
    return len(item.msg) + len(item.exc_text or "") + RECORD_BYTES


def _dropped_record(count: int) -> logging.LogRecord:
    return logging.LogRecord(DROPPED_LOGGER, logging.WARNING, __file__, 0,
                             f"{count} log lines dropped here: stderr was not read as fast as they came",
                             None, None)


def _whole_lines(texts: list[bytes]) -> list[bytes]:
    """`texts` joined into writes of at most PIPE_BUF bytes each (one longer text alone)."""
    chunks: list[bytes] = []
    current: list[bytes] = []
    size = 0
    for text in texts:
        if current and size + len(text) > select.PIPE_BUF:
            chunks.append(b"".join(current))
            current, size = [], 0
        current.append(text)
        size += len(text)
    if current:
        chunks.append(b"".join(current))
    return chunks
