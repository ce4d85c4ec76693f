"""murmur-hook-regression-verifier: reopen a task whose edits broke tests that passed before them.

murmur's published hook (0.2.0; every event, blocking, `commit_policy: reopen-task`):

- `on-shell` (the observation): a test run (the command holds `pytest`, `cargo test`, `go test`,
  `npx jest`, `npm test` or `yarn test`) whose stdout and stderr parse as a known format
  (`testruns`) is a snapshot of that command: its baseline when the task has not edited yet,
  its current result otherwise;
- `on-tool-call`: a `murmur-tool-editor` or `murmur-tool-create` call marks the first edit;
- `on-task-end`: the verdict (`verdict`) is appended to `regression-verifier.jsonl` in the hook's
  `.` (best effort: a refused write goes to stderr) and, when a command regressed, the hook
  returns `reopen-task` naming what broke. The observations are reset at each task's start (and
  the session's), never between the reopened attempts of one task, so a reopened attempt is
  judged against the same baseline.

The command a run is known by is the call's script (`sh -c '<script>'`), else its whole argument
list (`cargo test --lib`): the display `command` omits the binary, so `cargo test` would never
be recognized by it.
"""

from __future__ import annotations

import json
import sys

from hookkit import NONE, Silent
from verdict import Observations, reason, record
from wit_world.imports import lifecycle

LOG_FILE = "regression-verifier.jsonl"
_seen = Observations()


def _append(line: dict) -> None:
    try:
        with open(LOG_FILE, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(line, ensure_ascii=False) + "\n")
    except OSError as exc:
        print(f"[murmur-hook-regression-verifier] could not write {LOG_FILE}: {exc}", file=sys.stderr)


class Lifecycle(Silent):
    def on_session_start(self, ctx: lifecycle.SessionContext) -> lifecycle.HookOutput:
        _seen.reset()
        return NONE

    def on_task_start(self, event: lifecycle.TaskStartEvent) -> lifecycle.HookOutput:
        _seen.reset()
        return NONE

    def on_tool_call(self, event: lifecycle.ToolEvent) -> lifecycle.HookOutput:
        if event.outcome is not None:
            _seen.tool(event.tool_name)
        return NONE

    def on_shell(self, event: lifecycle.ShellEvent) -> lifecycle.HookOutput:
        if event.outcome is not None:
            command = event.script if event.script is not None else " ".join(event.argv)
            _seen.shell(command, event.outcome.stdout, event.outcome.stderr)
        return NONE

    def on_task_end(self, event: lifecycle.TaskEndEvent) -> lifecycle.HookOutput:
        verdict = _seen.verdict()
        _append(record(verdict, event.task_id, event.exit_status))
        return lifecycle.HookOutput_ReopenTask(reason(verdict)) if verdict.reopen else NONE
