"""murmur-hook-debug: appends the lifecycle events to `hook-debug.jsonl`, as murmur's published hook.

Every event but task start and end becomes one JSON line `{"event": <name>, ...fields}` appended
to `hook-debug.jsonl` in the hook's `.` (its `filesystem.scope`), in the published hook's shape
(murmur-hook-debug 0.3.0): keys sorted, no spaces, no timestamp, and only the fields it logs:

- `stage`: `shell_allow`
- `session-start`: `capsule_name`, `capsule_version`, `session_id`, `model`, `capabilities`
- `inference`: `turn`, `input_tokens`, `output_tokens`, `decision`, `tool_name` (the prompt, the
  output and the tools are not logged)
- `tool-call`: `turn`, `tool_name`, `input_bytes`, `output_bytes`, `duration_ms`, `status`
- `shell`: `turn`, `command`, `exit_code`, `stdout_bytes`, `stderr_bytes`, `duration_ms`
- `compaction`: `message_count`, `session_tokens`, `threshold`
- `session-end`: the totals and `exit_status`

The tool-call and shell fields are the observation's (the call has run); this hook commits
nothing, so the runtime never asks it before a call. A file it cannot open or write is its `err`
arm naming the file, as published: the runtime logs and traces it, and the session goes on.
"""

from __future__ import annotations

import json
from typing import Any

from componentize_py_types import Err
from hookkit import NONE, Silent
from wit_world.imports import lifecycle

LOG_FILE = "hook-debug.jsonl"


def line_of(event: str, fields: dict[str, Any]) -> str:
    """One line as the published hook writes it (serde_json: sorted keys, compact, UTF-8)."""
    return json.dumps({"event": event, **fields}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _write(event: str, fields: dict[str, Any]) -> lifecycle.HookOutput:
    try:
        handle = open(LOG_FILE, "a", encoding="utf-8")
    except OSError as exc:
        raise Err(f"failed to open {LOG_FILE}: {exc}") from None
    try:
        with handle:
            handle.write(line_of(event, fields) + "\n")
    except OSError as exc:
        raise Err(f"failed to write hook event: {exc}") from None
    return NONE


class Lifecycle(Silent):
    def on_stage(self, event: lifecycle.StageEvent) -> lifecycle.HookOutput:
        return _write("stage", {"shell_allow": list(event.shell_allow)})

    def on_session_start(self, ctx: lifecycle.SessionContext) -> lifecycle.HookOutput:
        return _write("session-start", {
            "capsule_name": ctx.capsule_name, "capsule_version": ctx.capsule_version,
            "session_id": ctx.session_id, "model": ctx.model, "capabilities": list(ctx.capabilities)})

    def on_inference(self, event: lifecycle.InferenceEvent) -> lifecycle.HookOutput:
        return _write("inference", {
            "turn": event.turn, "input_tokens": event.input_tokens, "output_tokens": event.output_tokens,
            "decision": event.decision, "tool_name": event.tool_name})

    def on_tool_call(self, event: lifecycle.ToolEvent) -> lifecycle.HookOutput:
        outcome = event.outcome
        if outcome is None:  # a decision point: never dispatched to a hook that commits nothing
            return NONE
        return _write("tool-call", {
            "turn": event.turn, "tool_name": event.tool_name, "input_bytes": event.input_bytes,
            "output_bytes": outcome.output_bytes, "duration_ms": outcome.duration_ms, "status": outcome.status})

    def on_shell(self, event: lifecycle.ShellEvent) -> lifecycle.HookOutput:
        outcome = event.outcome
        if outcome is None:
            return NONE
        return _write("shell", {
            "turn": event.turn, "command": event.command, "exit_code": outcome.exit_code,
            "stdout_bytes": outcome.stdout_bytes, "stderr_bytes": outcome.stderr_bytes,
            "duration_ms": outcome.duration_ms})

    def on_compaction(self, event: lifecycle.CompactionEvent) -> lifecycle.HookOutput:
        return _write("compaction", {
            "message_count": len(event.messages), "session_tokens": event.session_tokens,
            "threshold": event.threshold})

    def on_session_end(self, event: lifecycle.SessionEndEvent) -> lifecycle.HookOutput:
        return _write("session-end", {
            "total_turns": event.total_turns, "total_input_tokens": event.total_input_tokens,
            "total_output_tokens": event.total_output_tokens, "total_tool_calls": event.total_tool_calls,
            "total_shell_calls": event.total_shell_calls, "duration_ms": event.duration_ms,
            "exit_status": event.exit_status})
