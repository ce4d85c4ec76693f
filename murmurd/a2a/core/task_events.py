"""A running task's live output (driver chunks, tool results) onto the capsule's event log."""

from __future__ import annotations

import asyncio
from typing import Any

from murmurd.a2a.core.stream import EventLog
from murmurd.session.events import TaskEvents


class StreamEvents(TaskEvents):
    """Publishes a task's live output to the capsule's event log (chunks hop threads safely)."""

    def __init__(self, log: EventLog, loop: asyncio.AbstractEventLoop, task_id: str) -> None:
        self.log, self.loop, self.task_id = log, loop, task_id

    def text_chunk(self, text: str) -> None:
        self.log.publish_threadsafe(self.loop, "text", self.task_id, {"id": self.task_id, "text": text, "final": False})

    def tool_chunk(self, text: str) -> None:
        """A tool's live output: a `text` frame marked `"source": "tool"`, never the answer's."""
        self.log.publish_threadsafe(self.loop, "text", self.task_id,
                                    {"id": self.task_id, "text": text, "final": False, "source": "tool"})

    def thinking_chunk(self, text: str) -> None:
        self.log.publish_threadsafe(self.loop, "thinking", self.task_id, {"id": self.task_id, "text": text, "final": False})

    def tool_result(self, tool_name: str, content: str) -> None:
        self.artifact(tool_name, content)

    def artifact(self, tool_name: str, content: Any) -> None:
        payload = {"id": self.task_id, "artifact": {"tool_name": tool_name, "content": content}}
        self.log.publish("artifact", self.task_id, payload)

    def turn_finished(self, streamed: bool, text: str) -> None:
        self.log.publish("text", self.task_id, {"id": self.task_id, "text": "" if streamed else text, "final": True})
