"""The agent loop of one task (runtime-notes §3): driver turns, tool calls, a result.

One turn is one driver call. The loop builds the request (§2), calls the driver through the
component host, parses the response, runs the requested tools in order, and repeats until the
driver ends the turn, an error ends the task, or `inference.max_turns` is spent. It reports
every lifecycle point through the dispatcher and every event to the trace and `TaskEvents`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from murmurd import workdir_fs
from murmurd.hooks.dispatcher import (
    Denial,
    InferenceEvent,
    LifecycleDispatcher,
    ShellEvent,
    ToolEvent,
)
from murmurd.host import CallGuard, ComponentHost, HostError, ToolInput, ToolResult, ToolStatus
from murmurd.session.cache_key import prompt_cache_key
from murmurd.session.compaction import Compactor, settings_for
from murmurd.session.continuation import ContinuationState, continuation_id_from_metadata
from murmurd.session.counters import Counters
from murmurd.session.driver_protocol import (
    DriverProtocolError,
    DriverResponse,
    ToolSpec,
    build_request,
    decision_of,
    parse_response,
)
from murmurd.session.events import TaskEvents
from murmurd.session.failures import SessionEnded, TaskFailed, raise_if_aborted
from murmurd.session.messages import Message, tool_message
from murmurd.session.tokens import count_tokens, encoding_loaded
from murmurd.session.tools import ShellShape, ToolOutcome, ToolRunner
from murmurd.session.usage import normalize_usage
from murmurd.staging.stage import StagedCapsule
from murmurd.workdir import log_file
from murmurd.trace.writer import TraceWriteError, TraceWriter

COUNT_ON_LOOP_CHARS = 4 * 1024  # a text this short is counted on the loop (0.2 ms at most here)
log = logging.getLogger("murmurd.session")


@dataclass
class DriverSetup:
    """Everything the loop needs to call the driver: the staged component and its environment."""

    name: str
    env: dict[str, str]
    system: str
    tools: list[ToolSpec]
    model: str | None
    max_tokens: int
    max_turns: int
    max_session_tokens: int | None


@dataclass(frozen=True)
class Inference:
    """One driver call's outcome, as the loop needs it."""

    response: DriverResponse
    input_tokens: int
    output_tokens: int
    streamed: bool
    continuation_id: str | None
    duration_ms: int


@dataclass
class LoopState:
    """The conversation of one task, kept across reopen attempts."""

    task_id: str
    context_id: str
    messages: list[Message]
    counters: Counters = field(default_factory=Counters)
    end_dispatched: bool = False  # on-task-end already announced (the reopen check does it)


