"""Where a hook's faults go: a line in `logs/hook-<name>.log`, and a `hook_dispatch_error` event.

The log is the same file the hook's own stdout and stderr are appended to, so an operator reads
one file per hook; the line is written as the fault happens. A blocking hook's trace event
(`hook_name`, `event`, `arm`) is written when the fault happens too (`now=True`), so the trace
reads in the order things happened (an `on-session-start` fault comes before the task's first
inference, not after its last). An async hook's fault, found on a worker thread while the loop
goes on, is held (`hold=True`) and written just before the `session_end` it precedes (the
session calls `flush` there, and before `task_end`), as upstream writes every fault. At the
session's close (`on-session-end`, the final drain) no `session_end` follows, so those are
flushed after the last one, just before the trace closes. At `on-stage` there is no trace yet
and only the log line is written. Neither failing ever reaches the session: a hook cannot stop
it this way.
"""

from __future__ import annotations

import logging
import threading
import time

from murmurd import workdir_fs
from murmurd.workdir import Workdir, log_file
from murmurd.trace.writer import TraceWriteError, TraceWriter

log = logging.getLogger("murmurd.hooks")


def hook_log_name(hook: str) -> str:
    return f"hook-{hook}.log"


class HookLog:
    def __init__(self, workdir: Workdir, trace: TraceWriter | None = None, *, hold: bool = False) -> None:
        self.workdir = workdir
        self.trace = trace
        self.hold = hold
        self._held: list[tuple[str, str, str]] = []  # (hook, event, arm) not yet traced
        self._lock = threading.Lock()  # faults come from the loop and from hook worker threads

    def line(self, hook: str, text: str) -> None:
        """Append one `[murmurd]` line to `logs/hook-<hook>.log` (a refused log costs the line only)."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        try:
            rel = self.workdir.book(log_file(hook_log_name(hook)))  # every component checked, from the root
            workdir_fs.append_text(self.workdir.root, rel, f"[murmurd {stamp}] {text}\n")
        except OSError as exc:
            log.warning("logs/%s not written: %s", hook_log_name(hook), exc)

    def discarded(self, hook: str, handler: str, arm: str, reason: str, *, now: bool = False) -> None:
        """An arm the commit table does not honour here: the line names hook, handler and arm."""
        self.fault(hook, handler, arm, f"hook {hook}: {handler} returned {arm}, discarded: {reason}", now=now)

    def fault(self, hook: str, event: str, arm: str, text: str, *, now: bool = False) -> None:
        """A survivable fault: `text` goes to the hook's log, `hook_dispatch_error` to the trace
        (at once when `now` or not holding; else with the next `flush`)."""
        self.line(hook, text)
        if self.trace is None:
            return
        with self._lock:
            self._held.append((hook, event, arm))
        if now or not self.hold:
            self.flush()

    def flush(self) -> None:
        """Write the held `hook_dispatch_error` events, oldest first."""
        if self.trace is None:
            return
        with self._lock:
            held, self._held = self._held, []
        for hook, event, arm in held:
            try:
                self.trace.write("hook_dispatch_error", hook_name=hook, event=event, arm=arm)
            except TraceWriteError as exc:
                log.warning("hook_dispatch_error for %s not traced: %s", hook, exc)
