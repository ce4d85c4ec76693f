"""murmur-hook-memory-jsonl 0.3.0, as published: a durable per-turn memory log, reloaded at task start.

The log is `memory-log.jsonl`, or `$MURMUR_MEMORY_LOG_PATH` when set and not blank (relative to
the hook's directory, the workdir when the capsule grants `filesystem.scope: "."`; missing
parent directories are created). It is append-only. One record a line, `kind` first, written
as serde_json writes them (no spaces, absent options left out):

- `{"kind":"task_open","task_id","context_id","source"}` at task start;
- `{"kind":"turn","turn","decision"[,"tool_name"][,"output"],"input_tokens","output_tokens"}`
  per inference;
- `{"kind":"task_close","task_id","exit_status"}` at task end.

At task start every earlier `turn` record, of every task and session the log holds, comes back
as one `user` message: "Memory Log — K prior turn(s) recorded in this capsule's working
history:" then one `[turn N · <decision>[ tool=<name>]] <output>` line each; no summary, no cap.
Blank lines and lines that are not a record are skipped. A failed append returns `err`.

Upstream returns that message as `replace-context`; on murmurd's lifecycle the arm a task start
commits is `seed-context`, which puts it ahead of the task's input as upstream's replacement
does, measured against `context.seed_budget` like any seed (docs/decisions.md, issue 28).
"""

from __future__ import annotations

import json
import os
from typing import Any

from componentize_py_types import Err
from hookkit import NONE, Silent
from wit_world.imports import lifecycle

DEFAULT_LOG_PATH = "memory-log.jsonl"
LOG_PATH_ENV = "MURMUR_MEMORY_LOG_PATH"
SOURCE_ID = "murmur-hook-memory-jsonl"
U32, U64 = 2**32 - 1, 2**64 - 1


def log_path() -> str:
    configured = os.environ.get(LOG_PATH_ENV)
    return configured if configured is not None and configured.strip() else DEFAULT_LOG_PATH


def _line(record: dict[str, Any]) -> str:
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False)


def append(path: str, record: dict[str, Any]) -> None:
    parent = os.path.dirname(path)
    if parent:
        try:
            os.makedirs(parent, exist_ok=True)
        except OSError as exc:
            raise Err(f"failed to create log directory {parent}: {exc.strerror or exc}") from None
    try:
        handle = open(path, "a", encoding="utf-8")
    except OSError as exc:
        raise Err(f"failed to open {path}: {exc.strerror or exc}") from None
    try:
        with handle:
            handle.write(_line(record) + "\n")
    except OSError as exc:
        raise Err(f"failed to write record: {exc.strerror or exc}") from None


def _count(value: Any, limit: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= limit


def _optional_text(record: dict[str, Any], key: str) -> bool:
    return record.get(key) is None or isinstance(record.get(key), str)


def is_turn(record: Any) -> bool:
    """A line serde would read as a `turn` record (unknown fields are ignored, as serde does)."""
    return (isinstance(record, dict) and record.get("kind") == "turn" and _count(record.get("turn"), U32)
            and isinstance(record.get("decision"), str) and _count(record.get("input_tokens"), U64)
            and _count(record.get("output_tokens"), U64)
            and _optional_text(record, "tool_name") and _optional_text(record, "output"))


def turns(path: str) -> list[dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().split("\n")
    except (OSError, UnicodeDecodeError):
        return []  # a missing (or unreadable) log counts as empty
    found = []
    for line in lines:
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if is_turn(record):
            found.append(record)
    return found


def render(record: dict[str, Any]) -> str:
    tool = f" tool={record['tool_name']}" if record.get("tool_name") is not None else ""
    return f"[turn {record['turn']} \u00b7 {record['decision']}{tool}] {record.get('output') or ''}"


def reload_context(path: str) -> list[lifecycle.Message]:
    lines = [render(r) for r in turns(path)]
    if not lines:
        return []
    text = (f"Memory Log \u2014 {len(lines)} prior turn(s) recorded in this capsule's working history:\n\n"
            + "\n".join(lines))
    return [lifecycle.Message("user", text, "", SOURCE_ID)]


class Lifecycle(Silent):
    def on_task_start(self, event: lifecycle.TaskStartEvent) -> lifecycle.HookOutput:
        path = log_path()
        seed = reload_context(path)
        append(path, {"kind": "task_open", "task_id": event.task_id, "context_id": event.context_id,
                      "source": event.source})
        return lifecycle.HookOutput_SeedContext(seed) if seed else NONE

    def on_inference(self, event: lifecycle.InferenceEvent) -> lifecycle.HookOutput:
        record: dict[str, Any] = {"kind": "turn", "turn": event.turn, "decision": event.decision}
        if event.tool_name is not None:
            record["tool_name"] = event.tool_name
        if event.output is not None:
            record["output"] = event.output
        record.update(input_tokens=event.input_tokens, output_tokens=event.output_tokens)
        append(log_path(), record)
        return NONE

    def on_task_end(self, event: lifecycle.TaskEndEvent) -> lifecycle.HookOutput:
        append(log_path(), {"kind": "task_close", "task_id": event.task_id, "exit_status": event.exit_status})
        return NONE
