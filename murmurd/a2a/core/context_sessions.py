"""How long a context's disk outlives its tasks (issue 21 item 6): session workdirs and histories.

Above a bound of 1 each context runs in a session workdir of its own (`ses_…`, beside the
daemon's). A closed context session's workdir is removed once the context's last task has left
the task store (retention pruned it), and at most `keep` closed ones are kept in any case (the
least recently closed go first), so no caller fills the disk by opening contexts. A context whose
last task left also loses its stored conversation: the history file in the daemon's workdir,
then the store's record of the context (its members and, on PostgreSQL, its history row), in
that order, so a history never outlives the record of whose it is.

The index of context sessions lives in the state directory, `context-sessions/<session id>`
holding the context id (murmurd's own file: no guest reaches the state directory), its mtime the
session's last close: it survives a restart, so a workdir left by an earlier daemon still goes.
`SessionIndex` does blocking I/O (call it off the loop); `doomed` is the pure rule.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from murmurd import workdir_fs
from murmurd.session.own_thread import on_own_thread

logger = logging.getLogger("murmurd.a2a")

DEFAULT_KEEP = 256  # closed context session workdirs kept at most (`serve --keep-context-sessions`)
INDEX_DIR = "context-sessions"
SWEEP_INTERVAL_SECS = 60.0  # a sweep at least this often (and whenever a task ends or a session closes)
# ... and at most this often: the wakes of a busy daemon (a task end, a session close each) wait
# for the next sweep together instead of sweeping back to back (issue 29: per-task CPU).
MIN_SWEEP_GAP_SECS = 0.5
ORPHANS_PER_SWEEP = 500
_SESSION_ID = re.compile(r"ses_[0-9a-f]{32}")
_MAX_CONTEXT_ID_BYTES = 16 * 1024 * 1024  # an id is bounded by the request body, never by this


@dataclass(frozen=True)
class ContextSession:
    session_id: str
    context_id: str
    closed_at: float  # seconds since the epoch: the session's last close (or its opening)


def doomed(closed: list[ContextSession], gone: set[str], keep: int | None) -> list[str]:
    """The closed sessions to remove (pure): those of a context in `gone` (no task left in the
    store), then beyond the `keep` most recently closed of the rest."""
    out = [c.session_id for c in closed if c.context_id in gone]
    rest = sorted((c for c in closed if c.context_id not in gone), key=lambda c: (c.closed_at, c.session_id),
                  reverse=True)
    if keep is not None:
        out += [c.session_id for c in rest[keep:]]
    return out


class SessionIndex:
    """Which context each session workdir beside the daemon's belongs to (blocking file I/O).

    The directory is read once (what an earlier daemon left); from then on this daemon's own
    `record` / `closed` / `remove` keep a copy in memory, so a sweep reads no file (`entries`
    answers from it without blocking once `loaded`)."""

    def __init__(self, index_dir: Path, workdirs: Path) -> None:
        self.index_dir = Path(index_dir)
        self.workdirs = Path(workdirs)  # where the `ses_…` directories are
        self._known: dict[str, ContextSession] = {}  # recorded here, and (once loaded) what the directory held
        self._loaded = False
        self._lock = threading.Lock()  # record and settle run on worker threads, closed and a sweep on the loop
        self._made = False
        self._untouched: set[str] = set()  # closed since the last `settle`: their mtime not yet written

    @property
    def loaded(self) -> bool:
        """`entries` answers from memory (no file read, safe on the loop)."""
        return self._loaded

    def record(self, session_id: str, context_id: str) -> None:
        if not self._made:
            self.index_dir.mkdir(parents=True, exist_ok=True)
            self._made = True
        workdir_fs.write_text(self.index_dir, session_id, context_id)
        self._remember(ContextSession(session_id, context_id, time.time()))

    def recorded(self, session_id: str, context_id: str) -> None:
        """The file process wrote the session's entry (`session/file_process.py`): kept in memory."""
        self._remember(ContextSession(session_id, context_id, time.time()))

    def closed(self, session_id: str) -> None:
        """The session closed now (the keep bound removes the least recently closed first): in
        memory at once, on disk (its entry's mtime) with the next `settle` (no I/O here)."""
        with self._lock:
            known = self._known.get(session_id)
            self._untouched.add(session_id)
        if known is not None:
            self._remember(ContextSession(session_id, known.context_id, time.time()))

    def settle(self, session_ids: list[str]) -> int:
        """Blocking: the close times held since the last call, written (what a restarted daemon
        orders the keep bound by), then each of `session_ids` removed; how many went."""
        with self._lock:
            untouched, self._untouched = self._untouched, set()
        for session_id in sorted(untouched - set(session_ids)):
            try:
                os.utime(self.index_dir / session_id, follow_symlinks=False)
            except FileNotFoundError:
                pass
            except OSError as exc:
                logger.warning("the close time of context session %s could not be recorded: %s", session_id, exc)
        return _remove_all(self, session_ids)

    @property
    def unsettled(self) -> bool:
        """Close times are held that `settle` has not written yet."""
        return bool(self._untouched)

    def _remember(self, entry: ContextSession) -> None:
        with self._lock:
            self._known[entry.session_id] = entry

    def entries(self) -> list[ContextSession]:
        if not self._loaded:
            found = self._read()
            with self._lock:
                if not self._loaded:
                    for entry in found:  # what this daemon recorded meanwhile is newer
                        self._known.setdefault(entry.session_id, entry)
                    self._loaded = True
        with self._lock:
            return sorted(self._known.values(), key=lambda e: e.session_id)

    def _read(self) -> list[ContextSession]:
        try:
            names = sorted(os.listdir(self.index_dir))
        except FileNotFoundError:
            return []
        found = []
        for name in names:
            if not _SESSION_ID.fullmatch(name):
                continue
            try:
                context_id = workdir_fs.read_text(self.index_dir, name, max_bytes=_MAX_CONTEXT_ID_BYTES)
                closed_at = os.stat(self.index_dir / name, follow_symlinks=False).st_mtime
            except (OSError, ValueError):
                continue
            found.append(ContextSession(name, context_id, closed_at))
        return found

    def remove(self, session_id: str) -> None:
        """The session's workdir, then its index entry (a failure leaves the entry for the next sweep)."""
        if not _SESSION_ID.fullmatch(session_id):
            raise ValueError(f"not a session id: {session_id!r}")
        workdir_fs.remove_tree(self.workdirs, session_id)
        workdir_fs.unlink(self.index_dir, session_id)
        with self._lock:
            self._known.pop(session_id, None)


