"""The task model every A2A dialect maps onto (runtime-notes §6).

One `TaskRecord` per task, whatever dialect created it. Parts of any kind are kept verbatim
(`TaskMessage.parts` holds the wire dicts); the task text is the text parts joined.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from murmurd import ids


class TaskState(str, Enum):
    SUBMITTED = "submitted"
    WORKING = "working"
    INPUT_REQUIRED = "input-required"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"
    REJECTED = "rejected"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset({TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED, TaskState.REJECTED})


def new_task_id() -> str:
    """`tsk_` + UUIDv7 hex (time-ordered, as upstream mints them)."""
    return ids.new_task_id()


def new_context_id() -> str:
    """`ctx_` + UUIDv7 hex."""
    return ids.new_context_id()


def now_ms() -> int:
    return int(time.time() * 1000)


def part_text(part: dict[str, Any]) -> str | None:
    """The text of a text part in any dialect (`{"text"}`, `{"kind":"text","text"}`, `{"type":"text"}`)."""
    text = part.get("text")
    return text if isinstance(text, str) else None


@dataclass
class TaskMessage:
    message_id: str
    role: str  # user | agent
    parts: list[dict[str, Any]]
    context_id: str | None = None
    task_id: str | None = None
    metadata: dict[str, Any] | None = None

    @property
    def text(self) -> str:
        return "".join(t for t in (part_text(p) for p in self.parts) if t is not None)

    def to_json(self) -> dict[str, Any]:
        return {
            "message_id": self.message_id, "role": self.role, "parts": self.parts,
            "context_id": self.context_id, "task_id": self.task_id, "metadata": self.metadata,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaskMessage:
        return cls(data["message_id"], data["role"], data["parts"], data.get("context_id"),
                   data.get("task_id"), data.get("metadata"))


@dataclass
class TaskArtifact:
    name: str
    parts: list[dict[str, Any]]
    artifact_id: str = field(default_factory=lambda: "art_" + ids.random_hex(8))

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "parts": self.parts, "artifact_id": self.artifact_id}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaskArtifact:
        return cls(data["name"], data["parts"], data["artifact_id"])


@dataclass
class TaskRecord:
    id: str
    context_id: str
    state: TaskState = TaskState.SUBMITTED
    status_message: str | None = None  # the latest status text (an error, a prompt, the answer)
    result_text: str | None = None
    artifacts: list[TaskArtifact] = field(default_factory=list)
    history: list[TaskMessage] = field(default_factory=list)
    origin: str = "operator"
    trust: str = "operator"
    principal: str | None = None  # the credential that created the task (None: none configured)
    created_at: int = field(default_factory=now_ms)
    updated_at: int = field(default_factory=now_ms)

    @property
    def prompt(self) -> str | None:
        """The open request-input prompt, while the task waits for a reply."""
        if self.state is not TaskState.INPUT_REQUIRED:
            return None
        return next((a.parts[0].get("text") for a in self.artifacts if a.name == "prompt" and a.parts), None)

    def brief(self) -> TaskRecord:
        """The record without history, artifacts or result: what is stored when the whole is refused."""
        return TaskRecord(self.id, self.context_id, self.state, self.status_message, origin=self.origin,
                          trust=self.trust, principal=self.principal, created_at=self.created_at)

    def status_frame(self, final: bool) -> dict[str, Any]:
        """The upstream SSE `status` payload (runtime-notes §6) for the record as it is now."""
        status: dict[str, Any] = {"state": self.state.value}
        if self.status_message is not None:
            status["message"] = self.status_message
        if self.state is TaskState.COMPLETED:
            status["response"] = self.result_text
        return {"id": self.id, "context_id": self.context_id, "status": status, "final": final}

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "context_id": self.context_id, "state": self.state.value,
            "status_message": self.status_message, "result_text": self.result_text,
            "artifacts": [a.to_json() for a in self.artifacts], "history": [m.to_json() for m in self.history],
            "origin": self.origin, "trust": self.trust, "principal": self.principal, "created_at": self.created_at, "updated_at": self.updated_at,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaskRecord:
        return cls(
            id=data["id"], context_id=data["context_id"], state=TaskState(data["state"]),
            status_message=data.get("status_message"), result_text=data.get("result_text"),
            artifacts=[TaskArtifact.from_json(a) for a in data.get("artifacts", [])],
            history=[TaskMessage.from_json(m) for m in data.get("history", [])],
            origin=data.get("origin", "operator"), trust=data.get("trust", "operator"), principal=data.get("principal"),
            created_at=data.get("created_at", now_ms()), updated_at=data.get("updated_at", now_ms()),
        )


def new_message_id() -> str:
    """A fresh id for a message the daemon writes (an answer, a status text)."""
    return "msg_" + ids.random_hex(16)


def result_artifact_id(task_id: str) -> str:
    """The stable id of a task's answer artifact, streamed in chunks and shown by get."""
    return f"{task_id}-result"