class AgentLoop:
    def __init__(
        self,
        staged: StagedCapsule,
        host: ComponentHost,
        runner: ToolRunner,
        setup: DriverSetup,
        trace: TraceWriter,
        dispatcher: LifecycleDispatcher,
        totals: Counters,
        continuation: ContinuationState,
        spend_refusals: Callable[[], int] = lambda: 0,
    ) -> None:
        self.staged = staged
        self.host = host
        self.runner = runner
        self.setup = setup
        self.trace = trace
        self.dispatcher = dispatcher
        self.totals = totals
        self.continuation = continuation
        self.compactor = Compactor(settings_for(staged.manifest), dispatcher, trace, continuation,
                                   staged.workdir, self._note, spend_refusals)
        self._tools_json = json.dumps([t.to_driver() for t in setup.tools], ensure_ascii=False)
        # The last full-request count (message ids, tokens), reused by the next turn (`_input_count`).
        self._counted: tuple[tuple[str, ...], int] | None = None

    # -- one attempt -----------------------------------------------------------------------

    async def run(self, state: LoopState, events: TaskEvents) -> str:
        """Run turns until the driver ends the task; return the result text or raise TaskFailed."""
        cache_key = prompt_cache_key(self.staged.manifest.name, self.staged.manifest.version, state.context_id)
        attempt_turns = 0  # upstream's `turn`: zero-based, restarting with each attempt
        while True:
            if state.counters.turns >= self.setup.max_turns:
                raise TaskFailed(f"max_turns ({self.setup.max_turns}) reached", "max_turns_reached")
            self._check_spend()
            state.counters.turns += 1
            self.totals.turns += 1
            turn, attempt_turns = attempt_turns, attempt_turns + 1
            inference = await self._infer(state, cache_key, events)
            response, input_tokens, output_tokens = inference.response, inference.input_tokens, inference.output_tokens
            decision = decision_of(response.stop_reason)
            first_tool = response.tool_calls[0]["name"] if response.tool_calls else None
            usage = normalize_usage(response.usage)
            self._trace("inference", turn=turn, input_tokens=input_tokens, output_tokens=output_tokens,
                        decision=decision, tool_name=first_tool, usage=usage or None,
                        duration_ms=inference.duration_ms)
            outputs = await self.dispatcher.on_inference(InferenceEvent(
                turn, input_tokens, output_tokens, decision, first_tool,
                prompt=self._prompt_json(state) if self.dispatcher.listens("on-inference") else None,
                output=json.dumps(response.content, ensure_ascii=False), tools=self._tools_json,
            ))
            for artifact in outputs.artifacts:
                events.artifact(artifact.hook_name, artifact.content)

            if response.stop_reason == "error":
                raise TaskFailed(f"driver error: {response.error or 'no message'}")
            # The driver acknowledged what it was sent, not what it answered: the next incremental
            # request carries its assistant message and the tool results after it.
            self.continuation.on_response(state.context_id, inference.continuation_id, len(state.messages))
            state.messages.append(Message("assistant", response.content))
            if response.stop_reason == "tool_call":
                events.turn_finished(True, "")  # the turn's end frame: its text is not the answer
                await self._run_tools(state, response, turn, events)
                await self._maybe_compact(state, turn, cache_key)
                continue
            events.turn_finished(inference.streamed, response.text)
            await self._maybe_compact(state, turn, cache_key)
            return response.text

    @staticmethod
    def _prompt_json(state: LoopState) -> str:
        """`inference-event.prompt`: the conversation the driver was sent, as driver JSON."""
        return json.dumps([m.to_driver() for m in state.messages], ensure_ascii=False)

    # -- the driver --------------------------------------------------------------------------

    async def _infer(self, state: LoopState, cache_key: str, events: TaskEvents) -> Inference:
        setup = self.setup
        full = self._full_request(state.messages, cache_key)
        count_input = self._input_count(state.messages, full)
        to_send, held = self.continuation.messages_to_send(state.context_id, state.messages)
        request = full if held is None else build_request(
            model=setup.model, max_tokens=setup.max_tokens, system=setup.system, messages=to_send,
            tools=setup.tools, prompt_cache_key=cache_key, continuation_id=held,
        )
        driver = self.staged.artifacts[setup.name]
        grant = dataclasses.replace(self.staged.call_grant(setup.name, log_name=f"driver-{setup.name}.log"), env=setup.env)
        streamed: list[str] = []
        started = time.monotonic()

        def on_chunk(text: str) -> None:
            streamed.append(text)
            events.text_chunk(text)

        guard = CallGuard(grant.limits.deadline_seconds)
        data = json.dumps(request)
        try:
            input_tokens = await self._count(lambda: count_input(data if request is full else None),
                                             len(data) if request is full else None)
            result = await self.host.call_tool(
                driver.component, ToolInput(data=data), grant=grant,
                session=self.runner.session, on_chunk=on_chunk, on_thinking=events.thinking_chunk, guard=guard,
            )
        except HostError as exc:
            raise_if_aborted(exc)
            raise TaskFailed(f"driver {exc}") from None
        raw = result.data if result.data is not None else (result.summary or "")
        if result.status is not ToolStatus.PASSED:
            raise TaskFailed(f"driver {setup.name} returned status {result.status.value}: {raw or 'no message'}")
        output_tokens = await self._count(lambda: count_tokens(raw), len(raw))
        self._account(input_tokens, output_tokens)
        state.counters.input_tokens += input_tokens
        state.counters.output_tokens += output_tokens
        try:
            response = parse_response(raw)
        except DriverProtocolError as exc:
            raise TaskFailed(f"driver {setup.name}: {exc}") from None
        continuation_id = continuation_id_from_metadata(result.metadata)
        duration_ms = int((time.monotonic() - started) * 1000)
        return Inference(response, input_tokens, output_tokens, bool(streamed), continuation_id, duration_ms)

    async def _count(self, count: Callable[[], int], chars: int | None) -> int:
        """A token count: on the loop for a short text (tens of microseconds), on the host's
        pool for a long one, or one of unknown length (`chars` None): milliseconds for a long
        conversation, which the loop must not spend; and the first (the encoding's load)."""
        if chars is not None and chars <= COUNT_ON_LOOP_CHARS and encoding_loaded():
            return count()
        return await self.host.pool.run(count)

    def _full_request(self, messages: list[Message], cache_key: str) -> dict[str, Any]:
        """The request with the whole conversation: what every token count is taken on."""
        setup = self.setup
        return build_request(model=setup.model, max_tokens=setup.max_tokens, system=setup.system,
                             messages=messages, tools=setup.tools, prompt_cache_key=cache_key)

    def _input_count(self, messages: list[Message], full: dict[str, Any]) -> Callable[[str | None], int]:
        """What counts the tokens of the full request, run off the event loop with the driver call
        (milliseconds for a long conversation), once per turn: the compaction check after a turn
        counted the very request the next turn sends, so that count is reused while the
        conversation is unchanged. Given the full request's JSON already made (the driver's input
        when it is sent whole), it counts that text instead of serializing the request again."""
        key = tuple(m.id for m in messages)
        counted, self._counted = self._counted, None
        if counted is not None and counted[0] == key:
            tokens = counted[1]
            return lambda _text: tokens
        return lambda text: count_tokens(text if text is not None else json.dumps(full))

    def _account(self, input_tokens: int, output_tokens: int) -> None:
        self.totals.input_tokens += input_tokens
        self.totals.output_tokens += output_tokens

    def _check_spend(self) -> None:
        ceiling = self.setup.max_session_tokens
        if ceiling is not None and self.totals.input_tokens + self.totals.output_tokens >= ceiling:
            raise SessionEnded(f"session token ceiling ({ceiling}) reached", "spend_ceiling_reached")

    # -- tools -------------------------------------------------------------------------------

    async def _run_tools(self, state: LoopState, response: DriverResponse, turn: int, events: TaskEvents) -> None:
        for call in response.tool_calls:
            call_id = str(call["id"])
            text, is_error = await self.run_tool_call(state, call["name"], call.get("input", {}), turn, events)
            state.messages.append(tool_message(call_id, text, is_error))

    async def run_tool_call(self, state: LoopState, name: str, tool_input: Any, turn: int,
                            events: TaskEvents) -> tuple[str, bool]:
        """One model tool call through murmurd's tool path: the decision point (a deny hook's
        refusal is the result), the run, its trace lines, the observation dispatch. The text the
        model sees and whether it is an error (the process transport's MCP server calls it too)."""
        kind = self.runner.kind_of(name)
        shell_call = await self.runner.resolve_shell(name, tool_input) if kind == "shell" else None
        shape = shell_call.shape if shell_call else None
        denial = await self._decide(kind, name, tool_input, shape, turn)
        if denial is not None:
            text = f"denied by hook {denial.hook_name}: {denial.reason}"
            self._trace("call_denied", turn=turn, tool_name=name, hook_name=denial.hook_name,
                        reason=denial.reason, kind="shell" if kind == "shell" else "tool",
                        binary=shape.binary if shape else None)
            events.tool_result(name, text)
            return text, True
        outcome = await self.runner.run(name, tool_input, events.tool_chunk, events.thinking_chunk,
                                        shell_call=shell_call)
        if outcome.event_type == "shell":  # upstream: a `tool_call` line, then the `shell` line
            self._trace("tool_call", turn=turn, **self.runner.shell_tool_call(name, tool_input, outcome))
            self._count_tool_call(state)
        self._trace(outcome.event_type, turn=turn, **outcome.trace)
        if outcome.event_type == "tool_call":  # a skill call is counted apart, never here
            self._count_tool_call(state)
        # every model-requested call is a tool call (upstream: the tool-call event, then the
        # shell event of a shell call)
        failed = outcome.is_error or (outcome.event_type == "shell" and outcome.trace.get("exit_code") != 0)
        await self.dispatcher.on_tool_call(ToolEvent(turn, name, json.dumps(tool_input), {
            "status": "error" if failed else "ok", "output_bytes": len(outcome.text.encode()),
            "duration_ms": outcome.trace.get("duration_ms", 0),
        }))
        if outcome.event_type == "shell":
            state.counters.shell_calls += 1
            self.totals.shell_calls += 1
            await self.dispatcher.on_shell(_observed_shell(turn, name, tool_input, shape, outcome))
        events.tool_result(name, outcome.text)
        return outcome.text, outcome.is_error

    def _count_tool_call(self, state: LoopState) -> None:
        state.counters.tool_calls += 1
        self.totals.tool_calls += 1

    async def _decide(self, kind: str | None, name: str, tool_input: Any, shape: ShellShape | None,
                      turn: int) -> Denial | None:
        """The decision point, after the manifest's own check: an unknown tool or a shell call the
        allowlist refuses never reaches a policy hook (it fails on its own)."""
        if kind is None or (kind == "shell" and shape is None):
            return None
        denial = await self.dispatcher.on_tool_call(ToolEvent(turn, name, json.dumps(tool_input)))
        if denial is not None or shape is None:  # a deny at on-tool-call refuses a shell call too
            return denial
        return await self.dispatcher.on_shell(ShellEvent(turn, shape.binary, shape.command, shape.argv, shape.script))

    # -- compaction --------------------------------------------------------------------------

    async def _maybe_compact(self, state: LoopState, turn: int, cache_key: str) -> None:
        """Counted on the full request the next turn would send (the payload a held continuation
        shrinks is never what the threshold sees)."""
        if self.compactor.settings.threshold is None:
            return
        recount = lambda messages: count_tokens(json.dumps(self._full_request(messages, cache_key)))  # noqa: E731
        tokens = await self.host.pool.run(recount, state.messages)  # a long conversation: milliseconds
        if self.compactor.due(tokens) and await self.compactor.compact(
                state.messages, turn, tokens, lambda messages: self.host.pool.run(recount, messages)):
            return  # replaced: the next turn counts the new conversation
        self._counted = (tuple(m.id for m in state.messages), tokens)

    def _note(self, line: str) -> None:
        """A line in `logs/bootstrap.log`; a refused log (a planted symlink) costs the note, not the task."""
        try:
            workdir = self.staged.workdir
            workdir_fs.append_text(workdir.root, workdir.book(log_file("bootstrap.log")), line)
        except OSError as exc:
            log.warning("logs/bootstrap.log not written: %s", exc)

    # -- trace -------------------------------------------------------------------------------

    def _trace(self, event_type: str, **fields: Any) -> None:
        try:
            self.trace.write(event_type, **fields)
        except TraceWriteError as exc:
            raise SessionEnded(str(exc)) from None


def _observed_shell(turn: int, name: str, tool_input: Any, shape: ShellShape | None, outcome: ToolOutcome) -> ShellEvent:
    """The observation dispatch of a shell call: its shape and what it produced (a refused call
    reports exit code -1 and the refusal as stderr)."""
    ran = outcome.shell
    result: dict[str, Any] = {
        "exit_code": ran.exit_code if ran else -1,
        "stdout": ran.stdout if ran else "",
        "stderr": ran.stderr if ran else outcome.text,
        "stdout_bytes": ran.stdout_bytes if ran else 0,
        "stderr_bytes": ran.stderr_bytes if ran else len(outcome.text.encode()),
        "duration_ms": outcome.trace.get("duration_ms", 0),
    }
    if shape is None:
        return ShellEvent(turn, outcome.trace.get("binary", name), str(outcome.trace.get("command", tool_input)), [name],
                          None, result)
    return ShellEvent(turn, ran.binary_path if ran else shape.binary, shape.command, shape.argv, shape.script, result)
