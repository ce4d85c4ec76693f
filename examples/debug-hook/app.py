"""debug-hook: prints every hook event as one JSON line on stdout.

A `hook` artifact exporting all nine handlers of `murmur:hook/lifecycle@0.8.0`. Only
`on-session-start` receives the session context; the hook keeps its `session_id` and stamps it
on every later line, which shows the runtime keeps one instance for the whole session. Each
line is `{"event": "<handler>", "session_id": ..., <event fields>}`, and every handler returns
the silent `none` arm (`HookOutput_None_()` in the Python bindings), so it never changes the
session.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

from wit_world import exports
from wit_world.imports import lifecycle

_session_id: str | None = None  # set by on-session-start, kept for the session's lifetime


def _jsonable(value: Any) -> Any:
    """`value` with dataclasses turned into dicts (nested records too)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {key: _jsonable(item) for key, item in dataclasses.asdict(value).items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    return value


def _emit(event: str, fields: Any) -> lifecycle.HookOutput:
    """Print one JSON line for `event` and return the `none` output."""
    line: dict[str, Any] = {"event": event, "session_id": _session_id}
    line.update(_jsonable(fields))
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()
    return lifecycle.HookOutput_None_()


class Lifecycle(exports.Lifecycle):
    def on_stage(self, event: lifecycle.StageEvent) -> lifecycle.HookOutput:
        return _emit("on-stage", event)

    def on_session_start(self, ctx: lifecycle.SessionContext) -> lifecycle.HookOutput:
        global _session_id
        _session_id = ctx.session_id
        return _emit("on-session-start", ctx)

    def on_task_start(self, event: lifecycle.TaskStartEvent) -> lifecycle.HookOutput:
        return _emit("on-task-start", event)

    def on_inference(self, event: lifecycle.InferenceEvent) -> lifecycle.HookOutput:
        return _emit("on-inference", event)

    def on_tool_call(self, event: lifecycle.ToolEvent) -> lifecycle.HookOutput:
        return _emit("on-tool-call", event)

    def on_shell(self, event: lifecycle.ShellEvent) -> lifecycle.HookOutput:
        return _emit("on-shell", event)

    def on_compaction(self, event: lifecycle.CompactionEvent) -> lifecycle.HookOutput:
        return _emit("on-compaction", event)

    def on_task_end(self, event: lifecycle.TaskEndEvent) -> lifecycle.HookOutput:
        return _emit("on-task-end", event)

    def on_session_end(self, event: lifecycle.SessionEndEvent) -> lifecycle.HookOutput:
        return _emit("on-session-end", event)
