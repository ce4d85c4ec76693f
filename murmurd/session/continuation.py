"""Stateful driver continuation (seed: "Stateful driver continuation").

By default every turn resends the full conversation. A driver that returns a non-empty
`continuation_id` in its result metadata is holding the conversation provider-side; while
the runtime holds that id, the next turn of the *same* context sends only the messages
appended since the driver acknowledged state, plus the id. The driver acknowledges the messages
it was *sent*: the assistant message it returned is not among them, so the next incremental
request carries that message plus the tool results appended after it (upstream's continuation
driver sees 2 messages after one tool call where a full resend carries 3). A different context, an
omitted or empty id, or a committed `replace-context` (compaction) means a full resend.

A `None` context id never continues: without a context there is no proof the next turn
belongs to the same task. If the history is shorter than what the driver acknowledged
(it was replaced without `drop()`), the held id is dropped and the turn is a full resend.
Token accounting never uses the smaller payload: the loop counts the full conversation.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

CONTINUATION_KEY = "continuation_id"

M = TypeVar("M")


def continuation_id_from_metadata(metadata: Iterable[tuple[str, str]]) -> str | None:
    """The `continuation_id` value of a tool-result metadata list (the last one wins), or None."""
    found: str | None = None
    for key, value in metadata:
        if key == CONTINUATION_KEY:
            found = value
    return found


@dataclass
class ContinuationState:
    """What the runtime holds for one session loop: the id, its context, and the acknowledged count."""

    held_id: str | None = None
    context_id: str | None = None
    acknowledged: int = 0

    @property
    def active(self) -> bool:
        return self.held_id is not None

    def messages_to_send(self, context_id: str | None, messages: Sequence[M]) -> tuple[list[M], str | None]:
        """The messages for the next request and the `continuation_id` to send with them (or None)."""
        if self.held_id is not None:
            if context_id is not None and context_id == self.context_id and self.acknowledged <= len(messages):
                return list(messages[self.acknowledged :]), self.held_id
            # Another task's continuation, or a history that no longer contains what the
            # driver acknowledged: never reuse it.
            self.drop()
        return list(messages), None

    def on_response(
        self,
        context_id: str | None,
        metadata_continuation_id: str | None,
        messages_sent: int,
    ) -> None:
        """Record a driver response to a request built from the first `messages_sent` messages of
        the conversation: a non-empty id is held, acknowledging exactly those (never the response
        itself); an absent or empty id drops any held id."""
        if metadata_continuation_id:
            if messages_sent < 0:
                raise ValueError(f"message count must be >= 0, got {messages_sent}")
            self.held_id = metadata_continuation_id
            self.context_id = context_id
            self.acknowledged = messages_sent
        else:
            self.drop()

    def rebase(self, context_id: str | None, known_messages: int) -> None:
        """A new task starts in `context_id` with `known_messages` of earlier conversation ahead of
        its own. Within the held context the driver holds at most what it was sent of that history
        (its last answer is not among it), and nothing of a history the task does not carry."""
        if self.held_id is not None and context_id is not None and context_id == self.context_id:
            self.acknowledged = min(self.acknowledged, known_messages)
        elif self.held_id is not None:
            self.drop()

    def drop(self) -> None:
        """Forget the held id (after a `replace-context` commit): the next turn is a full resend."""
        self.held_id = None
        self.context_id = None
        self.acknowledged = 0
