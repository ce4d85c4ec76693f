"""What a hook's imports reach in a session: inference, tokens, task-io, conversation.

Every method runs on the hook's WASM worker thread. `HookServices` is one hook's
`SessionContext` (so a completion it runs is traced with `origin: hook:<name>`); the session
state they read, the running task, is `ActiveTask`, which the session sets and clears.

`run-inference` is one completion through the capsule's own driver, under the driver's own
grant and environment: `model: none` is the manifest's model, and a model the driver refuses is
the hook's error, never a fallback. It counts like a loop turn (an `inference` trace line and a
`capsule.inference` span, its tokens in the task's and the session's totals, the loop turn it
ran in) and against `inference.max_session_tokens`: past the ceiling it is refused.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from murmurd.host import ComponentHost, HostError, ImportFailed, SessionContext, ToolInput, ToolStatus
from murmurd.host.hook_values import HookMessage, InferenceRequest, InferenceResponse
from murmurd.host.http_egress import EGRESS_DENIED, EgressDenial
from murmurd.session.cache_key import prompt_cache_key
from murmurd.session.counters import Counters
from murmurd.session.driver_protocol import DriverProtocolError, build_request, decision_of, parse_response
from murmurd.session.history import read_history
from murmurd.session.messages import Message
from murmurd.session.tokens import count_tokens
from murmurd.session.usage import normalize_usage
from murmurd.staging.stage import StagedCapsule

from murmurd.trace.writer import TraceWriteError, TraceWriter


@dataclass
class ActiveTask:
    """The task running now, as hook imports see it."""

    text: str
    context_id: str | None
    counters: Counters
    result: str | None = None


@dataclass
class HookSessionState:
    """What the session shares with its hooks' imports. `spend_refusals` counts a hook's
    completions refused at the spend ceiling: an `on-compaction` failure that follows one ends the
    session `spend_ceiling_reached`."""

    staged: StagedCapsule
    host: ComponentHost
    trace: TraceWriter
    totals: Counters
    turn: Callable[[], int]
    active: ActiveTask | None = None
    spend_refusals: int = 0
    loop: asyncio.AbstractEventLoop | None = None  # the session's; counters change only there

    def on_loop(self, change: Callable[[], None]) -> None:
        """Apply a change to the counters on the event loop thread (the loop's own increments run
        there, so an async hook's completion never races them). A blocking hook's change runs
        before the loop resumes: it was scheduled before the call's own completion."""
        if self.loop is None or self.loop.is_closed():
            change()
        else:
            self.loop.call_soon_threadsafe(change)

    @property
    def threaded(self) -> bool:
        return self.staged.manifest.lifecycle.conversation == "threaded"


class HookServices(SessionContext):
    """One hook's session context."""

    def __init__(self, state: HookSessionState, hook_name: str, driver_env: dict[str, str], driver: str | None) -> None:
        self.state = state
        self.hook_name = hook_name
        self._driver_env = driver_env
        self._driver = driver

    # murmur:runtime/tokens
    def count_tokens(self, text: str) -> int:
        return count_tokens(text)

    # murmur:task-io/read
    def task_input(self) -> str:
        return self._task().text

    def task_result(self) -> str | None:
        return self._task().result

    # murmur:conversation/read
    def conversation_history(self) -> list[HookMessage]:
        """The context's durable history (what a threaded task loads), oldest first; [] when the
        capsule is stateless or the context has none yet."""
        active = self.state.active
        if not self.state.threaded or active is None or not active.context_id:
            return []
        try:
            messages = read_history(self.state.staged, active.context_id)
        except (OSError, ValueError, TypeError) as exc:
            raise ImportFailed(f"conversation: the history of {active.context_id} cannot be read: {exc}") from None
        return [HookMessage(m.role, m.text, m.id, m.source_id) for m in messages]

    # murmur:runtime/inference
    def run_inference(self, request: InferenceRequest) -> InferenceResponse:
        state = self.state
        inference = state.staged.manifest.inference
        if inference is None or self._driver is None or self._driver not in state.staged.artifacts:
            raise ImportFailed("runtime/inference: this capsule declares no inference driver")
        self._check_spend(inference.max_session_tokens)
        model = request.model or inference.model or ""
        active = state.active
        wire = build_request(
            model=model, max_tokens=inference.max_tokens, system=request.system_prompt or "",
            messages=[Message(m.role, [{"type": "text", "text": m.content}]) for m in request.messages], tools=[],
            prompt_cache_key=prompt_cache_key(state.staged.manifest.name, state.staged.manifest.version,
                                              active.context_id if active else None),
        )
        started = time.monotonic()
        data = json.dumps(wire)
        raw = self._call_driver(data, model)
        input_tokens, output_tokens = count_tokens(data), count_tokens(raw)
        self._account(input_tokens, output_tokens)
        try:
            response = parse_response(raw)
        except DriverProtocolError as exc:
            raise ImportFailed(f"runtime/inference: {exc}") from None
        self._trace(response, input_tokens, output_tokens, model, int((time.monotonic() - started) * 1000))
        if response.stop_reason == "error":
            raise ImportFailed(f"runtime/inference: the driver refused model {model!r}: {response.error or 'no message'}")
        return InferenceResponse(response.text, model, input_tokens, output_tokens)

    def _call_driver(self, data: str, model: str) -> str:
        staged = self.state.staged
        assert self._driver is not None
        driver = staged.artifacts[self._driver]
        env = {**self._driver_env, "MURMUR_INFERENCE_MODEL": model}
        grant = dataclasses.replace(staged.call_grant(self._driver, log_name=f"driver-{self._driver}.log"), env=env)
        try:
            result = self.state.host.call_tool_sync(driver.component, ToolInput(data=data), grant=grant, session=self)
        except HostError as exc:
            raise ImportFailed(f"runtime/inference: driver {exc}") from None
        raw = result.data if result.data is not None else (result.summary or "")
        if result.status is not ToolStatus.PASSED:
            raise ImportFailed(f"runtime/inference: the driver refused model {model!r}: {raw or result.status.value}")
        return raw

    def _check_spend(self, ceiling: int | None) -> None:
        totals = self.state.totals
        if ceiling is not None and totals.input_tokens + totals.output_tokens >= ceiling:
            self.state.spend_refusals += 1
            raise ImportFailed(f"runtime/inference: refused, the session token ceiling ({ceiling}) is reached")

    def _account(self, input_tokens: int, output_tokens: int) -> None:
        """A hook completion counts as a turn, in the session's totals and the running task's."""
        touched = [self.state.totals] + ([self.state.active.counters] if self.state.active else [])

        def change() -> None:
            for counters in touched:
                counters.turns += 1
                counters.input_tokens += input_tokens
                counters.output_tokens += output_tokens

        self.state.on_loop(change)

    def _trace(self, response, input_tokens: int, output_tokens: int, model: str, duration_ms: int) -> None:  # type: ignore[no-untyped-def]
        decision = decision_of(response.stop_reason)
        try:
            self.state.trace.write("inference", turn=self.state.turn(), input_tokens=input_tokens,
                                   output_tokens=output_tokens, decision=decision, tool_name=None,
                                   usage=normalize_usage(response.usage) or None, duration_ms=duration_ms,
                                   origin=f"hook:{self.hook_name}", model=model)
        except TraceWriteError as exc:
            raise ImportFailed(f"runtime/inference: the trace refused the inference event: {exc}") from None

    # wasi:http: a request the hook's grant does not list
    def egress_denied(self, denial: EgressDenial) -> None:
        self.state.trace.write(EGRESS_DENIED, turn=self.state.turn(), **denial.fields())

    def _task(self) -> ActiveTask:
        if self.state.active is None:
            raise ImportFailed("task-io: no task is running")
        return self.state.active
