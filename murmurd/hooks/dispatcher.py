"""The lifecycle seam between the session loop and hooks.

The loop announces every lifecycle point of the seed's handler table through one
`LifecycleDispatcher` and applies what it returns: seed messages at task start, a deny at a
tool or shell decision point, a replacement history at compaction, reopen feedback at task end,
artifacts after inference. This base dispatcher commits nothing; the hooks runtime subclasses
it without reshaping the loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from murmurd.host.hook_values import InferenceEvent, TaskStartEvent
from murmurd.session.counters import Counters
from murmurd.session.messages import Message


@dataclass(frozen=True)
class Denial:
    hook_name: str
    reason: str


@dataclass(frozen=True)
class Reopen:
    hook_name: str
    feedback: str


@dataclass(frozen=True)
class ContextArm:
    """A committed message list (`seed-context`, `replace-context`): the hook that committed it,
    its messages as the loop keeps them (ids freshly minted) and, position for position, the ids
    the hook set: those only tell which earlier message a hook handed back unchanged."""

    hook_name: str
    messages: list[Message]
    hook_ids: list[str]


@dataclass(frozen=True)
class CompactionFailed:
    """A bound `on-compaction` hook erred, trapped or overran: the caller decides what it ends
    (the session at the threshold; only the summary when it was summarizing a seed)."""

    hook_name: str
    reason: str


@dataclass(frozen=True)
class ToolEvent:
    turn: int
    tool_name: str
    input: str
    outcome: dict[str, Any] | None = None  # None: the decision point; else output_bytes, duration_ms, status


@dataclass(frozen=True)
class ShellEvent:
    turn: int
    binary: str  # canonical absolute path when it resolved, else the bare name
    command: str  # display string, at most 200 characters
    argv: list[str]  # exactly what the executable receives, argv[0] included
    script: str | None = None
    # None: the decision point; else exit_code, stdout, stderr, stdout_bytes, stderr_bytes, duration_ms
    outcome: dict[str, Any] | None = None


@dataclass(frozen=True)
class CompactionEvent:
    messages: list[Message]
    session_tokens: int
    threshold: int  # tokens
    fraction: float = 0.98  # the threshold as a fraction of context.max_tokens (what hooks get)
    model: str | None = None  # inference.compaction.model
    system_prompt: str | None = None  # inference.compaction.system_prompt (or its file's text)


@dataclass(frozen=True)
class TaskEnd:
    task_id: str
    exit_status: str


@dataclass(frozen=True)
class SessionEnd:
    totals: Counters
    duration_ms: int
    exit_status: str


@dataclass(frozen=True)
class HookArtifact:
    hook_name: str
    content: dict[str, Any]


@dataclass
class InferenceOutputs:
    artifacts: list[HookArtifact] = field(default_factory=list)


class LifecycleDispatcher:
    """Announces lifecycle points; commits nothing. Subclasses return committed arms."""

    bound: bool = False  # True when some hook receives on-compaction
    turn: int = 0  # the loop turn of the latest event (a hook's own inference is traced with it)

    def listens(self, handler: str) -> bool:
        """Whether any hook receives `handler`: the loop skips building what nobody reads."""
        return False

    async def on_session_start(self) -> None:
        return None

    async def on_task_start(self, event: TaskStartEvent) -> ContextArm | None:
        """The first committed `seed-context` (messages oldest first), or None."""
        return None

    async def on_inference(self, event: InferenceEvent) -> InferenceOutputs:
        return InferenceOutputs()

    async def on_tool_call(self, event: ToolEvent) -> Denial | None:
        """At the decision point (`outcome is None`) a Denial refuses the call."""
        return None

    async def on_shell(self, event: ShellEvent) -> Denial | None:
        return None

    async def on_compaction(self, event: CompactionEvent) -> ContextArm | CompactionFailed | None:
        """A replacement history, a bound hook's failure, or None (nothing bound, or the hooks declined)."""
        return None

    async def on_task_end(self, event: TaskEnd) -> Reopen | None:
        return None

    async def on_session_end(self, event: SessionEnd) -> None:
        """The end of one agent-loop attempt: announced, and every async queue drained, before
        its `session_end` line."""
        return None

    async def aclose(self) -> None:
        """The session closes: deliver what is still queued, then free every hook instance."""
        return None
