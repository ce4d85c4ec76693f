"""From what the loop announces to what a hook receives: the WIT event records (pure).

The loop reports most lifecycle points with the dispatcher's own dataclasses (`hooks.dispatcher`;
`on-task-start` and `on-inference` it reports with the WIT records themselves, which carry
nothing else); these functions turn them into `murmur:hook/lifecycle` records, filling every field the seed's
field notes ask for. The one field that needs I/O, a shell call's `recipe`, is read by the
caller (`recipes.read_recipe`) and passed in.
"""

from __future__ import annotations

from typing import Any

from murmurd.hooks import dispatcher as seam
from murmurd.host import hook_values as wit
from murmurd.session.messages import Message, new_message_id


def hook_message(message: Message) -> wit.HookMessage:
    """A conversation message as hooks see it: role, its text, its id and provenance."""
    return wit.HookMessage(message.role, message.text, message.id, message.source_id)


def loop_message(message: wit.HookMessage) -> Message:
    """A hook-returned message as the loop keeps it: a fresh id (a hook's id is replaced), its
    `source-id` kept verbatim."""
    return Message(message.role, [{"type": "text", "text": message.content}], id=new_message_id(),
                   source_id=message.source_id)


def tool(event: seam.ToolEvent) -> wit.ToolEvent:
    outcome = None
    if event.outcome is not None:
        o = event.outcome
        outcome = wit.ToolOutcome(int(o.get("output_bytes", 0)), int(o.get("duration_ms", 0)), str(o.get("status", "ok")))
    return wit.ToolEvent(event.turn, event.tool_name, event.input, len(event.input.encode()), outcome)


def shell(event: seam.ShellEvent, recipe: str | None) -> wit.ShellEvent:
    outcome = None
    if event.outcome is not None:
        o = event.outcome
        outcome = wit.ShellOutcome(_i32(o.get("exit_code", -1)), str(o.get("stdout", "")), str(o.get("stderr", "")),
                                   int(o.get("stdout_bytes", 0)), int(o.get("stderr_bytes", 0)),
                                   int(o.get("duration_ms", 0)))
    return wit.ShellEvent(event.turn, event.binary, event.command, list(event.argv), event.script, recipe, outcome)


def compaction(event: seam.CompactionEvent) -> wit.CompactionEvent:
    return wit.CompactionEvent([hook_message(m) for m in event.messages], event.session_tokens,
                               float(event.fraction), event.model, event.system_prompt)


def task_end(event: seam.TaskEnd) -> wit.TaskEndEvent:
    return wit.TaskEndEvent(event.task_id, event.exit_status)


def session_end(event: seam.SessionEnd) -> wit.SessionEndEvent:
    t = event.totals
    return wit.SessionEndEvent(t.turns, t.input_tokens, t.output_tokens, t.tool_calls, t.shell_calls,
                               event.duration_ms, event.exit_status)


def _i32(value: Any) -> int:
    number = int(value) if isinstance(value, int) else -1
    return max(-(2**31), min(2**31 - 1, number))
