"""The daemon's record keeping: a task's states stored, counted and published; its end stored
even when the store refuses the full record; a threaded context's history read and written.

`Records` is one side of `CapsuleDaemon` (murmurd.a2a.core.daemon), with no state of its own.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from murmurd import workdir_fs
from murmurd.outlast import outlasting_cancels
from murmurd.a2a.core.intake import ContextRefused, TaskIdTaken
from murmurd.a2a.core.tasks import TaskRecord, TaskState, now_ms
from murmurd.a2a.core.tenancy import CONTEXT_REFUSED
from murmurd.a2a.stores.base import CONTEXT_FOREIGN, ID_TAKEN
from murmurd.session.history import read_history
from murmurd.session.messages import Message
from murmurd.session.session import TaskOutcome
from murmurd.trace.writer import TraceWriteError
from murmurd.workdir import history_file, task_result_file
from murmurd.text import json_text

logger = logging.getLogger("murmurd.a2a")


class HistoryUnreadable(RuntimeError):
    """A threaded context's stored history is refused (a symlink, bad JSON): its task fails."""


class Records:
    async def _finish(self, record: TaskRecord, state: TaskState, message: str | None) -> None:
        """The task's terminal state, stored and published (its blocked callers woken). Refused
        as another daemon's (`put` False: nothing published), its callers are woken here; when
        the store raises, the caller falls back to a brief record (`_finish_quietly`, which wakes
        them once it is stored) or wakes them itself."""
        await self._trace_settled(record.id)  # before the record says it ended: no await between
        record.state = state
        record.status_message = message
        # From here the record says it ended: its end is stored and published even when the run
        # is cancelled meanwhile (a stop past its grace); the cancel is raised after.
        _, interrupted = await outlasting_cancels(self._store_end(record))
        if interrupted:
            raise asyncio.CancelledError

    async def _store_end(self, record: TaskRecord) -> None:
        published = await self._save(record, final=True)
        self._records.pop(record.id, None)
        if not published:
            self._waiters.wake(record.id)

    async def _trace_settled(self, task_id: str) -> None:
        """The daemon's lines about a task that ran (its arrival, its session) are in its trace
        before its end is stored: a reader that sees the task ended finds them. By the end they
        are written as a rule (the drain lingers less than a task takes), so this costs no
        barrier. `TraceWriteError` when the daemon's trace failed: the task fails with it."""
        mark = self._trace_marks.get(task_id)
        if mark is None:
            return
        try:
            await self.session.trace.flush_to(mark)
        except TraceWriteError:
            self._trace_marks.pop(task_id, None)
            raise
        self._trace_marks.pop(task_id, None)  # kept while it waits: a cancel there leaves it to the next end

    async def _save(self, record: TaskRecord, *, final: bool, new: bool = False, exclusive: bool = False) -> bool:
        """Store, count and publish the record's state; False (nothing published) when the store
        refused it as not this daemon's to write (`TaskStore.put`). `new`: the task's first
        write, one atomic insert that raises TaskIdTaken when its id exists (and with
        `exclusive`, ContextRefused when its context has another credential's tasks), leaving
        whatever is stored untouched."""
        record.updated_at = now_ms()
        if new:
            refusal = await self.store.create(record, exclusive_context=exclusive)
            if refusal == ID_TAKEN:
                raise TaskIdTaken(record.id)
            if refusal == CONTEXT_FOREIGN:
                raise ContextRefused(CONTEXT_REFUSED.format(record.context_id))
        elif await self.store.put(record) is False:
            return False
        await self._announce(record, final=final)
        return True

    async def _announce(self, record: TaskRecord, *, final: bool) -> None:
        """Count and publish a state the store holds now; wake whoever waits on it."""
        self.metrics.task_changed(record)
        self.task_log.changed(record)
        self.log.publish("status", record.id, record.status_frame(final), final=final)
        if final:
            self.retention.wake()  # retention may have pruned a context's last task
        self._waiters.wake(record.id)

    async def _finish_quietly(self, record: TaskRecord, state: TaskState, message: str) -> None:
        """`_finish` for a run's own exit paths: a store failure cannot escape into it."""
        self._traceparents.pop(record.id, None)
        try:
            await self._finish(record, state, message)
        except Exception:
            logger.exception("task %s: the %s state could not be stored", record.id, state.value)
            record.state, record.status_message = state, message  # `_finish` may have failed before it set them
            await self._store_brief(record)

    async def _fail_unexpectedly(self, record: TaskRecord, message: str) -> None:
        """Fail a task after an unexpected error. If the store refuses the full record, a brief
        one (id, context, state, message) is stored so `tasks/get` never reports a stale state;
        the failure is published either way (streams close, blocked callers return)."""
        await self._finish_quietly(record, TaskState.FAILED, message)

    async def _store_brief(self, record: TaskRecord) -> None:
        """Store the terminal state without history, artifacts or result (what the store refused
        is one of those); publish it and wake waiters whatever happens."""
        brief = record.brief()
        try:
            await self.store.put(brief)
        except Exception:
            logger.exception("task %s: not even its brief %s record could be stored", record.id, record.state.value)
            self.coordination.end_unrecorded(record)  # kept for later, or let go
        self.metrics.task_changed(brief)
        self.task_log.changed(brief)
        self._records.pop(record.id, None)
        self.log.publish("status", record.id, record.status_frame(True), final=True)
        self._waiters.wake(record.id)

    def _forget_history_file(self, context_id: str) -> None:
        """Remove `contexts/<context>/` (its history, off the loop) from the daemon's workdir."""
        home = self.staged.history_workdir
        workdir_fs.remove_tree(home.root, home.book(history_file(context_id).rsplit("/", 1)[0]))

    async def _history(self, context_id: str) -> list[Message]:
        """The context's history: from the store where it keeps them (a shared store:
        whichever daemon ran the context before), else from the workdir file (off the loop)."""
        if self.policy.conversation != "threaded":
            return []
        stored = await self.store.load_history(context_id)
        if stored is None:
            return await asyncio.to_thread(self._load_history, context_id)
        try:
            return [Message(**m) for m in stored]
        except TypeError as exc:
            raise HistoryUnreadable(f"the stored history of context {context_id!r} cannot be read: {exc}") from None

    def _load_history(self, context_id: str) -> list[Message]:
        """The context's stored history (threaded only); `HistoryUnreadable` when it is refused."""
        if self.policy.conversation != "threaded":
            return []
        try:
            return read_history(self.staged, context_id)
        except (OSError, ValueError, TypeError) as exc:
            rel = history_file(context_id)
            raise HistoryUnreadable(f"the history of context {context_id!r} ({rel}) cannot be read: {exc}") from None

    def _record_conversation(self, record: TaskRecord, outcome: TaskOutcome) -> str | None:
        """Threaded capsules keep the context's history (after a successful task only).
        Returns why a file could not be written (the task then fails), else None."""
        if self.policy.conversation != "threaded":
            return None
        root, book = self.staged.history_workdir.root, self.staged.history_workdir.book
        try:
            text = outcome.result_text if outcome.delivered else f"error: {outcome.error}"
            workdir_fs.write_text(root, book(task_result_file(record.id)), text)
            if outcome.delivered:
                workdir_fs.write_text(root, book(history_file(record.context_id)), json_text(stored_history(outcome)))
        except OSError as exc:
            return f"cannot record the conversation: {exc}"
        return None



def stored_history(outcome: TaskOutcome) -> list[dict[str, Any]]:
    """The conversation a threaded context keeps: every message but this task's seeded ones."""
    return [dict(m.__dict__) for m in outcome.messages if m.id not in outcome.seeded_ids]


def leave_input_required(record: TaskRecord) -> None:
    """A reply arrived: the task works again (saved and published by the worker)."""
    record.state = TaskState.WORKING
    record.artifacts = []
    record.status_message = None