class WorkdirRetention:
    """Sweeps what `doomed` names and the histories of contexts with no task left; woken when a
    task ends or a context session closes, and every `interval` seconds."""

    def __init__(self, store: Any, index: SessionIndex | None, *, keep: int | None,
                 live_sessions: Callable[[], set[str]], busy_contexts: Callable[[], set[str]],
                 forget_history_file: Callable[[str], None], interval: float = SWEEP_INTERVAL_SECS,
                 min_gap: float = MIN_SWEEP_GAP_SECS) -> None:
        self.store = store
        self.index = index
        self.keep = keep
        self._live_sessions = live_sessions
        self._busy_contexts = busy_contexts
        self._forget_history_file = forget_history_file
        self.interval = interval
        self.min_gap = min_gap
        self._wanted = asyncio.Event()
        self.sweeps = 0

    def wake(self) -> None:
        self._wanted.set()

    async def run(self) -> None:
        """Sweep at once (what an earlier daemon left), then whenever woken (coalesced, at most
        once per `min_gap`) and every `interval` seconds, until cancelled."""
        self._wanted.set()
        while True:
            try:
                async with asyncio.timeout(self.interval):
                    await self._wanted.wait()
            except TimeoutError:
                pass
            self._wanted.clear()
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception:  # a failed sweep is tried again on the next one; it never stops serving
                logger.exception("removing the workdirs of finished contexts failed")
            await asyncio.sleep(self.min_gap)  # what wakes it meanwhile waits for the next sweep

    async def settle(self) -> None:
        """The close times held in memory, written now (the daemon stops: no sweep follows)."""
        if self.index is not None and self.index.unsettled:
            await asyncio.to_thread(self.index.settle, [])

    async def sweep(self) -> int:
        """One pass; how many session workdirs went."""
        self.sweeps += 1
        busy = self._busy_contexts()
        gone: set[str] = set()
        removed = 0
        if self.index is not None:
            live = self._live_sessions()
            index = self.index
            entries = index.entries() if index.loaded else await asyncio.to_thread(index.entries)
            closed = [e for e in entries if e.session_id not in live and e.context_id not in busy]
            contexts = {e.context_id for e in closed}
            gone = contexts - await self.store.contexts_with_tasks(contexts)  # one store call
            going = doomed(closed, gone, self.keep)
            if going or index.unsettled:  # the close times and every removal in one hand-off, on a
                # thread of its own: a guest's workdir may hold a million files, and the loop's
                # executor is for short work (one sweep at a time: one such thread)
                removed = await on_own_thread(index.settle, going)
        orphans = set(await self.store.orphaned_contexts(ORPHANS_PER_SWEEP)) | gone
        for context_id in orphans - busy:
            try:
                await asyncio.to_thread(self._forget_history_file, context_id)
            except OSError as exc:  # its record stays: the history file must go first
                logger.warning("the history of context %s could not be removed: %s", context_id, exc)
                continue
            await self.store.forget_context(context_id)
        return removed


def _remove_all(index: SessionIndex, session_ids: list[str]) -> int:
    """Remove each session's workdir and entry (blocking); how many went. A failure is logged
    and leaves that one for the next sweep."""
    removed = 0
    for session_id in session_ids:
        try:
            index.remove(session_id)
            removed += 1
        except OSError as exc:
            logger.warning("session workdir %s could not be removed: %s", session_id, exc)
    return removed


def recorder(index: SessionIndex | None) -> tuple[Callable[[str, str], None],
                                                   Callable[[str], Awaitable[None]]]:
    """The daemon's callbacks: a context session opened (recorded, blocking: called on the thread
    that opens the session, so the open and its record are one hand-off), one closed (its close
    time, in memory until the next sweep). A failed record is logged, never the task's."""

    def opened(session_id: str, context_id: str) -> None:
        if index is None:
            return
        try:
            index.record(session_id, context_id)
        except OSError:
            logger.exception("recording context session %s failed", session_id)

    async def closed(session_id: str) -> None:
        if index is not None:
            index.closed(session_id)  # in memory: the next sweep writes it, in its own hand-off

    return opened, closed
