"""`HookDispatcher`: the lifecycle seam with hooks behind it.

For every point the loop announces, each hook that receives it is called in manifest order:
a `blocking` hook is awaited (its call runs on a WASM worker under its own deadline), an `async`
hook's event goes to its queue (`hooks.queue`). What a blocking hook returns goes through the
commit table (`hooks.commit`): a committed arm is handed back to the loop, anything else is a
fault (`hooks.faults`: a blocking hook's is traced as it happens). A hook that errs, traps or overruns its deadline is logged and the
session goes on; at a decision point it denies the call (fail closed).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from murmurd.hooks import events as convert
from murmurd.hooks.commit import ARTIFACT_MAX_BYTES, Committed, Dispatch, Fault, judge
from murmurd.hooks.dispatcher import (
    CompactionEvent,
    CompactionFailed,
    ContextArm,
    Denial,
    HookArtifact,
    InferenceEvent,
    InferenceOutputs,
    LifecycleDispatcher,
    Reopen,
    SessionEnd,
    ShellEvent,
    TaskEnd,
    TaskStartEvent,
    ToolEvent,
)
from murmurd.hooks.faults import HookLog
from murmurd.hooks.instances import CallFailed, HookRunner
from murmurd.hooks.loading import HookSpec
from murmurd.hooks.queue import DRAIN_BUDGET_SECONDS, QUEUE_BOUND, HookQueue, drain_all
from murmurd.hooks.recipes import read_recipe, recipe_request
from murmurd.host import ComponentHost, SessionContext
from murmurd.host.hook_values import HookOutput, SessionContextRecord

log = logging.getLogger("murmurd.hooks")


@dataclass(frozen=True)
class DispatchSettings:
    queue_bound: int = QUEUE_BOUND
    drain_budget: float = DRAIN_BUDGET_SECONDS
    artifact_max_bytes: int = ARTIFACT_MAX_BYTES  # one hook artifact's JSON text; over it: a fault


class HookDispatcher(LifecycleDispatcher):
    def __init__(
        self,
        host: ComponentHost,
        specs: list[HookSpec],
        *,
        root: Path,
        log_sink: HookLog,
        context_for: Callable[[str], SessionContext],
        session_record: SessionContextRecord,
        settings: DispatchSettings = DispatchSettings(),
    ) -> None:
        self.root = root
        self.log = log_sink
        self.settings = settings
        self.session_record = session_record
        self.runners = [HookRunner(spec, host, context_for(spec.name), log_sink) for spec in specs]
        self.queues: dict[str, HookQueue] = {
            r.name: HookQueue(r.name, self._deliver_async(r), self._reporter(r.name), overflow=r.spec.overflow,
                              bound=settings.queue_bound)
            for r in self.runners if r.spec.asynchronous
        }
        self.bound = any(r.spec.receives("on-compaction") and not r.spec.asynchronous for r in self.runners)
        self.turn = 0  # the loop turn of the latest event: a hook inference carries it

    # -- the seam ---------------------------------------------------------------------------

    def listens(self, handler: str) -> bool:
        return any(r.spec.receives(handler) and r.spec.exports(handler) for r in self.runners)

    async def on_session_start(self) -> None:
        await self._dispatch("on-session-start", self.session_record)

    async def on_task_start(self, event: TaskStartEvent) -> ContextArm | None:
        committed = await self._dispatch("on-task-start", event)
        seeds = _first(committed, "seed-context")
        return _context_arm(*seeds) if seeds else None

    async def on_inference(self, event: InferenceEvent) -> InferenceOutputs:
        self.turn = event.turn
        committed = await self._dispatch("on-inference", event)
        return InferenceOutputs([HookArtifact(name, v.value) for name, v in committed if v.arm == "artifact"])

    async def on_tool_call(self, event: ToolEvent) -> Denial | None:
        self.turn = event.turn
        if event.outcome is None:
            return await self._decide("on-tool-call", convert.tool(event))
        await self._dispatch("on-tool-call", convert.tool(event), Dispatch.OBSERVATION)
        return None

    async def on_shell(self, event: ShellEvent) -> Denial | None:
        self.turn = event.turn
        dispatch = Dispatch.DECISION if event.outcome is None else Dispatch.OBSERVATION
        if not any(r.spec.receives("on-shell", dispatch) for r in self.runners):
            return None
        record = convert.shell(event, await self._recipe(event))
        if dispatch is Dispatch.DECISION:
            return await self._decide("on-shell", record)
        await self._dispatch("on-shell", record, dispatch)
        return None

    async def on_compaction(self, event: CompactionEvent) -> ContextArm | CompactionFailed | None:
        """Blocking hooks in manifest order until one commits `replace-context` (a later summarizer
        would only see the history it replaces) or one fails: the runtime has no way back under
        the window without them, so a failure is handed back rather than logged and passed over."""
        record = convert.compaction(event)
        found: ContextArm | None = None
        for runner in self.runners:
            if not runner.spec.receives("on-compaction") or not runner.spec.exports("on-compaction"):
                continue
            queue = self.queues.get(runner.name)
            if queue is not None:
                await queue.put("on-compaction", record)
                continue
            if found is not None:
                continue  # async hooks still hear of it; no second summarizer runs
            output = await runner.call("on-compaction", record)
            if isinstance(output, CallFailed):
                return CompactionFailed(runner.name, output.reason)
            verdict = judge("on-compaction", Dispatch.ONCE, output.arm, output.value)
            if isinstance(verdict, Fault):
                self.log.discarded(runner.name, "on-compaction", verdict.arm, verdict.reason, now=True)
            elif verdict is not None:
                found = _context_arm(runner.name, verdict.value)
        return found

    async def on_task_end(self, event: TaskEnd) -> Reopen | None:
        committed = await self._dispatch("on-task-end", convert.task_end(event))
        reopen = _first(committed, "reopen-task")
        return Reopen(reopen[0], str(reopen[1])) if reopen else None

    async def drain(self) -> None:
        """Every async queue drains within the budget (before an attempt's `session_end` line);
        a worker restarts with the next event, so the instances live on (a reopen, the next task)."""
        await drain_all(list(self.queues.values()), self.settings.drain_budget)

    async def on_session_end(self, event: SessionEnd) -> None:
        """Once, when the session closes; `aclose` then drains and frees the instances."""
        await self._dispatch("on-session-end", convert.session_end(event))

    async def aclose(self) -> None:
        """The session closes: what was queued since the last drain (`on-session-end` at least)
        is delivered within the budget, then every instance is freed."""
        await self.drain()
        if self.runners:  # a running call is cancelled and waited for: off the loop
            await asyncio.to_thread(self.close)

    def close(self) -> None:
        """Free every hook instance (a call still running is cancelled first)."""
        for runner in self.runners:
            runner.close()

    # -- dispatching ------------------------------------------------------------------------

    async def _dispatch(self, handler: str, record: Any, dispatch: Dispatch = Dispatch.ONCE) -> list[tuple[str, Committed]]:
        """Call every hook that receives this dispatch, in manifest order; the committed arms."""
        committed: list[tuple[str, Committed]] = []
        for runner in self.runners:
            if not runner.spec.receives(handler, dispatch) or not runner.spec.exports(handler):
                continue
            queue = self.queues.get(runner.name)
            if queue is not None:
                await queue.put(handler, record)
                continue
            output = await runner.call(handler, record)
            if isinstance(output, CallFailed):
                continue
            verdict = judge(handler, dispatch, output.arm, output.value,
                            artifact_max_bytes=self.settings.artifact_max_bytes)
            if isinstance(verdict, Fault):
                self.log.discarded(runner.name, handler, verdict.arm, verdict.reason, now=True)
            elif verdict is not None:
                committed.append((runner.name, verdict))
        return committed

    async def _decide(self, handler: str, record: Any) -> Denial | None:
        """The decision point: the first `deny` hook that denies, or fails, refuses the call."""
        for runner in self.runners:
            if not runner.spec.receives(handler, Dispatch.DECISION) or not runner.spec.exports(handler):
                continue
            output = await runner.call(handler, record)
            if isinstance(output, CallFailed):
                return Denial(runner.name, f"the policy hook failed ({output.reason}); denied (fail closed)")
            verdict = judge(handler, Dispatch.DECISION, output.arm, output.value)
            if isinstance(verdict, Fault):
                self.log.discarded(runner.name, handler, verdict.arm, verdict.reason, now=True)
            elif verdict is not None:
                return Denial(runner.name, str(verdict.value))
        return None

    def _deliver_async(self, runner: HookRunner) -> Callable[[str, Any], Any]:
        async def deliver(handler: str, record: Any) -> None:
            output = await runner.call(handler, record)
            if isinstance(output, HookOutput):
                verdict = judge(handler, Dispatch.ONCE, output.arm, output.value, asynchronous=True)
                if isinstance(verdict, Fault):
                    self.log.discarded(runner.name, handler, verdict.arm, verdict.reason)
        return deliver

    def _reporter(self, name: str) -> Callable[[str, str, str], None]:
        return lambda event, arm, detail: self.log.fault(name, event, arm, f"hook {name}: {event} {arm}: {detail}")

    async def _recipe(self, event: ShellEvent) -> str | None:
        request = recipe_request(event.argv[0] if event.argv else event.binary, event.argv)
        if request is None:
            return None
        return await asyncio.to_thread(read_recipe, self.root, request)


def _context_arm(hook_name: str, messages: list[Any]) -> ContextArm:
    """A committed message list: fresh ids for the loop, the hook's own ids kept aside."""
    return ContextArm(hook_name, [convert.loop_message(m) for m in messages], [m.id for m in messages])


def _first(committed: list[tuple[str, Committed]], arm: str) -> tuple[str, Any] | None:
    """The first hook (manifest order) that committed `arm`, and the arm's value."""
    return next(((name, v.value) for name, v in committed if v.arm == arm), None)
