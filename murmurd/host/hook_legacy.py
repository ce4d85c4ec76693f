"""Hooks built against the published layout, `murmur:hook@0.5.0` / `murmur:runtime@0.2.0`.

murmur's default hook artifacts import `murmur:runtime/inference@0.2.0` and export
`murmur:hook/lifecycle@0.5.0`; murmurd serves the seed's `hook@0.8.0` / `runtime@0.3.0`. Both are
served side by side: a hook is linked against the layout its lifecycle export names, and every
difference between the two is adapted here and nowhere else (docs/hooks.md, "hook@0.5.0"):

| seed (0.8.0) value                         | what a 0.5.0 hook gets / gives                        |
|--------------------------------------------|-------------------------------------------------------|
| `message{role, content, id, source-id}`    | `message{role, content}`; ids the hook returns are    |
|                                            | minted (`msg_` + uuid), so nothing it writes can      |
|                                            | claim a history message's id                          |
| `task-start-event` + context-window,       | the first four fields only                            |
|   budget-tokens, prior-tokens              |                                                       |
| `tool-event` at the decision point         | not dispatched (0.5.0 has no decision point)          |
| `tool-event` with `outcome`                | flat `{turn, tool-name, input-bytes, output-bytes,    |
|                                            | duration-ms, status}`                                 |
| `shell-event` at the decision point        | not dispatched                                        |
| `shell-event` with `outcome`               | flat `{turn, binary, command, exit-code, stdout,      |
|                                            | stderr, stdout-bytes, stderr-bytes, duration-ms}`     |
| `hook-output` arms seed-context, deny      | cannot be returned (the 0.5.0 variant lacks them); a  |
|                                            | `replace-context` from `on-task-start` is taken as    |
|                                            | `seed-context`; a returned message's content that is  |
|                                            | one JSON string is decoded (the 0.5.0 host parses it) |
| `runtime/inference@0.3.0`                  | `runtime/inference@0.2.0`: the same call, messages    |
|                                            | without ids                                           |
| `runtime/tokens`, `task-io/read`,          | not offered (the 0.5.0 world has only `inference`)    |
|   `conversation/read`                      |                                                       |

Every other record (stage, session-context, inference, compaction, task-end, session-end) has
the same fields in the same order in both layouts.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Iterable
from typing import Any

from wasmtime.component import Variant

from murmurd.host.hook_values import (
    CompactionEvent,
    HookMessage,
    HookOutput,
    InferenceRequest,
    ShellEvent,
    TaskStartEvent,
    ToolEvent,
    hook_output_from_wasm,
    to_wasm,
)
from murmurd.host.interface_names import parse_interface
from murmurd.host.values import field_of, make_record

LIFECYCLE = "murmur:hook/lifecycle"
INFERENCE = "murmur:runtime/inference"
VERSIONS: dict[str, str] = {LIFECYCLE: "0.5.0", INFERENCE: "0.2.0"}
LIFECYCLE_EXPORT = f"{LIFECYCLE}@0.5.0"
# What a 0.5.0 hook may import: `inference`, with `lifecycle` riding along for its types.
IMPORTS: frozenset[str] = frozenset({LIFECYCLE, INFERENCE})
ARMS: frozenset[str] = frozenset({"none", "replace-context", "write-manifests", "artifact", "reopen-task"})


class Skip:
    """This dispatch does not exist in the 0.5.0 layout: the hook is not called, `none` stands."""


SKIP = Skip()


def is_legacy(exports: Iterable[str]) -> bool:
    """Whether a component's exports name the 0.5.0 lifecycle."""
    return LIFECYCLE_EXPORT in exports


def _message(message: HookMessage) -> Any:
    return make_record(role=message.role, content=message.content)


