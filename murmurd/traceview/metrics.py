"""One session's numbers, from its parsed trace (fact sheet §3 and §5).

Identity and `max_turns` come from the last `session_start`; totals, duration and status from
the last `session_end`; compaction from the last `compaction`. So a trace with one
`session_start`/`session_end` pair per agent-loop attempt (upstream) and one with a single pair
around every task read the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from murmurd.traceview import units
from murmurd.traceview.parse import Event, Trace
from murmurd.traceview.redundancy import RedundantCall, redundant_calls


@dataclass(frozen=True)
class Call:
    """A tool, skill or shell call, tied to the inference line that asked for it."""

    kind: str  # tool | skill | shell
    turn: int
    name: str
    duration_ms: int
    ok: bool
    line: int
    input: Any = None  # tool calls: the input as the model sent it
    exit_code: int | None = None  # shell calls
    command: str | None = None  # shell calls
    state_effect: str | None = None
    resource_id: str | None = None
    timestamp: int | None = None  # when the call returned (Unix ms)

    def to_json(self) -> dict[str, Any]:
        out = {"kind": self.kind, "turn": self.turn, "name": self.name, "duration_ms": self.duration_ms,
               "ok": self.ok, "line": self.line}
        extra = {"input": self.input, "exit_code": self.exit_code, "command": self.command,
                 "state_effect": self.state_effect, "resource_id": self.resource_id}
        out.update({k: v for k, v in extra.items() if v is not None})
        return out


@dataclass
class Turn:
    """One `inference` line of the agent loop and the calls that followed it."""

    turn: int
    decision: str
    tool_name: str | None
    input_tokens: int
    output_tokens: int
    line: int
    timestamp: int | None
    duration_ms: int | None  # murmurd writes the driver call's duration; upstream does not
    attempt: int  # 0-based: which agent-loop attempt (a reopened task runs another)
    started_ms: int | None = None  # timestamp - duration_ms, else the line before it (the model's time)
    calls: list[Call] = field(default_factory=list)
    reported_input: int | None = None  # the provider's own `usage` counts, when it sent them
    reported_output: int | None = None
    hook_inferences: int = 0  # hook `run-inference` completions during this turn

    def to_json(self) -> dict[str, Any]:
        return {"turn": self.turn, "decision": self.decision, "tool_name": self.tool_name,
                "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "duration_ms": self.duration_ms, "timestamp": self.timestamp, "attempt": self.attempt,
                "reported_input_tokens": self.reported_input, "reported_output_tokens": self.reported_output,
                "calls": [c.to_json() for c in self.calls]}


@dataclass(frozen=True)
class TaskSummary:
    task_id: str
    turns: int
    input_tokens: int
    output_tokens: int
    tool_calls: int
    exit_status: str
    duration_ms: int
    reopen_count: int

    def to_json(self) -> dict[str, Any]:
        return dict(vars(self))


@dataclass(frozen=True)
class Reopen:
    number: int
    hook_name: str
    reason: str


@dataclass
class SessionMetrics:
    path: str
    session_id: str
    capsule_name: str
    capsule_version: str
    model: str
    max_turns: int
    exit_status: str
    duration_ms: int
    turns: int
    input_tokens: int
    output_tokens: int
    tool_calls_total: int  # session_end.total_tool_calls
    shell_calls_total: int
    steps: list[Turn]
    tools: list[Call]
    skills: list[Call]
    shells: list[Call]
    redundant: list[RedundantCall]
    compaction: tuple[int, int, int] | None  # (turn, tokens_before, tokens_after)
    reopens: list[Reopen]
    tasks: list[TaskSummary]
    started_ms: int | None
    open: bool = False  # no session_end yet: the session is still running (totals so far)

    @property
    def reported_tokens(self) -> tuple[int, int, int] | None:
        """(input, output, turns) the provider itself reported in `usage`; None when no turn has
        a report. `input_tokens`/`output_tokens` are murmurd's own counts of what was sent."""
        turns = [s for s in self.steps if s.reported_input is not None or s.reported_output is not None]
        if not turns:
            return None
        return (sum(s.reported_input or 0 for s in turns), sum(s.reported_output or 0 for s in turns), len(turns))

    @property
    def tool_ok(self) -> int:
        return sum(1 for c in self.tools if c.ok)

    @property
    def tool_errors(self) -> int:
        return len(self.tools) - self.tool_ok

    @property
    def tool_success_rate(self) -> float | None:
        """Percent of tool calls with status ok; None without tool calls."""
        return 100.0 * self.tool_ok / len(self.tools) if self.tools else None

    @staticmethod
    def _avg(calls: list[Call]) -> float | None:
        return units.ratio(sum(c.duration_ms for c in calls), len(calls)) if calls else None

    @property
    def avg_tool_ms(self) -> float | None:
        return self._avg(self.tools)

    @property
    def avg_shell_ms(self) -> float | None:
        return self._avg(self.shells)

    @property
    def avg_skill_ms(self) -> float | None:
        return self._avg(self.skills)

    def per_turn(self, tokens: int) -> float | None:
        return units.ratio(tokens, self.turns) if self.turns else None

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path, "session_id": self.session_id, "capsule_name": self.capsule_name,
            "capsule_version": self.capsule_version, "model": self.model, "max_turns": self.max_turns,
            "exit_status": self.exit_status, "open": self.open, "duration_ms": self.duration_ms, "turns": self.turns,
            "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
            "reported_tokens": None if self.reported_tokens is None else dict(
                zip(("input_tokens", "output_tokens", "turns"), self.reported_tokens, strict=True)),
            "tool_calls": {"count": len(self.tools), "ok": self.tool_ok, "error": self.tool_errors,
                           "success_rate": self.tool_success_rate, "avg_latency_ms": self.avg_tool_ms,
                           "calls": [c.to_json() for c in self.tools]},
            "redundant_calls": [r.to_json() for r in self.redundant],
            "skill_calls": {"count": len(self.skills), "ok": sum(1 for c in self.skills if c.ok),
                            "avg_latency_ms": self.avg_skill_ms, "calls": [c.to_json() for c in self.skills]},
            "shell_calls": {"count": len(self.shells), "ok": sum(1 for c in self.shells if c.ok),
                            "failed_exit_codes": [c.exit_code for c in self.shells if not c.ok],
                            "avg_latency_ms": self.avg_shell_ms, "calls": [c.to_json() for c in self.shells]},
            "compaction": None if self.compaction is None else dict(
                zip(("turn", "tokens_before", "tokens_after"), self.compaction, strict=True)),
            "reopens": [vars(r) for r in self.reopens],
            "tasks": [t.to_json() for t in self.tasks],
            "steps": [t.to_json() for t in self.steps],
        }


