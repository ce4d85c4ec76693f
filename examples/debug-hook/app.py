"""Debug hook: prints every hook event as one JSON line on stdout.

Demonstrates a `hook` artifact exporting all three handler interfaces of world `hook`
(`murmur:hook/lifecycle`, `stage` and `task-lifecycle`). Every handler writes
`{"event": "<handler>", "session_id": ..., <event fields>}` and returns the silent
`none` arm of `hook-output` (`HookOutput_None_()` in the Python bindings), so it never
changes the session.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from enum import Enum
from typing import Any

from wit_world import exports
from wit_world.imports import types


def _jsonable(value: Any) -> Any:
    """`value` with dataclasses turned into dicts and enums into their names."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {key: _jsonable(item) for key, item in dataclasses.asdict(value).items()}
    if isinstance(value, Enum):
        return value.name
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    return value


def _emit(event: str, ctx: types.SessionContext, fields: Any = None) -> types.HookOutput:
    """Print one JSON line for `event` and return the `none` output."""
    line: dict[str, Any] = {"event": event, "session_id": ctx.session_id}
    if fields is not None:
        line.update(_jsonable(fields))
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()
    return types.HookOutput_None_()


class Lifecycle(exports.Lifecycle):
    def on_session_start(self, ctx: types.SessionContext) -> types.HookOutput:
        return _emit("on-session-start", ctx, ctx)

    def on_inference(self, ctx: types.SessionContext, event: types.InferenceEvent) -> types.HookOutput:
        return _emit("on-inference", ctx, event)

    def on_tool_call(self, ctx: types.SessionContext, event: types.ToolEvent) -> types.HookOutput:
        return _emit("on-tool-call", ctx, event)

    def on_shell(self, ctx: types.SessionContext, event: types.ShellEvent) -> types.HookOutput:
        return _emit("on-shell", ctx, event)

    def on_compaction(self, ctx: types.SessionContext, event: types.CompactionEvent) -> types.HookOutput:
        return _emit("on-compaction", ctx, event)

    def on_session_end(self, ctx: types.SessionContext, event: types.SessionEndEvent) -> types.HookOutput:
        return _emit("on-session-end", ctx, event)


class Stage(exports.Stage):
    def on_stage(self, ctx: types.SessionContext, event: types.StageEvent) -> types.HookOutput:
        return _emit("on-stage", ctx, event)


class TaskLifecycle(exports.TaskLifecycle):
    def on_task_start(self, ctx: types.SessionContext, event: types.TaskStartEvent) -> types.HookOutput:
        return _emit("on-task-start", ctx, event)

    def on_task_end(self, ctx: types.SessionContext, event: types.TaskEndEvent) -> types.HookOutput:
        return _emit("on-task-end", ctx, event)
