"""Artifact hook: publishes one JSON object per inference as a hook `artifact`.

Bound to `on-inference` with `commit_policy: artifact`: after each model turn it returns
`artifact('{"turn": N, "decision": "...", ...}')`, which the runtime streams to A2A watchers as
an `artifact` frame. `artifact` must be a JSON object, so the payload is built with
`json.dumps` of a dict, never by string formatting. Every other handler returns `none`.
"""

from __future__ import annotations

import json

from wit_world import exports
from wit_world.imports import lifecycle

NONE = lifecycle.HookOutput_None_()


def summary(event: lifecycle.InferenceEvent) -> dict[str, object]:
    """The artifact's object: the turn, what the model decided, and the tool it asked for."""
    body: dict[str, object] = {"turn": event.turn, "decision": event.decision}
    if event.tool_name is not None:
        body["tool_name"] = event.tool_name
    body["input_tokens"] = event.input_tokens
    body["output_tokens"] = event.output_tokens
    return body


class Lifecycle(exports.Lifecycle):
    def on_inference(self, event: lifecycle.InferenceEvent) -> lifecycle.HookOutput:
        return lifecycle.HookOutput_Artifact(json.dumps(summary(event)))

    def on_stage(self, event: lifecycle.StageEvent) -> lifecycle.HookOutput:
        return NONE

    def on_session_start(self, ctx: lifecycle.SessionContext) -> lifecycle.HookOutput:
        return NONE

    def on_task_start(self, event: lifecycle.TaskStartEvent) -> lifecycle.HookOutput:
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
