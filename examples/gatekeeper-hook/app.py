"""Gatekeeper hook: reopens a task until its result carries a marker line.

Bound to `on-task-end` with `commit_policy: reopen-task`. It reads the task's result through
`murmur:task-io/read#task-result` — the text the runtime is about to write to `out/result.txt`
(the file itself is written once the task ends, after every reopen, and a hook holds no grant
on the workdir anyway). A result without the line `VERIFIED` gets `reopen-task` with feedback
saying what is missing; the runtime runs the agent loop again with it, within
`lifecycle.max_task_reopens` and `inference.max_turns`. A task that did not end `ok`, or whose
result cannot be read, is left alone: reopening cannot fix a failure the gate did not judge.
"""

from __future__ import annotations

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import lifecycle, murmur_task_io_read

NONE = lifecycle.HookOutput_None_()
MARKER = "VERIFIED"
FEEDBACK = (f"gatekeeper: the result does not carry the marker. Check your answer against the task, "
            f"then give it again with a last line reading exactly {MARKER}.")


def passes(result: str) -> bool:
    return any(line.strip() == MARKER for line in result.splitlines())


class Lifecycle(exports.Lifecycle):
    def on_task_end(self, event: lifecycle.TaskEndEvent) -> lifecycle.HookOutput:
        if event.exit_status != "ok":
            return NONE
        try:
            result = murmur_task_io_read.task_result()
        except Err:
            return NONE
        if result is None or passes(result):
            return NONE
        return lifecycle.HookOutput_ReopenTask(FEEDBACK)

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

    def on_session_end(self, event: lifecycle.SessionEndEvent) -> lifecycle.HookOutput:
        return NONE
