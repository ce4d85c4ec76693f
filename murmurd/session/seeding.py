"""`seed-context`: what a task-start hook committed, measured against the seed budget.

The first bound blocking hook returning `seed-context` at `on-task-start` wins; its messages
(oldest first) go ahead of loaded history and the task message. The budget is
`task-start-event.budget-tokens` (`context.max_tokens` × `context.seed_budget`, rounded down).
A seed is measured message by message (each message's driver JSON plus one token for its
separator), so every outcome can be checked against the budget exactly:

- `committed`: it fits whole;
- `summarized`: the overflowing front (the oldest messages the budget cannot hold) went through
  the capsule's compaction hook, and its summary plus the kept newer messages fit;
- `trimmed`: the oldest messages were dropped until the rest fits (no compaction hook bound, or
  it declined, failed, or wrote a summary that does not fit either);
- `refused`: nothing fits, there is no budget (`0`: no `context.max_tokens` or
  `context.seed_budget`), or a message is not plain `user`/`assistant` text.

Every outcome is one `context_seed` trace event; a refusal never fails the task, and a compaction
hook that fails here costs the summary, not the session.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, replace
from typing import Any

from murmurd.hooks.dispatcher import CompactionEvent, ContextArm, LifecycleDispatcher
from murmurd.session.compaction import WRITABLE_ROLES, CompactionSettings
from murmurd.session.messages import Message
from murmurd.session.tokens import count_tokens


@dataclass(frozen=True)
class Seeded:
    """What a seed became: the messages to place at the head, and its `context_seed` fields."""

    outcome: str  # committed | trimmed | summarized | refused
    messages: list[Message]
    tokens: int
    reason: str | None = None
    summarized_by: str | None = None
    offered_tokens: int = 0


def message_tokens(message: Message) -> int:
    """A seed message's measure: its driver JSON, and one token for the separator."""
    return count_tokens(json.dumps(message.to_driver(), ensure_ascii=False)) + 1


def fitting_suffix(counts: list[int], budget: int) -> int:
    """The index of the oldest message from which the rest fits `budget` (len(counts): none fits)."""
    total = 0
    for index in range(len(counts) - 1, -1, -1):
        if total + counts[index] > budget:
            return index + 1
        total += counts[index]
    return 0


def role_problem(messages: list[Message]) -> str | None:
    """A seed is plain text: a `tool` message has no call to answer, any other role no meaning."""
    for position, message in enumerate(messages, start=1):
        if message.role not in WRITABLE_ROLES:
            return f"message {position} has role {message.role!r}; a seed holds user and assistant text only"
    return None


def trimmed(messages: list[Message], counts: list[int], budget: int, why: str) -> Seeded:
    start = fitting_suffix(counts, budget)
    if start >= len(messages):
        return Seeded("refused", [], 0, f"{why}; even its newest message exceeds the budget")
    return Seeded("trimmed", messages[start:], sum(counts[start:]), f"{why}; dropped its {start} oldest message(s)")


async def measure(arm: ContextArm, budget: int, dispatcher: LifecycleDispatcher,
                  settings: CompactionSettings, fraction: float) -> Seeded:
    """Decide what of a committed seed is placed (see the module docstring)."""
    counts = await asyncio.to_thread(lambda: [message_tokens(m) for m in arm.messages])
    seeded = await _decide(arm, counts, budget, dispatcher, settings, fraction)
    return replace(seeded, offered_tokens=sum(counts))


async def _decide(arm: ContextArm, counts: list[int], budget: int, dispatcher: LifecycleDispatcher,
                  settings: CompactionSettings, fraction: float) -> Seeded:
    messages = arm.messages
    problem = role_problem(messages)
    if problem is not None:
        return Seeded("refused", [], 0, problem)
    total = sum(counts)
    if total <= budget:
        return Seeded("committed", messages, total)
    if budget <= 0:
        return Seeded("refused", [], 0, "no seed budget: the capsule declares no context.max_tokens × "
                                        "context.seed_budget")
    why = f"{total} tokens exceed the budget of {budget}"
    if not dispatcher.bound:
        return trimmed(messages, counts, budget, f"{why}, and no compaction hook is bound")
    start = max(1, fitting_suffix(counts, budget))
    answer = await dispatcher.on_compaction(CompactionEvent(
        messages[:start], total, budget, fraction, settings.model, settings.system_prompt))
    if not isinstance(answer, ContextArm):
        declined = "failed" if answer is not None else "declined"
        return trimmed(messages, counts, budget, f"{why}; the compaction hook {declined} to summarize it")
    summary = answer.messages
    if role_problem(summary) is not None:
        return trimmed(messages, counts, budget, f"{why}; the summary from {answer.hook_name} is not plain text")
    summary_counts = await asyncio.to_thread(lambda: [message_tokens(m) for m in summary])
    placed = [*summary, *messages[start:]]
    tokens = sum(summary_counts) + sum(counts[start:])
    if tokens > budget:
        return trimmed(messages, counts, budget, f"{why}; the summary from {answer.hook_name} does not fit either")
    return Seeded("summarized", placed, tokens, f"{why}; summarized its {start} oldest message(s)",
                  summarized_by=answer.hook_name)


def event_fields(task_id: str, arm: ContextArm, budget: int, seeded: Seeded) -> dict[str, Any]:
    """The `context_seed` event's fields."""
    return {
        "task_id": task_id, "hook_name": arm.hook_name, "outcome": seeded.outcome, "budget_tokens": budget,
        "messages_offered": len(arm.messages), "tokens_offered": seeded.offered_tokens,
        "messages_committed": len(seeded.messages), "tokens_committed": seeded.tokens,
        "summarized_by": seeded.summarized_by, "reason": seeded.reason,
    }

