"""Which task runs next, which is refused, and which task a reply answers: pure judgements.

The daemon keeps the state (what waits, what runs, what waits for input); these functions only
read it, so every rule of issue 11 is testable without a daemon: the bound, one task per context
at a time in arrival order, `queue_depth`, and routing a reply to exactly one waiting task.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

# `queue` without `max_concurrent_tasks`: a task spends almost all its time waiting on its model
# provider, holding one pool thread and one small session; 16 such tasks cost a few hundred MB at
# most (docs/benchmarks.md) and turn a 1 s provider into 16 tasks/s instead of 1.
DEFAULT_QUEUE_BOUND = 16


def concurrency_bound(task_acceptance: str, max_concurrent_tasks: int | None) -> int:
    """Tasks running at once: `single` and `none` keep upstream's one; `queue` runs up to the bound."""
    if task_acceptance != "queue":
        return 1
    return max_concurrent_tasks or DEFAULT_QUEUE_BOUND


class Queued(Protocol):
    context_id: str


T = TypeVar("T", bound=Queued)


def runnable(waiting: Iterable[T], busy_contexts: Collection[str], running: int, bound: int) -> list[T]:
    """The waiting tasks to start now, in arrival order: at most `bound - running` of them, never
    two of one context, never one whose context already runs a task, never one that would
    overtake an earlier waiting task of its own context."""
    chosen: list[T] = []
    seen: set[str] = set(busy_contexts)
    for record in waiting:
        if running + len(chosen) >= bound:
            break
        if record.context_id in seen:
            continue
        seen.add(record.context_id)
        chosen.append(record)
    return chosen


def starts_at_once(bound: int, running: int, context_busy: bool) -> bool:
    """An accepted task starts as soon as it is queued: below the bound, its context free."""
    return running < bound and not context_busy


def refusal(
    *, accepting: bool, task_acceptance: str, bound: int, running: int, waiting: int, context_busy: bool,
    queue_depth: int, finishing: int = 0, exit_after_task: bool = False,
) -> str | None:
    """Why a new task is rejected, or None to accept it. It has to wait when the bound is reached
    or its context already has a task (the daemon starts what can start at once, so whatever
    waits is blocked); `single` then rejects, `queue` holds `queue_depth` waiting tasks.

    `running` counts the runs whose task has not finished; `finishing` those whose task already
    reads terminal (a caller may have seen it) while the run releases its slot. Those never
    count against the bound, except that under `after_task: exit` the first one ends the intake."""
    if not accepting or (finishing and exit_after_task):
        return "rejected: the capsule is shutting down"
    if starts_at_once(bound, running, context_busy):
        return None
    if task_acceptance == "single":
        return "rejected: the capsule accepts a single task at a time and one is running"
    if task_acceptance == "queue" and waiting >= queue_depth:
        return f"rejected: the task queue is full (queue_depth {queue_depth})"
    return None


@dataclass(frozen=True)
class Waiter:
    """A task waiting on `request-input`."""

    task_id: str
    context_id: str


@dataclass(frozen=True)
class Reply:
    """The message answers this waiting task."""

    task_id: str


@dataclass(frozen=True)
class NewTask:
    """The message starts a task (or is an error the caller handles: a named task not waiting)."""


@dataclass(frozen=True)
class Ambiguous:
    """The message could answer more than one task, or names a task and a context that disagree."""

    reason: str


Route = Reply | NewTask | Ambiguous


def route_message(task_id: str | None, context_id: str | None, waiters: Sequence[Waiter], bound: int) -> Route:
    """Which waiting task a message answers. By task id; else by context id when exactly one task
    of that context waits; a message naming neither answers only where that is unambiguous: a
    bound of 1 (upstream: any message answers the waiting task)."""
    if task_id is not None:
        match = next((w for w in waiters if w.task_id == task_id), None)
        if match is None:
            return NewTask()
        if context_id is not None and context_id != match.context_id:
            return Ambiguous(f"task {task_id} waits for input in context {match.context_id}, "
                             f"but the message names context {context_id}")
        return Reply(task_id)
    if context_id is not None:
        in_context = [w for w in waiters if w.context_id == context_id]
        if len(in_context) > 1:
            return Ambiguous(f"{len(in_context)} tasks of context {context_id} wait for input; "
                             "name the task (taskId) the reply is for")
        if in_context:
            return Reply(in_context[0].task_id)
        if bound == 1 and waiters:
            return Reply(waiters[0].task_id)  # upstream: any message answers the waiting task
        return NewTask()
    if bound == 1 and len(waiters) == 1:
        return Reply(waiters[0].task_id)
    return NewTask()
