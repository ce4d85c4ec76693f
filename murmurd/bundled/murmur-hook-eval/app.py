"""murmur-hook-eval: score the session at its end and append the records to `eval.jsonl`.

The runtime hands the hook `MURMUR_EVAL_CONFIG` (the manifest's `observability.eval` block as
JSON), `MURMUR_DATASET_ID` and, under `murmurd eval run`, `MURMUR_CASE_ID`. The hook watches the
tool calls (`on-tool-call` and `on-shell` observations, in order) and, at `on-session-end`,
scores the totals the runtime reports. The file is written in the hook's `.`, its filesystem
scope: grant `filesystem: {scope: "."}` and it lands beside `trace.jsonl`. Without scorers
(or without a scope) it notes why on stderr (`logs/hook-murmur-hook-eval.log`) and writes nothing.
"""

from __future__ import annotations

import json
import os
import sys
import time

from scoring import Session, records, scorers_of
from wit_world import exports
from wit_world.imports import lifecycle

EVAL_FILE = "eval.jsonl"
NONE = lifecycle.HookOutput_None_()
_tools: list[str] = []  # observed tool calls this session, in order


def _config() -> object:
    try:
        return json.loads(os.environ.get("MURMUR_EVAL_CONFIG") or "{}")
    except ValueError:
        print("MURMUR_EVAL_CONFIG is not JSON; nothing to score", file=sys.stderr)
        return {}


class Lifecycle(exports.Lifecycle):
    def on_stage(self, event: lifecycle.StageEvent) -> lifecycle.HookOutput:
        return NONE

    def on_session_start(self, ctx: lifecycle.SessionContext) -> lifecycle.HookOutput:
        _tools.clear()
        for note in scorers_of(_config())[1]:
            print(f"murmur-hook-eval: {note}", file=sys.stderr)
        return NONE

    def on_task_start(self, event: lifecycle.TaskStartEvent) -> lifecycle.HookOutput:
        return NONE

    def on_inference(self, event: lifecycle.InferenceEvent) -> lifecycle.HookOutput:
        return NONE

    def on_tool_call(self, event: lifecycle.ToolEvent) -> lifecycle.HookOutput:
        if event.outcome is not None:
            _tools.append(event.tool_name)
        return NONE

    def on_shell(self, event: lifecycle.ShellEvent) -> lifecycle.HookOutput:
        if event.outcome is not None:
            _tools.append(event.binary.rsplit("/", 1)[-1])
        return NONE

    def on_compaction(self, event: lifecycle.CompactionEvent) -> lifecycle.HookOutput:
        return NONE

    def on_task_end(self, event: lifecycle.TaskEndEvent) -> lifecycle.HookOutput:
        return NONE

    def on_session_end(self, event: lifecycle.SessionEndEvent) -> lifecycle.HookOutput:
        session = Session(event.exit_status, event.total_turns, event.total_input_tokens, event.total_output_tokens,
                          tuple(_tools))
        lines = records(_config(), session, ts=int(time.time() * 1000),
                        case_id=os.environ.get("MURMUR_CASE_ID") or None,
                        dataset_id=os.environ.get("MURMUR_DATASET_ID") or None)
        if lines:
            try:
                with open(EVAL_FILE, "a", encoding="utf-8") as handle:
                    handle.write("".join(json.dumps(line) + "\n" for line in lines))
            except OSError as exc:
                print(f"murmur-hook-eval: cannot write {EVAL_FILE} (grant filesystem.scope): {exc}", file=sys.stderr)
        return NONE
