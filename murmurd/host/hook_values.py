"""Host-side values of the hook WIT (`murmur:hook/lifecycle@0.8.0`, `murmur:runtime/inference`),
and their conversion to and from wasmtime component values.

Every record is a frozen dataclass whose fields are the WIT fields in WIT order, in snake_case:
the canonical ABI is positional, so keeping the order here keeps one place to compare against
`wit/hook/`. Lowering is generic (a dataclass becomes a `wasmtime.component.Record` with the
hyphenated names); lifting is written out for the few values a guest returns.

wasmtime-py represents `hook-output` (a variant whose cases overlap in Python type) as
`Variant(tag, payload)`, and `result<hook-output, string>` untagged: the `Variant` for `ok`, a
plain `str` for `err`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from wasmtime.component import Variant

from murmurd.host.values import field_of, make_record

# The nine handlers, in WIT order.
HANDLERS: tuple[str, ...] = (
    "on-stage",
    "on-session-start",
    "on-task-start",
    "on-inference",
    "on-tool-call",
    "on-shell",
    "on-compaction",
    "on-task-end",
    "on-session-end",
)
# A component may leave these out; it is never dispatched for them.
OPTIONAL_HANDLERS: frozenset[str] = frozenset({"on-task-start", "on-task-end"})
# A component may leave this out; the runtime logs the absence and staging continues.
LOGGED_IF_MISSING: frozenset[str] = frozenset({"on-stage"})
# Missing any of these fails the load, naming it.
REQUIRED_HANDLERS: frozenset[str] = frozenset(HANDLERS) - OPTIONAL_HANDLERS - LOGGED_IF_MISSING

# `hook-output` arms, in WIT case order.
ARMS: tuple[str, ...] = ("none", "replace-context", "write-manifests", "artifact", "reopen-task", "seed-context", "deny")
_MESSAGE_ARMS = frozenset({"replace-context", "seed-context"})
_TEXT_ARMS = frozenset({"artifact", "reopen-task", "deny"})


@dataclass(frozen=True)
class HookMessage:
    """`message`: `id` is minted by the runtime (`msg_` + uuid); `source_id` is opaque."""

    role: str
    content: str
    id: str
    source_id: str | None = None


@dataclass(frozen=True)
class ToolManifest:
    binary_name: str
    content: str


@dataclass(frozen=True)
class HookOutput:
    """`hook-output`: `arm` is the WIT case name; `value` its payload (`None` for `none`).

    `replace-context`/`seed-context` carry `list[HookMessage]`, `write-manifests`
    `list[ToolManifest]`, `artifact`/`reopen-task`/`deny` a `str`."""

    arm: str
    value: Any = None

    def __post_init__(self) -> None:
        if self.arm not in ARMS:
            raise ValueError(f"hook-output has no arm {self.arm!r} (arms: {', '.join(ARMS)})")


@dataclass(frozen=True)
class SessionContextRecord:
    """`session-context`, given to `on-session-start` only."""

    capsule_name: str
    capsule_version: str
    session_id: str
    model: str
    capabilities: list[str]


@dataclass(frozen=True)
class StageEvent:
    shell_allow: list[str]


@dataclass(frozen=True)
class TaskStartEvent:
    task_id: str
    context_id: str
    source: str
    input_bytes: int
    context_window: int
    budget_tokens: int
    prior_tokens: int


@dataclass(frozen=True)
class TaskEndEvent:
    task_id: str
    exit_status: str


@dataclass(frozen=True)
class InferenceEvent:
    turn: int
    input_tokens: int
    output_tokens: int
    decision: str
    tool_name: str | None = None
    prompt: str | None = None
    output: str | None = None
    tools: str | None = None  # the offered tools as a JSON string


@dataclass(frozen=True)
class ToolOutcome:
    output_bytes: int
    duration_ms: int
    status: str


@dataclass(frozen=True)
class ToolEvent:
    """`outcome` is None at the decision point (before the call)."""

    turn: int
    tool_name: str
    input: str
    input_bytes: int
    outcome: ToolOutcome | None = None


@dataclass(frozen=True)
class ShellOutcome:
    exit_code: int
    stdout: str
    stderr: str
    stdout_bytes: int
    stderr_bytes: int
    duration_ms: int


@dataclass(frozen=True)
class ShellEvent:
    """A policy decides on `binary`, `argv` and `script`; `command` is a cut display string."""

    turn: int
    binary: str
    command: str
    argv: list[str]
    script: str | None = None
    recipe: str | None = None
    outcome: ShellOutcome | None = None


@dataclass(frozen=True)
class CompactionEvent:
    messages: list[HookMessage]
    session_tokens: int
    threshold: float  # a fraction of context.max_tokens
    model: str | None = None
    system_prompt: str | None = None


@dataclass(frozen=True)
class SessionEndEvent:
    total_turns: int
    total_input_tokens: int
    total_output_tokens: int
    total_tool_calls: int
    total_shell_calls: int
    duration_ms: int
    exit_status: str


@dataclass(frozen=True)
class InferenceRequest:
    """`model: None` means the manifest's model."""

    messages: list[HookMessage]
    system_prompt: str | None = None
    model: str | None = None


