"""Policy hook: denies `rm`, and any shell script that mentions `curl`, before the call runs.

Bound to `on-shell` with `commit_policy: deny`, so the runtime dispatches it at the decision
point (`outcome` is `none`) and honours `deny` there. It decides on `binary`, `argv` and
`script` only, never on `command`: `command` is a display string cut at 200 characters, so a
policy reading it could be walked past with padding. After the call (`outcome` present) it has
nothing to say and returns `none`, as every other handler does.
"""

from __future__ import annotations

import posixpath

from wit_world import exports
from wit_world.imports import lifecycle

DENIED_BINARIES = frozenset({"rm"})
DENIED_IN_SCRIPTS = ("curl",)

NONE = lifecycle.HookOutput_None_()


def _program(path: str) -> str:
    """`/usr/bin/rm` -> `rm` (the runtime canonicalizes `binary` when it resolves the name)."""
    return posixpath.basename(path)


def decide(event: lifecycle.ShellEvent) -> lifecycle.HookOutput:
    """`deny(reason)` for a call this policy refuses, else `none`."""
    programs = {_program(event.binary)}
    if event.argv:
        programs.add(_program(event.argv[0]))  # argv[0] too, should the runtime include it
    denied = sorted(programs & DENIED_BINARIES)
    if denied:
        return lifecycle.HookOutput_Deny(f"policy-hook: {denied[0]} is not allowed")
    script = event.script or ""
    for word in DENIED_IN_SCRIPTS:
        if word in script:
            return lifecycle.HookOutput_Deny(f"policy-hook: scripts may not call {word}")
    return NONE


class Lifecycle(exports.Lifecycle):
    def on_shell(self, event: lifecycle.ShellEvent) -> lifecycle.HookOutput:
        if event.outcome is not None:  # the observation dispatch: the call already ran
            return NONE
        return decide(event)

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

    def on_compaction(self, event: lifecycle.CompactionEvent) -> lifecycle.HookOutput:
        return NONE

    def on_task_end(self, event: lifecycle.TaskEndEvent) -> lifecycle.HookOutput:
        return NONE

    def on_session_end(self, event: lifecycle.SessionEndEvent) -> lifecycle.HookOutput:
        return NONE
