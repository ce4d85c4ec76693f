"""Writes task states to a SQLite store in this process while the kernel refuses its syncs.

`python tests/refused_syncs.py DB` loads a seccomp filter (irrevocable, so this runs in a process
of its own) that hands every `fsync` and `fdatasync` of the threads started after it to a
supervisor thread. While armed, the supervisor answers EIO (what a failing disk makes of a
sync); otherwise it lets the call through. Prints JSON: what each write came to, and how many
syncs were refused and let through."""

from __future__ import annotations

import asyncio
import errno
import json
import sys
import threading
from pathlib import Path

import pyseccomp as seccomp

from murmurd.a2a.core.tasks import TaskRecord, TaskState, new_context_id, new_task_id
from murmurd.a2a.stores.sqlite import SqliteTaskStore
from refusing_kernel import load_supervised

def record(state: TaskState) -> TaskRecord:
    return TaskRecord(id=new_task_id(), context_id=new_context_id(), state=state, result_text="the answer")


async def writes(path: Path, armed: threading.Event) -> dict[str, str]:
    async def outcome(state: TaskState) -> str:
        try:
            await store.put(record(state))
            return "ok"
        except Exception as exc:  # noqa: BLE001 - what the caller is told, printed
            return f"{type(exc).__name__}: {exc}"

    store = await SqliteTaskStore.open(path)
    try:
        seen = {"completed before": await outcome(TaskState.COMPLETED)}
        armed.set()
        seen["completed, sync refused"] = await outcome(TaskState.COMPLETED)
        armed.clear()
        seen["completed after"] = await outcome(TaskState.COMPLETED)
        seen["working after"] = await outcome(TaskState.WORKING)
        return seen
    finally:
        await store.close()


def main(path: Path) -> dict:
    armed = threading.Event()
    sync_filter = seccomp.SyscallFilter(seccomp.ALLOW)
    for call in ("fsync", "fdatasync"):
        sync_filter.add_rule(seccomp.NOTIFY, call)
    # this thread and the threads it starts from now on (the store's among them)
    syncs = load_supervised(sync_filter, lambda _counts: errno.EIO if armed.is_set() else None)
    return {**asyncio.run(writes(path, armed)), **syncs}


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))