def event_to_wasm(argument: Any) -> Any:
    """A seed-era event as the 0.5.0 record, or `SKIP` for a dispatch 0.5.0 does not have."""
    if isinstance(argument, TaskStartEvent):
        return make_record(task_id=argument.task_id, context_id=argument.context_id, source=argument.source,
                           input_bytes=argument.input_bytes)
    if isinstance(argument, ToolEvent):
        if argument.outcome is None:
            return SKIP
        outcome = argument.outcome
        return make_record(turn=argument.turn, tool_name=argument.tool_name, input_bytes=argument.input_bytes,
                           output_bytes=outcome.output_bytes, duration_ms=outcome.duration_ms, status=outcome.status)
    if isinstance(argument, ShellEvent):
        if argument.outcome is None:
            return SKIP
        done = argument.outcome
        return make_record(turn=argument.turn, binary=argument.binary, command=argument.command,
                           exit_code=done.exit_code, stdout=done.stdout, stderr=done.stderr,
                           stdout_bytes=done.stdout_bytes, stderr_bytes=done.stderr_bytes, duration_ms=done.duration_ms)
    if isinstance(argument, CompactionEvent):
        return make_record(messages=[_message(m) for m in argument.messages], session_tokens=argument.session_tokens,
                           threshold=float(argument.threshold), model=argument.model,
                           system_prompt=argument.system_prompt)
    return to_wasm(argument)


def minted_message(record: Any) -> HookMessage:
    """A 0.5.0 `message` as the seed's: a fresh id, no source id."""
    return HookMessage(role=field_of(record, "role"), content=field_of(record, "content"),
                       id=f"msg_{uuid.uuid4().hex}", source_id=None)


def returned_message(record: Any) -> HookMessage:
    """A message a 0.5.0 hook returns: minted, and a content that is one JSON string decoded to
    that string. The 0.5.0 host parses returned content as JSON, so murmur's default hooks
    JSON-encode a plain text (murmur-hook-compact's summary); the model reads the text."""
    message = minted_message(record)
    content = message.content
    if content.startswith('"') and content.endswith('"'):
        try:
            decoded = json.loads(content)
        except ValueError:
            decoded = None
        if isinstance(decoded, str):
            return dataclasses.replace(message, content=decoded)
    return message


def handler_result_from_wasm(raw: Any, handler: str | None = None) -> HookOutput | str:
    """A 0.5.0 handler's `result<hook-output, string>`. The 0.5.0 variant has no `seed-context`:
    a `replace-context` from `on-task-start` (how murmur's default memory hook seeds a task) is
    the seed's `seed-context`, measured against the seed budget like any other."""
    if isinstance(raw, str):
        return raw
    if not isinstance(raw, Variant) or raw.tag not in ARMS:
        raise TypeError(f"unexpected hook@0.5.0 handler result {raw!r}")
    if raw.tag == "replace-context":
        arm = "seed-context" if handler == "on-task-start" else "replace-context"
        return HookOutput(arm, [returned_message(m) for m in raw.payload])
    return hook_output_from_wasm(raw)


def inference_request_from_wasm(record: Any) -> Any:
    return InferenceRequest(messages=[minted_message(m) for m in field_of(record, "messages")],
                            system_prompt=field_of(record, "system-prompt"), model=field_of(record, "model"))


def check_layout(imports: Iterable[str], exports: Iterable[str]) -> str | None:
    """Why a hook mixes the two layouts (a 0.5.0 export with seed imports, or the reverse), or None."""
    legacy = is_legacy(exports)
    for name in imports:
        iface = parse_interface(name)
        if iface is None or iface.namespace != "murmur":
            continue
        if legacy and (iface.unversioned not in IMPORTS or iface.version != VERSIONS[iface.unversioned]):
            return (f"import {iface}: a hook exporting {LIFECYCLE_EXPORT} may import only "
                    f"{INFERENCE}@0.2.0 (and {LIFECYCLE}@0.5.0 for its types)")
        if not legacy and iface.version == VERSIONS.get(iface.unversioned):
            return f"import {iface}: the hook@0.5.0 layout, but the hook exports the seed's lifecycle"
    return None
