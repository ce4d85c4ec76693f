"""Where a task's live output goes: chunks, tool results, hook artifacts, status changes.

The session loop reports through a `TaskEvents` object; the CLI prints, the A2A daemon fans
out to SSE subscribers. Methods are called on the event loop thread, except the chunk methods,
which the component host calls from a WASM worker thread (implementations must be thread-safe
and must not block).
"""

from __future__ import annotations

from typing import Any


class TaskEvents:
    """Ignores everything. Subclass what you need."""

    def text_chunk(self, text: str) -> None:
        return None

    def thinking_chunk(self, text: str) -> None:
        return None

    def tool_chunk(self, text: str) -> None:
        """A chunk a tool (not the driver) emitted; by default it joins the text stream."""
        self.text_chunk(text)

    def tool_result(self, tool_name: str, content: str) -> None:
        return None

    def artifact(self, tool_name: str, content: Any) -> None:
        return None

    def turn_finished(self, streamed: bool, text: str) -> None:
        """A turn ended; `streamed` says whether its text already went out as chunks."""
        return None
