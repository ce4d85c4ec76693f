"""The sessions a served capsule's tasks run in: one shared session, or one per context.

With a bound of 1 every task runs in the daemon's own session (upstream: one workdir, one trace,
one set of hook instances). With a larger bound each context gets a session of its own, so two
tasks running at once never share a workdir, a trace, continuation state, counters or hook
instances: it is opened when the context's first task starts, kept while the context has a task
and `idle_secs` after its last one (a threaded conversation keeps its hooks and continuation),
then closed (`on-session-end`, hook instances freed, trace closed; no line of its own is
written, as each attempt of a task wrote its own `session_start` / `session_end`). When the
pool is full, the least recently used idle session is closed first. `on_open` / `on_close` hear of
each context session (murmurd.a2a.core.context_sessions removes a closed one's workdir in time).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from murmurd.a2a.peers.peer import PeerClient
from murmurd.session.session import Session
from murmurd.session.task import TaskSpec

logger = logging.getLogger("murmurd.a2a")


@dataclass
class Slot:
    """A live session and what is bound to it: its peer client, the trust of the task it runs."""

    session: Session
    peers: PeerClient
    trust: str = "operator"
    announced: str | None = None  # the task whose opening of this session wrote its `a2a_task_session`
    busy: int = 0  # tasks of this slot running now (only ever 0 or 1 for a context session)
    idle_since: float = field(default_factory=time.monotonic)

    async def close(self) -> None:
        try:
            await self.session.close()
        finally:
            await self.peers.close()


OpenSlot = Callable[[str, TaskSpec | None], Awaitable[Slot]]  # (context id, the task that opens it)
SessionOpened = Callable[[str, str], Awaitable[None]]  # (session id, context id)
SessionClosed = Callable[[str], Awaitable[None]]  # (session id)


class SessionPool:
    def __init__(self, shared: Slot | None, *, capacity: int, idle_secs: float, open_slot: OpenSlot,
                 clock: Callable[[], float] = time.monotonic, on_open: SessionOpened | None = None,
                 on_close: SessionClosed | None = None) -> None:
        """`shared`: the one session every task runs in (a bound of 1), or None for a session
        per context, at most `capacity` of them open."""
        self.shared = shared
        self.capacity = capacity
        self.idle_secs = idle_secs
        self._open_slot = open_slot
        self._clock = clock
        self._on_open = on_open
        self._on_close = on_close
        self._slots: OrderedDict[str, Slot] = OrderedDict()  # context id -> its session, LRU first

    def live_sessions(self) -> set[str]:
        """The session ids of the context sessions open now."""
        return {slot.session.staged.session_id for slot in self._slots.values()}

    @property
    def live(self) -> int:
        """Context sessions open now (the shared session is not counted)."""
        return len(self._slots)

    def slot_of(self, context_id: str) -> Slot | None:
        return self.shared or self._slots.get(context_id)

    async def acquire(self, context_id: str, first: TaskSpec | None = None) -> Slot:
        """The session `context_id`'s next task runs in, opened if it has none (then `first`, the
        task acquiring it, begins in the same step as the opening: `Session.begin_first_task`)."""
        slot = self.slot_of(context_id)
        if slot is not None:
            slot.busy += 1
            if self.shared is None:
                self._slots.move_to_end(context_id)
            return slot
        victim = self._idle_victim() if len(self._slots) >= self.capacity else None
        if victim is not None:
            await self._close(victim)
        slot = await self._open_slot(context_id, first)
        slot.busy += 1  # held before anything awaits: an idle sweep never closes it under its task
        self._slots[context_id] = slot
        await self._heard(self._on_open, slot.session.staged.session_id, context_id)
        return slot

    def release(self, context_id: str, slot: Slot) -> None:
        """The task of `context_id` ended: its session counts as used now (LRU order)."""
        slot.busy -= 1
        slot.idle_since = self._clock()
        if self._slots.get(context_id) is slot:
            self._slots.move_to_end(context_id)

    async def discard(self, context_id: str, slot: Slot) -> None:
        """Close a context session that ended (its trace failed): the context's next task gets a
        new one, and no other context is touched."""
        if self._slots.get(context_id) is slot and slot.busy == 0:
            del self._slots[context_id]
            await self._close(slot)

    def _idle_victim(self) -> Slot | None:
        """The least recently used idle context session, taken out of the pool (synchronously, so
        two tasks opening sessions at once never pick the same one)."""
        for context_id, slot in self._slots.items():
            if slot.busy == 0:
                return self._slots.pop(context_id)
        return None

    async def close_idle(self) -> int:
        """Close the context sessions idle for `idle_secs`; how many were closed."""
        now = self._clock()
        expired = [c for c, s in self._slots.items() if s.busy == 0 and now - s.idle_since >= self.idle_secs]
        taken = [self._slots.pop(context_id) for context_id in expired]  # all at once: closing awaits
        for slot in taken:
            await self._close(slot)
        return len(taken)

    async def close_all(self) -> None:
        """Every context session, then the shared one (shutdown: no task runs any more)."""
        while self._slots:
            _, slot = self._slots.popitem(last=False)
            await self._close(slot)
        if self.shared is not None:
            await self._close(self.shared)

    async def _close(self, slot: Slot) -> None:
        """A session that fails to close is logged; it never stops the daemon or another close."""
        try:
            await slot.close()
        except Exception:
            logger.exception("session %s did not close cleanly", slot.session.staged.session_id)
        if slot is not self.shared:
            await self._heard(self._on_close, slot.session.staged.session_id)

    async def _heard(self, callback: Callable[..., Awaitable[None]] | None, *args: str) -> None:
        """Tell `callback`; its failure is logged, never the task's or the close's."""
        if callback is None:
            return
        try:
            await callback(*args)
        except Exception:
            logger.exception("recording context session %s failed", args[0])

    async def reap_periodically(self) -> None:
        """Close idle context sessions as they expire (a background task of the daemon)."""
        while True:
            await asyncio.sleep(max(0.05, min(self.idle_secs / 2, 5.0)))
            await self.close_idle()
