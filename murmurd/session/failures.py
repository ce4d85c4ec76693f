"""How a task or a whole session ends early: the exceptions the loop raises and maps to statuses."""

from __future__ import annotations

from murmurd.host import AbortTask, HostError, HostImportError


class TaskFailed(Exception):
    """Ends the task with `exit_status` and `message`; the session goes on."""

    def __init__(self, message: str, exit_status: str = "failed") -> None:
        super().__init__(message)
        self.exit_status = exit_status


class SessionEnded(TaskFailed):
    """Ends the task and the whole session (spend ceiling, trace failure, compaction error)."""


def raise_if_aborted(exc: HostError) -> None:
    """A host import that raised `AbortTask` ends the whole task with its message."""
    if isinstance(exc, HostImportError) and isinstance(exc.failure, AbortTask):
        raise TaskFailed(str(exc.failure)) from None
