"""A threaded context's stored conversation, as the daemon loads it and hooks read it."""

from __future__ import annotations

import json

from murmurd import workdir_fs
from murmurd.session.messages import Message
from murmurd.staging.stage import StagedCapsule
from murmurd.workdir import MAX_HISTORY_BYTES, history_file


def read_history(staged: StagedCapsule, context_id: str) -> list[Message]:
    """The context's history, oldest first; [] when it has none yet. A refused, oversized or
    malformed file raises (OSError, ValueError, TypeError) for the caller to name."""
    home = staged.history_workdir
    try:
        stored = json.loads(workdir_fs.read_text(home.root, home.book(history_file(context_id)),
                                                 max_bytes=MAX_HISTORY_BYTES))
    except FileNotFoundError:
        return []
    return [Message(**m) for m in stored]