def _int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _opt_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _call(event: Event) -> Call:
    return replace(_call_fields(event), timestamp=_opt_int(event.get("timestamp")))


def _call_fields(event: Event) -> Call:
    turn = _int(event.get("turn"))
    if event.type == "tool_call":
        effect, resource = event.get("state_effect"), event.get("resource_id")
        return Call("tool", turn, event.get("tool_name"), event.get("duration_ms"), event.get("status") == "ok",
                    event.line, input=event.get("input"),
                    state_effect=effect if isinstance(effect, str) else None,
                    resource_id=resource if isinstance(resource, str) else None)
    if event.type == "skill_call":
        return Call("skill", turn, event.get("skill_name"), event.get("duration_ms"), event.get("status") == "ok",
                    event.line)
    binary, command = event.get("binary"), event.get("command")
    name = binary if isinstance(binary, str) else "shell"
    return Call("shell", turn, name, event.get("duration_ms"), event.get("exit_code") == 0, event.line,
                exit_code=event.get("exit_code"), command=command if isinstance(command, str) else None)


def _steps(trace: Trace) -> list[Turn]:
    """Each loop `inference` line with the calls after it; a hook's inference (with `origin`)
    is counted on the turn it ran in (one before the first turn, at `on-session-start`, on
    none). A `session_start` or `task_reopened` starts an attempt."""
    steps: list[Turn] = []
    attempt, pending, previous = -1, True, None
    for event in trace.events:
        before, stamp = previous, event.get("timestamp")
        if isinstance(stamp, int) and not isinstance(stamp, bool):
            previous = stamp
        if event.type in ("session_start", "task_start", "task_reopened"):
            pending = True  # the next loop inference opens a new attempt
            continue
        if event.type == "inference":
            if event.get("origin") is not None:  # a hook's completion is never a loop turn
                if steps:
                    steps[-1].hook_inferences += 1
                continue
            if pending:
                attempt, pending = attempt + 1, False
            tool = event.get("tool_name")
            steps.append(Turn(
                event.get("turn"), event.get("decision"), tool if isinstance(tool, str) else None,
                _int(event.get("input_tokens")), _int(event.get("output_tokens")), event.line,
                _opt_int(event.get("timestamp")), _opt_int(event.get("duration_ms")),
                attempt,
            ))
            step = steps[-1]
            usage = event.get("usage")
            if isinstance(usage, dict):
                step.reported_input = _opt_int(usage.get("input_tokens"))
                step.reported_output = _opt_int(usage.get("output_tokens"))
            if step.timestamp is not None:
                step.started_ms = step.timestamp - step.duration_ms if step.duration_ms is not None else before
        elif event.type in ("tool_call", "skill_call", "shell") and steps:
            steps[-1].calls.append(_call(event))
    return steps


