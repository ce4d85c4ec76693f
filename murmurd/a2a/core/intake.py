"""What the A2A edge hands the daemon for one incoming message (`Submission`), and the ways the
daemon turns a message or a request down, which the edge maps to JSON-RPC errors."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from murmurd.a2a.core.tasks import TaskMessage


@dataclass
class Submission:
    """One incoming message, as the JSON-RPC router hands it over."""

    message: TaskMessage
    task_id: str | None = None  # the task the message names (a reply)
    context_id: str | None = None
    origin: str = "operator"
    trust: str = "operator"
    traceparent: str | None = None
    requested_id: str | None = None  # A2A 0.1/0.2: the client chooses the new task's id
    principal: str | None = None  # the credential it came with (None: no credential configured)
    may_reply: Callable[[str | None], bool] | None = None  # given a task's creator: may this answer it?
    confined_to: str | None = None  # a peer credential's name: it may start tasks only in contexts of its own


class TaskNotFound(LookupError):
    pass


class TaskNotCancelable(RuntimeError):
    pass


class NotAReply(ValueError):
    """A message naming a task that is not waiting for input; `finished` when that task is in a
    terminal state (A2A 1.0 and 0.3 answer that UnsupportedOperationError)."""

    def __init__(self, message: str, *, finished: bool = False) -> None:
        super().__init__(message)
        self.finished = finished


class ReplyRefused(PermissionError):
    """A reply to an `input-required` task from a credential less trusted than the task's
    creator (and not an operator): refused, the task keeps waiting."""


class ContextRefused(PermissionError):
    """A new task from a peer credential naming a context that holds another credential's tasks:
    the tasks of a context share its conversation, so joining it would read and steer theirs."""


class AmbiguousReply(NotAReply):
    """A reply that could answer more than one waiting task, or names a task and a context that
    disagree: refused (-32602) rather than guessed."""


class TaskIdTaken(ValueError):
    """A new task's client-chosen id is already a task's (a send that raced for it lost, or the
    task is one the sender may not read): nothing is recorded, the existing task is untouched."""

    def __init__(self, task_id: str) -> None:
        super().__init__(f"task id {task_id!r} is taken; send with another id (or none: the agent picks one)")
        self.task_id = task_id


class TooManyOpenContexts(RuntimeError):
    """A peer credential's new task would open one more context than it may hold open (contexts
    with an unfinished task of its own)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"this credential has unfinished tasks in {limit} contexts, as many as it may hold open; "
                         "wait for one to finish, cancel one, or send into a context already open")
        self.limit = limit
