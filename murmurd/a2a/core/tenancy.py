"""Which tasks a submission may touch, as the daemon judges it (pure; issue 21).

`hidden_from` is `auth.visibility.may_read` in the terms a `Submission` carries (`confined_to`:
a peer credential's name, None for an operator). `same_task` tells a daemon whether a task placed
on it is the very one it holds a local record of, or another send's of the same id.
"""

from __future__ import annotations

from murmurd.a2a.core.intake import Submission
from murmurd.a2a.core.tasks import TaskRecord

CONTEXT_REFUSED = ("context {} holds tasks of another credential; "
                   "start a new context (omit contextId) or use one of your own")


def hidden_from(record: TaskRecord, submission: Submission) -> bool:
    """Is `record` a task the submission's sender may not read (auth/visibility.may_read: a peer
    reads only the tasks it created)?"""
    return submission.confined_to is not None and record.principal != submission.confined_to


def same_task(local: TaskRecord, stored: TaskRecord) -> bool:
    """Is the stored record the task `local` was created as (not another send's of the same id)?"""
    first = (local.history[0].message_id if local.history else None,
             stored.history[0].message_id if stored.history else None)
    return (local.principal, local.context_id, local.created_at, first[0]) == (
        stored.principal, stored.context_id, stored.created_at, first[1])
