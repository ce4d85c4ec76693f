"""A `Session`: one staged capsule running tasks, with one trace and one set of totals.

The session runs each task (the agent loop, or the capsule component for a script capsule) and
writes `out/result.txt` on every exit path. As upstream, each agent-loop attempt of a task (the
first run and every reopen) is wrapped in its own `session_start` / `session_end`, nested inside
the task's `task_start` / `task_end`; `session_end` carries the session's cumulative totals, so
the last one equals the sum of every `task_end`. The idle run (no task) writes the pair alone.

Hooks follow the seed, not the trace: `on-session-start` once when the session opens (before
its first task's work), `on-session-end` once when it closes (after its task loop exits), the
same `session-id` throughout. Before each attempt's `session_end` line the async hooks' queues
drain and the hook faults held since the last one are written.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from murmurd import workdir_fs
from murmurd.hooks.dispatch import DispatchSettings, HookDispatcher
from murmurd.hooks.dispatcher import ContextArm, LifecycleDispatcher, Reopen, SessionEnd, TaskEnd, TaskStartEvent
from murmurd.hooks.faults import HookLog
from murmurd.hooks.loading import load_hooks
from murmurd.host import ComponentHost, HostError
from murmurd.host.hook_values import SessionContextRecord
from murmurd.host.http_egress import EGRESS_DENIED, EgressDenial
from murmurd.session import seeding
from murmurd.session.compaction import settings_for as compaction_settings
from murmurd.session.continuation import ContinuationState
from murmurd.session.driver_protocol import system_prompt
from murmurd.session.events import TaskEvents
from murmurd.session.failures import SessionEnded, TaskFailed
from murmurd.session.counters import Counters
from murmurd.session.loop import AgentLoop, DriverSetup, LoopState
from murmurd.session.messages import Message, user_message
from murmurd.session.task import (
    TaskBegun, TaskOutcome, TaskSpec, abandoned_end, begin_task, end_task, end_task_in, write_task_md,
)
from murmurd.session.file_process import FileProcess
from murmurd.session.own_thread import on_own_thread
from murmurd.session.process.run import ProcessLoop
from murmurd.session.hook_services import ActiveTask, HookServices, HookSessionState
from murmurd.session.services import CapsuleServices
from murmurd.session.tokens import count_tokens
from murmurd.session.tools import ToolRunner, model_tools
from murmurd.session.workdir_guard import walk_periodically
from murmurd.staging.grants import effective_grants
from murmurd.staging.session_hold import SessionHold
from murmurd.staging.stage import StagedCapsule
from murmurd.staging.template import FreshWorkdir
from murmurd.workdir import MAX_RESULT_BYTES, RESULT, TRACE, log_file
from murmurd.trace.otel import SessionSpans
from murmurd.trace.writer import TraceWriteError, TraceWriter


def driver_setup(staged: StagedCapsule, system: str, *, release_prompt_artifact: bool = False) -> DriverSetup | None:
    inference = staged.manifest.inference
    if inference is None:
        return None
    config = inference.driver.config if inference.driver else {}
    env = {
        "MURMUR_INFERENCE_ENDPOINT": inference.endpoint or "",
        "MURMUR_INFERENCE_API_KEY": inference.api_key.get_secret_value() if inference.api_key else "",
        "MURMUR_INFERENCE_MODEL": inference.model or "",
        "MURMUR_INFERENCE_DRIVER_CONFIG": json.dumps(config),
        **staged.identity,  # upstream's identity and inference names (murmurd/staging/identity.py)
    }
    return DriverSetup(
        name=inference.driver.artifact if inference.driver else "",
        env=env,
        system=system,
        tools=model_tools(staged, release_prompt_artifact=release_prompt_artifact),
        model=inference.model,
        max_tokens=inference.max_tokens,
        max_turns=inference.max_turns,
        max_session_tokens=inference.max_session_tokens,
    )


def manifest_prompt(staged: StagedCapsule) -> str | None:
    inference = staged.manifest.inference
    if inference is None:
        return None
    if inference.system_prompt_artifact:
        if inference.system_prompt_artifact not in staged.artifacts:
            return None
        return staged.read_installed(inference.system_prompt_artifact)
    return inference.system_prompt


def _session_spans(staged: StagedCapsule) -> SessionSpans:
    endpoint = staged.manifest.observability.otel_endpoint
    if not endpoint:
        return SessionSpans.disabled()
    manifest = staged.manifest
    try:
        log = workdir_fs.open_append_text(staged.workdir.root, staged.workdir.book(log_file("otel.log")))
    except OSError as exc:
        raise TraceWriteError(f"cannot open logs/otel.log: {exc}") from None
    return SessionSpans.exporting(endpoint, manifest.name, manifest.version, log)


def _fresh(staged: StagedCapsule) -> FreshWorkdir | None:
    """What laying down `staged`'s workdir left open, when it is this very workdir's."""
    fresh = staged.fresh
    if isinstance(fresh, FreshWorkdir) and fresh.root is staged.workdir.root and not staged.workdir.runtime_rel:
        return fresh
    return None


class Session:
    def __init__(
        self,
        staged: StagedCapsule,
        host: ComponentHost,
        *,
        dispatcher: LifecycleDispatcher | None = None,
        services: CapsuleServices | None = None,
        cli_system_prompt: str | None = None,
        hook_settings: DispatchSettings | None = None,
        files: FileProcess | None = None,
    ) -> None:
        self.staged = staged
        self.host = host
        self.files = files  # where a task's end is written (None: on a thread), `task.end_task_in`
        fresh = _fresh(staged)  # a workdir just laid down: its hold taken, its trace open
        # `murmurd gc` leaves a live session alone
        self._hold = (fresh.take_hold() if fresh else None) or SessionHold(staged.workdir.runtime)
        self.services = services or CapsuleServices(staged, host)
        self.totals = Counters()
        self.spans = _session_spans(staged)
        self.trace = TraceWriter(staged.workdir.root, staged.workdir.book(TRACE), staged.session_id,
                                 mirror=self.spans.mirror, fd=fresh.take_trace() if fresh else None,
                                 written=fresh.written if fresh else ())
        self.ended: str | None = None  # set when something ended the whole session
        self.closed = False  # close() has freed the hooks and closed the trace
        self._opened_at: float | None = None  # set once on-session-start went out; the close ends it
        self.last_exit_status = "ok"
        self._faults: HookLog | None = None  # hook faults, held until the next session_end / task_end
        # `--system-prompt` replaces the manifest's prompt for this run (trimmed; blank clears it)
        # and gives a bound `system_prompt_artifact` back to the model's inventory.
        cli = cli_system_prompt is not None
        self._prompt_source = "cli" if cli else None
        self._prompt = ((cli_system_prompt or "").strip() or None) if cli else manifest_prompt(staged)
        self._system = system_prompt(staged.manifest.name, staged.manifest.version, self._prompt)
        self._setup = driver_setup(staged, self._system, release_prompt_artifact=cli)
        self.hooks = HookSessionState(staged, host, self.trace, self.totals, turn=lambda: self.dispatcher.turn)
        self.services.trace_egress = self._egress_denied  # (the services may be the daemon's own)
        self.dispatcher = dispatcher or self._hook_dispatcher(hook_settings or DispatchSettings())
        self._continuation = ContinuationState()
        include_output = staged.manifest.trace.include_tool_output
        self._runner = ToolRunner(staged, host, self.services, include_output)
        self._workdir_walks: asyncio.Task[None] | None = None
        self._begun: TaskBegun | None = None  # a task begun with the session's opening, until it runs

    def _hook_dispatcher(self, settings: DispatchSettings) -> LifecycleDispatcher:
        """The capsule's hooks behind the lifecycle seam (the silent base when it has none)."""
        specs = load_hooks(self.staged)
        if not specs:
            return LifecycleDispatcher()
        setup = self._setup
        manifest = self.staged.manifest
        record = SessionContextRecord(
            manifest.name, manifest.version, self.staged.session_id,
            (manifest.inference.model or "") if manifest.inference else "", self._capabilities(),
        )
        self._faults = HookLog(self.staged.workdir, self.trace, hold=True)
        return HookDispatcher(
            self.host, specs, root=self.staged.workdir.root,
            log_sink=self._faults,  # beside the hook's own log
            context_for=lambda name: HookServices(self.hooks, name, setup.env if setup else {},
                                                  setup.name if setup else None),
            session_record=record, settings=settings,
        )

    def _capabilities(self) -> list[str]:
        """The categories the capsule is granted anything in (session_start, session-context)."""
        return [k for k, v in self.staged.grants.capsule.to_json().items() if v and k != "limits"]

    async def open(self) -> None:
        """Bind the session to the running loop and tell the hooks it started (`on-session-start`,
        once per session, before any task's work). Nothing is traced: each agent-loop attempt
        writes its own `session_start` (upstream nests the pair inside the task); a fault of
        this dispatch is held until the first `session_end` (or the close)."""
        self.hooks.loop = asyncio.get_running_loop()
        guard = self._runner.policy.workdir_guard
        if guard is not None and self._workdir_walks is None:  # workdir_max_bytes (E-RUN-013)
            self._workdir_walks = asyncio.get_running_loop().create_task(walk_periodically(guard))
        if self._opened_at is None:
            self._opened_at = time.monotonic()
            await self.dispatcher.on_session_start()

    def _session_start(self, max_turns: int) -> None:
        """`session_start` of one attempt; `max_turns` is the budget left for it."""
        staged = self.staged
        manifest = staged.manifest
        grants = staged.once("effective_grants", lambda: effective_grants(manifest, staged.grants, env=staged.host_env))
        self._write(
            "session_start",
            capsule_name=manifest.name,
            capsule_version=manifest.version,
            # always present, as upstream's readers require (`mur trace`, `murmurd trace`): "" when
            # the manifest names no model (the driver's default), 0 turns for a script capsule
            model=(manifest.inference.model or "") if manifest.inference else "",
            max_turns=max_turns,
            # upstream's categories granted anything, and the tools the model is offered
            capabilities=[c for c, v in (("network", grants["network_allow"]), ("filesystem", grants["filesystem_scope"]),
                                         ("shell", grants["shell_allow"])) if v],
            tools_declared=[t.name for t in self._setup.tools] if self._setup else [],
            containment_declared=grants["declared_containment"],
            containment_achieved=grants["achieved_containment"],
            workdir_exec=grants["workdir_exec"],
            system_prompt_source=self._prompt_source or ("manifest" if self._prompt else "none"),
            # the resolved prompt alone, before the [Capsule] block; null when there is none
            system_prompt_sha256=hashlib.sha256(self._prompt.encode()).hexdigest() if self._prompt else None,
            system_prompt=self._prompt if manifest.trace.include_tool_output else None,
            effective_grants=grants,
        )

    async def _attempt(self, spec: TaskSpec, state: LoopState, max_turns: int,
                       run: Callable[[], Awaitable[str]]) -> tuple[str, Reopen | None]:
        """One agent-loop attempt between its `session_start` and its `session_end`, written on
        every exit path (upstream: the pair is per attempt, nested inside the task). When the
        loop returns, hooks hear `on-task-end` (whose `reopen-task` the caller weighs); then the
        async hook queues drain and the faults held since the last `session_end` are written,
        all before the second. The attempt's result, and the reopen a hook asked for."""
        started = time.monotonic()
        self._session_start(max_turns)
        self.spans.attempt_started(spec.traceparent)
        try:
            result = await run()
            if self.hooks.active is not None:
                self.hooks.active.result = result
            reopen = await self.dispatcher.on_task_end(TaskEnd(spec.task_id, "ok"))
            state.end_dispatched = True
        except (TaskFailed, asyncio.CancelledError) as failure:
            # A failed or cancelled attempt: on-task-end, then the session's end, as for any other.
            status = failure.exit_status if isinstance(failure, TaskFailed) else "failed"
            if not state.end_dispatched:
                await self.dispatcher.on_task_end(TaskEnd(spec.task_id, status))
                state.end_dispatched = True
            await self._session_end(status, started)
            raise
        except BaseException:  # a bug: the attempt still ends in the trace
            await self._session_end("failed", started)
            raise
        problem = await self._session_end("ok", started)
        if problem is not None:
            raise SessionEnded(problem)
        return result, reopen

    async def _session_end(self, status: str, started: float) -> str | None:
        """`session_end` of one attempt, its totals the session's so far; never raises (a failed
        write ends the session and is returned). The async hooks' queues drain first (within
        the drain budget), then the held hook faults are written."""
        duration_ms = int((time.monotonic() - started) * 1000)
        await self.dispatcher.drain()
        self._flush_faults()
        problem = None
        try:
            self.trace.write("session_end", duration_ms=duration_ms, exit_status=status,
                             total_turns=self.totals.turns, total_input_tokens=self.totals.input_tokens,
                             total_output_tokens=self.totals.output_tokens, total_tool_calls=self.totals.tool_calls,
                             total_shell_calls=self.totals.shell_calls)
        except TraceWriteError as exc:
            self.ended, problem = "failed", str(exc)
        self.spans.attempt_ended(status)
        return problem

    def _flush_faults(self) -> None:
        """The `hook_dispatch_error` events held since the last `session_end` / `task_end`."""
        if self._faults is not None:
            self._faults.flush()

    async def run_task(self, spec: TaskSpec, events: TaskEvents | None = None) -> TaskOutcome:
        """Run one task to a terminal outcome; never raises for a task-level failure."""
        events = events or TaskEvents()
        started = time.monotonic()
        state = LoopState(spec.task_id, spec.context_id or "", [*spec.history, user_message(spec.text)])
        outcome = TaskOutcome(spec.task_id, spec.context_id, "ok", "")
        self.hooks.active = ActiveTask(spec.text, spec.context_id, state.counters)
        cancelled = False
        begun = self._take_begun(spec.task_id)  # begun when the session opened, or None
        started_line = begun is not None and begun.started_line  # task_start written: task_end closes it
        try:
            if self.ended is not None:
                raise SessionEnded(f"the session has ended ({self.ended}); no further tasks run", self.ended)
            guard = self._runner.policy.workdir_guard
            if guard is not None and guard.breach is not None:  # found by a walk between tasks
                raise SessionEnded(guard.breach)
            if begun is None:
                if spec.announced:
                    self._write("task_start", **spec.start_fields())
                    started_line = True
                # `task.md`, and the barrier: a trace that cannot be written ends the session
                # before any turn. One hand-off for both (issue 29).
                await self._write_task_md(spec.text, barrier=spec.announced)
            elif begun.failure is not None:
                raise begun.failure
            if self.staged.capsule_component is not None and self._setup is None:
                inference = self.staged.manifest.inference
                outcome.result_text, _ = await self._attempt(spec, state, inference.max_turns if inference else 0,
                                                             self._run_capsule_component)
            else:
                await self._run_agent(spec, state, outcome, events)
        except TaskFailed as failure:
            outcome.exit_status, outcome.error = failure.exit_status, str(failure)
            if isinstance(failure, SessionEnded):
                self.ended = failure.exit_status
        except asyncio.CancelledError:
            # Cancelled from outside (tasks/cancel, shutdown): finish the bookkeeping, then let
            # the cancellation continue to the caller.
            cancelled = True
            outcome.exit_status, outcome.error = "failed", "canceled"
        outcome.counters = state.counters
        outcome.messages = state.messages
        outcome.duration_ms = int((time.monotonic() - started) * 1000)
        await self._end_task(outcome, started_line)
        if self.hooks.active is not None:
            self.hooks.active.result = outcome.result_text
        if not state.end_dispatched:
            await self.dispatcher.on_task_end(TaskEnd(spec.task_id, outcome.exit_status))
        self.hooks.active = None
        # A spent reopen budget is a task_end status only; the session itself went fine.
        self.last_exit_status = "ok" if outcome.delivered else outcome.exit_status
        if cancelled:
            raise asyncio.CancelledError
        return outcome

    async def _run_agent(self, spec: TaskSpec, state: LoopState, outcome: TaskOutcome, events: TaskEvents) -> None:
        setup = self._setup
        process = setup is not None and self.staged.manifest.inference.transport == "process"  # type: ignore[union-attr]
        if setup is None or (not process and setup.name not in self.staged.artifacts):
            raise TaskFailed("no inference driver: declare inference.driver.artifact")
        loop: Any = AgentLoop(self.staged, self.host, self._runner, setup, self.trace, self.dispatcher,
                              self.totals, self._continuation, spend_refusals=lambda: self.hooks.spend_refusals)
        if process:  # a CLI agent drives; its tool calls take the agent loop's tool path (issue 27)
            loop = ProcessLoop(loop, setup, self.trace, self.dispatcher, self._prompt)

        async def first_attempt() -> str:
            """`on-task-start` and its seed open the first attempt, inside its `session_start` /
            `session_end` pair (the hooks' `on-session-start` came when the session opened)."""
            await self._start_task(spec, state, outcome)
            return await loop.run(state, events)

        await self._attempts(spec, state, outcome, events, loop, first_attempt)

    async def _start_task(self, spec: TaskSpec, state: LoopState, outcome: TaskOutcome) -> None:
        context = self.staged.manifest.context
        window = context.max_tokens if context and context.max_tokens else 0
        budget = int(window * (context.seed_budget or 0)) if context else 0
        arm = await self.dispatcher.on_task_start(TaskStartEvent(
            spec.task_id, state.context_id, spec.source, spec.message_parts_bytes, window, budget,
            await self._prior_tokens(spec),
        ))
        seeded = await self._seed(spec.task_id, arm, budget, context.seed_budget if context else None)
        state.messages[:0] = seeded
        outcome.seeded_ids = frozenset(m.id for m in seeded)
        if seeded:  # the head of the context changed: the driver's held state no longer matches
            self._continuation.drop()
        else:
            self._continuation.rebase(state.context_id or None, len(spec.history))

    async def _seed(self, task_id: str, arm: ContextArm | None, budget: int, fraction: float | None) -> list[Message]:
        """The seed placed at the head of the task (see `seeding`), and its `context_seed` event."""
        if arm is None:
            return []
        seeded = await seeding.measure(arm, budget, self.dispatcher, compaction_settings(self.staged.manifest),
                                       fraction or 0.0)
        self._write("context_seed", **seeding.event_fields(task_id, arm, budget, seeded))
        return seeded.messages

    async def _attempts(self, spec: TaskSpec, state: LoopState, outcome: TaskOutcome, events: TaskEvents,
                        loop: AgentLoop, first_attempt: Callable[[], Awaitable[str]]) -> None:
        """The agent loop, run again with the feedback of each `reopen-task` while the budget lasts
        (`max_turns` counts across every attempt). A hook still asking once the budget is spent
        ends the task `reopen_budget_exhausted` with its last result."""
        max_reopens = self.staged.manifest.max_task_reopens
        run = first_attempt
        while True:
            left = loop.setup.max_turns - state.counters.turns  # what earlier attempts left of max_turns
            outcome.result_text, reopen = await self._attempt(spec, state, left, run)
            run = lambda: loop.run(state, events)  # noqa: E731 - a reopen runs the loop alone
            if reopen is None:
                return
            if outcome.reopen_count >= max_reopens:
                self._write("reopen_budget_exhausted", task_id=spec.task_id, hook_name=reopen.hook_name,
                            reason=reopen.feedback, reopen_count=outcome.reopen_count, max_task_reopens=max_reopens)
                outcome.exit_status = "reopen_budget_exhausted"
                outcome.error = (f"hook {reopen.hook_name} still asked to reopen the task; max_task_reopens "
                                 f"({max_reopens}) is spent, the last result stands")
                return
            outcome.reopen_count += 1
            state.end_dispatched = False
            self._write("task_reopened", task_id=spec.task_id, hook_name=reopen.hook_name,
                        reason=reopen.feedback, reopen_number=outcome.reopen_count)
            state.messages.append(user_message(reopen.feedback, source_id=f"hook:{reopen.hook_name}"))

    async def _prior_tokens(self, spec: TaskSpec) -> int:
        """`prior-tokens`: what the history a threaded task loads counts; 0 for any other mode."""
        if self.staged.manifest.lifecycle.conversation != "threaded" or not spec.history:
            return 0
        if not self.dispatcher.listens("on-task-start"):
            return 0  # nobody reads it: skip the count
        history = [m.to_driver() for m in spec.history]
        return await self.host.pool.run(lambda: count_tokens(json.dumps(history)))  # a long history: not the lane

    async def _run_capsule_component(self) -> str:
        component = self.staged.capsule_component
        assert component is not None
        root = self.staged.workdir.root
        try:
            await asyncio.to_thread(workdir_fs.unlink, root, RESULT)
        except OSError as exc:
            raise TaskFailed(f"cannot clear {RESULT}: {exc}") from None
        grant = self.staged.call_grant(None, log_name="capsule.log")
        try:
            await self.host.run_capsule(component, grant=grant, session=self.services)
        except HostError as exc:
            raise TaskFailed(str(exc)) from None
        try:
            return await asyncio.to_thread(workdir_fs.read_text, root, RESULT, max_bytes=MAX_RESULT_BYTES,
                                           errors="replace")
        except FileNotFoundError:
            return ""
        except OSError as exc:
            raise TaskFailed(f"the capsule's {RESULT} is refused: {exc}") from None

    def _egress_denied(self, denial: EgressDenial) -> None:
        """A tool's, driver's or the capsule's wasi:http request refused by its grant (worker thread)."""
        self.trace.write(EGRESS_DENIED, turn=self.dispatcher.turn, **denial.fields())

    def _write(self, event_type: str, **fields: Any) -> None:
        """A trace event whose loss ends the session (every event but `compaction`)."""
        try:
            self.trace.write(event_type, **fields)
        except TraceWriteError as exc:
            raise SessionEnded(str(exc)) from None

    async def _write_task_md(self, text: str, *, barrier: bool) -> None:
        """`task.md` (`task.write_task_md`); with `barrier`, then every trace line queued so far
        is waited for, in the same hand-off."""

        def write() -> None:
            failure = write_task_md(self.staged.workdir.root, text)
            if failure is not None:
                raise failure
            if barrier:
                try:
                    self.trace.flush_blocking()
                except TraceWriteError as exc:
                    raise SessionEnded(str(exc)) from None

        await asyncio.to_thread(write)

    async def _end_task(self, outcome: TaskOutcome, started_line: bool) -> None:
        """`out/result.txt`, then (for an announced task) `task_end` and the barrier: once a task has
        ended, its every trace line is in the file. One hand-off for the three (issue 29)."""
        self._flush_faults()  # the hook faults held since the last session_end, before task_end
        ended = None
        if self.files is not None:
            ended = await end_task_in(self.files, self.trace, self.staged.workdir, outcome, started_line)
        if ended is None:
            ended = await asyncio.to_thread(end_task, self.trace, self.staged.workdir, outcome, started_line)
        if not ended:
            self.ended = "failed"

    def begin_first_task(self, spec: TaskSpec) -> None:
        """Begin `spec` now (blocking: `task_start` and `task.md`, `task.begin_task`), on the thread
        that made this session, so a new context's first task needs no hand-off of its own to
        begin; `run_task(spec)` goes on from there. A session that closes, or runs another task,
        before it ran closes its `task_start` with a `task_end` of its own. Not when a hook
        listens to `on-session-start`: the hooks hear of the session before any task's line
        (what they trace belongs to no task), so the task begins in `run_task`."""
        if self.dispatcher.listens("on-session-start"):
            return
        self._begun = begin_task(self.trace, self.staged.workdir.root, spec)

    def begun_elsewhere(self, begun: TaskBegun) -> None:
        """A first task the file process began as it laid this session's workdir down (its
        `task_start` among the trace's `written` events): `run_task` goes on from there, as after
        `begin_first_task`. The daemon's opening asks for it only for a capsule whose sessions
        read no file as they are made (no hook hears `on-session-start`, among others)."""
        self._begun = begun

    async def end_unrun(self, task_id: str) -> None:
        """`task_id` will not run in this session (it ended before `run_task`): the `task_start`
        begun for it at the opening gets its `task_end`, in the file when this returns."""
        if self._begun is None or self._begun.task_id != task_id:
            return
        begun, self._begun = self._begun, None
        self._abandon(begun)
        try:
            await self.trace.flush()
        except TraceWriteError:
            pass  # the trace has failed: the session ends with the next line it cannot write

    def _take_begun(self, task_id: str) -> TaskBegun | None:
        begun, self._begun = self._begun, None
        if begun is not None and begun.task_id != task_id:
            self._abandon(begun)
            return None
        return begun

    def _abandon(self, begun: TaskBegun) -> None:
        """A task begun at the opening that never ran here: its `task_start` gets its `task_end`."""
        if begun.started_line:
            try:
                self.trace.write("task_end", **abandoned_end(begun))
            except TraceWriteError:
                pass  # the trace has failed: no line closes anything any more

    async def close(self, exit_status: str | None = None) -> None:
        """End the session: hooks hear `on-session-end` (the session's totals, its duration since
        `open`), their queues drain once more, they are freed, and the trace closes. No
        `session_end` line here (every attempt wrote its own), so the faults of this last phase
        are written after the last one: no later `session_end` exists for them to precede."""
        status = exit_status or self.ended or self.last_exit_status
        if self._begun is not None:
            self._abandon(self._begun)
            self._begun = None
        if self._workdir_walks is not None:
            self._workdir_walks.cancel()
            self._workdir_walks = None
        try:
            if self._opened_at is not None:
                duration_ms = int((time.monotonic() - self._opened_at) * 1000)
                self._opened_at = None
                await self.dispatcher.on_session_end(SessionEnd(self.totals, duration_ms, status))
            await self.dispatcher.aclose()
            self._flush_faults()
        finally:
            await self.trace.aclose()  # every queued line written, then the file closed
            self.closed = True
            self._hold.release()
            if self.spans.enabled:  # exporting: the flush blocks
                await on_own_thread(self.spans.shutdown, status)  # a network export, bounded by its timeouts
            else:  # nothing to flush: no hand-off
                self.spans.shutdown(status)