@dataclass(frozen=True)
class InferenceResponse:
    text: str
    model_used: str
    input_tokens: int
    output_tokens: int


# Which argument each handler takes.
HANDLER_EVENT: dict[str, type] = {
    "on-stage": StageEvent,
    "on-session-start": SessionContextRecord,
    "on-task-start": TaskStartEvent,
    "on-inference": InferenceEvent,
    "on-tool-call": ToolEvent,
    "on-shell": ShellEvent,
    "on-compaction": CompactionEvent,
    "on-task-end": TaskEndEvent,
    "on-session-end": SessionEndEvent,
}


# -- lowering (host -> guest) ---------------------------------------------------------------


def to_wasm(value: Any) -> Any:
    """Any of the records above (nested, in lists, optional) as a wasmtime value."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if isinstance(value, HookOutput):
            return hook_output_to_wasm(value)
        return make_record(
            **{f.name: _field_to_wasm(f, getattr(value, f.name)) for f in dataclasses.fields(value)}
        )
    if isinstance(value, (list, tuple)):
        return [to_wasm(item) for item in value]
    return value


def _field_to_wasm(field: dataclasses.Field[Any], value: Any) -> Any:
    if field.type == "float" and isinstance(value, int):
        return float(value)  # wasmtime lowers f64 only from a float
    return to_wasm(value)


def hook_output_to_wasm(output: HookOutput) -> Variant:
    return Variant(output.arm, None if output.arm == "none" else to_wasm(output.value))


# -- lifting (guest -> host) ----------------------------------------------------------------


def message_from_wasm(record: Any) -> HookMessage:
    return HookMessage(
        role=field_of(record, "role"),
        content=field_of(record, "content"),
        id=field_of(record, "id"),
        source_id=field_of(record, "source-id"),
    )


def tool_manifest_from_wasm(record: Any) -> ToolManifest:
    return ToolManifest(binary_name=field_of(record, "binary-name"), content=field_of(record, "content"))


def hook_output_from_wasm(variant: Variant) -> HookOutput:
    arm, payload = variant.tag, variant.payload
    if arm in _MESSAGE_ARMS:
        return HookOutput(arm, [message_from_wasm(m) for m in payload])
    if arm == "write-manifests":
        return HookOutput(arm, [tool_manifest_from_wasm(m) for m in payload])
    if arm in _TEXT_ARMS:
        return HookOutput(arm, str(payload))
    return HookOutput(arm)


def inference_request_from_wasm(record: Any) -> InferenceRequest:
    return InferenceRequest(
        messages=[message_from_wasm(m) for m in field_of(record, "messages")],
        system_prompt=field_of(record, "system-prompt"),
        model=field_of(record, "model"),
    )


def handler_result_from_wasm(raw: Any) -> HookOutput | str:
    """A handler's `result<hook-output, string>`: the output, or the `err` text as a `str`."""
    if isinstance(raw, Variant):
        return hook_output_from_wasm(raw)
    if isinstance(raw, str):
        return raw
    raise TypeError(f"unexpected handler result {raw!r}")


__all__ = [
    "ARMS", "CompactionEvent", "HANDLERS", "HANDLER_EVENT", "HookMessage", "HookOutput",
    "InferenceEvent", "InferenceRequest", "InferenceResponse", "LOGGED_IF_MISSING",
    "OPTIONAL_HANDLERS", "REQUIRED_HANDLERS", "SessionContextRecord", "SessionEndEvent",
    "ShellEvent", "ShellOutcome", "StageEvent", "TaskEndEvent", "TaskStartEvent", "ToolEvent",
    "ToolManifest", "ToolOutcome", "handler_result_from_wasm", "hook_output_from_wasm",
    "hook_output_to_wasm", "inference_request_from_wasm", "message_from_wasm", "to_wasm",
]
