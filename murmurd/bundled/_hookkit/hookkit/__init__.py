"""Shared code of murmurd's bundled hooks (built into each through `python_path:`).

The WIT requires a hook to export every `murmur:hook/lifecycle` handler, and most hooks act on a
few. `Silent` answers `none` to all nine; a hook's `Lifecycle` subclasses it and defines only the
handlers it acts on. Imports the guest bindings, so it is built into a guest, never imported by
the daemon.
"""

from __future__ import annotations

from wit_world import exports
from wit_world.imports import lifecycle

NONE = lifecycle.HookOutput_None_()


class Silent(exports.Lifecycle):
    """Every handler answers `none`: the hook has nothing to say at that event."""

    def on_stage(self, event: lifecycle.StageEvent) -> lifecycle.HookOutput:
        return NONE

    def on_session_start(self, ctx: lifecycle.SessionContext) -> lifecycle.HookOutput:
        return NONE

    def on_task_start(self, event: lifecycle.TaskStartEvent) -> lifecycle.HookOutput:
        return NONE

    def on_inference(self, event: lifecycle.InferenceEvent) -> lifecycle.HookOutput:
        return NONE

    def on_tool_call(self, event: lifecycle.ToolEvent) -> lifecycle.HookOutput:
        return NONE

    def on_shell(self, event: lifecycle.ShellEvent) -> lifecycle.HookOutput:
        return NONE

    def on_compaction(self, event: lifecycle.CompactionEvent) -> lifecycle.HookOutput:
        return NONE

    def on_task_end(self, event: lifecycle.TaskEndEvent) -> lifecycle.HookOutput:
        return NONE

    def on_session_end(self, event: lifecycle.SessionEndEvent) -> lifecycle.HookOutput:
        return NONE
