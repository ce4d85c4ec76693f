"""murmur-hook-memory-jsonl: a context's turns kept in a JSONL file and brought back at task start.

It receives every event (no `binding`) and commits only `seed-context`. Its file is
`memory.jsonl` in `.`, the filesystem scope the capsule grants it (a hook holds no directory by
default; without one it remembers nothing and says so once on stderr). Three record types, one
JSON object a line:

- `{"type": "turn", "context_id", "task_id", "role": "user", "content"}` at task start (the input);
- `{"type": "turn", ..., "role": "assistant", "content"}` at task end (the result, when there is one);
- `{"type": "task_end", "context_id", "task_id", "exit_status"}`, the task-end mark.

At task start it seeds the context's earlier turns, oldest first, tagged `source-id`
`memory-jsonl:<task-id>`, unless the runtime already loaded that context's threaded history
(`prior-tokens` > 0: seeding would repeat it) or there is no seed budget (`budget-tokens` 0: the
runtime would refuse it). A line that is not a JSON object is skipped, so a torn last line from
a crash costs that line only.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import lifecycle, murmur_task_io_read

NONE = lifecycle.HookOutput_None_()
MEMORY = "memory.jsonl"
SOURCE_PREFIX = "memory-jsonl:"

_task: tuple[str, str] | None = None  # (context_id, task_id) of the running task
_warned = False


def _records() -> list[dict[str, Any]]:
    try:
        with open(MEMORY, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError:  # no scope granted, or nothing remembered yet
        return []
    records = []
    for line in lines:
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            records.append(value)
    return records


def _append(record: dict[str, Any]) -> None:
    global _warned
    try:
        with open(MEMORY, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    except OSError as exc:
        if not _warned:
            _warned = True
            print(f"murmur-hook-memory-jsonl: cannot write {MEMORY} ({exc}); grant the hook a "
                  "capabilities.filesystem.scope to remember turns", file=sys.stderr)


def prior_turns(context_id: str) -> list[lifecycle.Message]:
    """The context's remembered turns, oldest first, as seed messages."""
    return [
        lifecycle.Message(r["role"], r["content"], "", f"{SOURCE_PREFIX}{r.get('task_id', '')}")
        for r in _records()
        if r.get("type") == "turn" and r.get("context_id") == context_id
        and r.get("role") in ("user", "assistant") and isinstance(r.get("content"), str)
    ]


def _task_text(call: Any) -> str | None:
    try:
        return call()
    except Err:
        return None


def _silent(_self: object, _event: object) -> lifecycle.HookOutput:
    return NONE


class Lifecycle(exports.Lifecycle):
    def on_task_start(self, event: lifecycle.TaskStartEvent) -> lifecycle.HookOutput:
        global _task
        _task = (event.context_id, event.task_id)
        seed = prior_turns(event.context_id) if event.budget_tokens and not event.prior_tokens else []
        text = _task_text(murmur_task_io_read.task_input)
        if text is not None:
            _append({"type": "turn", "context_id": event.context_id, "task_id": event.task_id,
                     "role": "user", "content": text})
        return lifecycle.HookOutput_SeedContext(seed) if seed else NONE

    def on_task_end(self, event: lifecycle.TaskEndEvent) -> lifecycle.HookOutput:
        context_id = _task[0] if _task is not None and _task[1] == event.task_id else ""
        result = _task_text(murmur_task_io_read.task_result)
        if result:
            _append({"type": "turn", "context_id": context_id, "task_id": event.task_id,
                     "role": "assistant", "content": result})
        _append({"type": "task_end", "context_id": context_id, "task_id": event.task_id,
                 "exit_status": event.exit_status})
        return NONE

    # Every other handler is silent: the WIT requires each export, this hook has nothing to say there.
    on_stage = on_session_start = on_inference = on_tool_call = on_shell = on_compaction = on_session_end = _silent