CANCELED = "canceled"
OPEN = "open"


def task_status(task_end: Event) -> str:
    """A canceled task is written `exit_status: failed` (upstream's values) with `error:
    canceled`; the readers show it as `canceled`, its own state, never as a failure."""
    status = task_end.get("exit_status")
    return CANCELED if status == "failed" and task_end.get("error") == CANCELED else status


def _tasks(trace: Trace) -> list[TaskSummary]:
    return [TaskSummary(e.get("task_id"), e.get("turns"), e.get("input_tokens"), e.get("output_tokens"),
                        e.get("tool_calls"), task_status(e), e.get("duration_ms"),
                        _int(e.get("reopen_count"))) for e in trace.of("task_end")]


def _session_status(trace: Trace, end: Event) -> str:
    """The last `session_end`'s status; `canceled` when that attempt ended because its task was."""
    status = end.get("exit_status")
    task_end = trace.last("task_end")
    if status == "failed" and task_end is not None and task_end.line > end.line and task_status(task_end) == CANCELED:
        return CANCELED
    return status


def _totals(trace: Trace, steps: list[Turn], calls: list[Call]) -> dict[str, Any]:
    """An open session's totals so far (no `session_end` carries them yet)."""
    stamps = [e.get("timestamp") for e in trace.events if isinstance(e.get("timestamp"), int)]
    return {"exit_status": OPEN, "duration_ms": (max(stamps) - min(stamps)) if stamps else 0, "turns": len(steps),
            "input_tokens": sum(s.input_tokens for s in steps), "output_tokens": sum(s.output_tokens for s in steps),
            "tool_calls_total": sum(1 for c in calls if c.kind == "tool"),
            "shell_calls_total": sum(1 for c in calls if c.kind == "shell")}


def session_metrics(trace: Trace) -> SessionMetrics:
    """Totals and status from the last `session_end`; a trace without one (parsed with
    `allow_open`) is an open session, its totals summed from what it has written so far."""
    start, end = trace.last("session_start"), trace.last("session_end")
    assert start is not None  # parse_trace guarantees it
    compaction = trace.last("compaction")
    calls = [_call(e) for e in trace.of("tool_call", "skill_call", "shell")]
    first = trace.events[0].get("timestamp")
    steps = _steps(trace)
    totals = _totals(trace, steps, calls) if end is None else {
        "exit_status": _session_status(trace, end), "duration_ms": end.get("duration_ms"),
        "turns": end.get("total_turns"), "input_tokens": end.get("total_input_tokens"),
        "output_tokens": end.get("total_output_tokens"), "tool_calls_total": end.get("total_tool_calls"),
        "shell_calls_total": end.get("total_shell_calls")}
    return SessionMetrics(
        path=trace.path, session_id=start.get("session_id"), capsule_name=start.get("capsule_name"),
        capsule_version=start.get("capsule_version"), model=start.get("model"), max_turns=start.get("max_turns"),
        **totals, open=end is None,
        steps=steps,
        tools=[c for c in calls if c.kind == "tool"],
        skills=[c for c in calls if c.kind == "skill"],
        shells=[c for c in calls if c.kind == "shell"],
        redundant=redundant_calls(trace.events),
        compaction=None if compaction is None else (
            compaction.get("turn"), compaction.get("tokens_before"), compaction.get("tokens_after")),
        reopens=[Reopen(e.get("reopen_number"), e.get("hook_name"), e.get("reason")) for e in trace.of("task_reopened")],
        tasks=_tasks(trace),
        started_ms=_opt_int(first),
    )
