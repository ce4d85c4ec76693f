"""Invoke capsule: a `capsule` artifact that calls a tool by name.

Demonstrates the `murmur:capsule/run` export and the `murmur:tool-registry/invoke` import:
`run()` reads the task text from `task.md` (falling back to a fixed greeting), invokes the
`echo` tool with it, and writes the echoed data to `out/result.txt`. A `result<tool-result,
string>` import returns the record on success and raises `componentize_py_types.Err`
carrying the message on failure. Without a filesystem the outcome goes to stdout.
"""

from __future__ import annotations

import json
import os

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import invoke
from wit_world.imports.run import Status, ToolInput

DEFAULT_TASK = "hello from capsule"
TASK_FILE = "task.md"
OUT_DIR = "out"
RESULT_FILE = os.path.join(OUT_DIR, "result.txt")


def _task_text() -> str:
    try:
        with open(TASK_FILE, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return DEFAULT_TASK


def _call_echo(text: str) -> tuple[str, str]:
    """Invoke `echo`; returns (status label, outcome text)."""
    try:
        result = invoke.invoke("echo", ToolInput(data=json.dumps({"text": text}), log_path=None))
    except Err as exc:
        return "error", f"error: {exc.value}"
    status = result.status.name.lower()
    if result.status is not Status.PASSED:
        return status, f"error: {result.summary or status}"
    return status, result.data or ""


class Run(exports.Run):
    def run(self) -> None:
        status, outcome = _call_echo(_task_text())
        print(f"invoke echo -> {status}", flush=True)
        try:
            os.makedirs(OUT_DIR, exist_ok=True)
            with open(RESULT_FILE, "w", encoding="utf-8") as handle:
                handle.write(outcome)
        except OSError:
            print(outcome, flush=True)
