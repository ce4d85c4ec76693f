"""Nothing slow runs on the event loop thread (issue 11 item 4): trace lines, `task.md` and
`out/result.txt`, the shell call's PATH lookup and environment, a long text's token count (a
short one's, up to `COUNT_ON_LOOP_CHARS`, may run on the loop: issue 29).

The session runs for real (scripted driver, WASM tool, allowlisted shell, compaction check on).
A profiler (`sys.setprofile` / `threading.setprofile`) observes, without replacing anything,
which thread each of those real calls runs on: the C-level `write` of the trace file, the
`workdir_fs.write_text` of the session's own files, `prepare_shell`, `shutil.which` and
`count_tokens`. A call seen on the loop thread fails the test; each is also required to be seen
on some other thread, so a watch that sees nothing cannot pass.
"""

from __future__ import annotations

import asyncio
import io
import os
import shutil
import sys
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conftest import EXAMPLES
from loopkit import driver_capsule, local, run_tasks, stage, trace_events
from murmurd import workdir_fs
from murmurd.host.bridge import WasmPool
from murmurd.session.loop import COUNT_ON_LOOP_CHARS
from murmurd.session import shell, tokens
from murmurd.trace import writer

pytestmark = pytest.mark.anyio

WATCHED = {
    tokens.count_tokens.__code__: "count_tokens",
    shell.prepare_shell.__code__: "prepare_shell",
    shutil.which.__code__: "shutil.which",
    workdir_fs.write_text.__code__: "write_text",
}


@dataclass
class ThreadWatch:
    """Which thread each watched call ran on: (name, detail) -> thread idents."""

    trace_path: Path
    seen: dict[tuple[str, str], Counter[int]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def profile(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            name = WATCHED.get(frame.f_code)
            if name is not None:
                self._note(name, self._detail(name, frame.f_locals))
        elif event == "c_call" and getattr(arg, "__name__", None) in ("write", "flush"):
            target = getattr(arg, "__self__", None)
            if isinstance(target, io.IOBase) and self._is_trace(target):
                self._note("trace file", arg.__name__)

    @staticmethod
    def _detail(name: str, local_vars: dict[str, Any]) -> str:
        if name == "write_text":
            return str(local_vars.get("rel", ""))
        if name == "count_tokens":  # a short text's count may run on the loop (0.16 ms at most)
            return "long" if len(local_vars["text"]) > COUNT_ON_LOOP_CHARS else "short"
        return ""

    def _is_trace(self, stream: io.IOBase) -> bool:
        try:
            return os.readlink(f"/proc/self/fd/{stream.fileno()}") == str(self.trace_path)
        except (OSError, ValueError):
            return False

    def _note(self, name: str, detail: str) -> None:
        with self._lock:
            self.seen.setdefault((name, detail), Counter())[threading.get_ident()] += 1

    def threads(self, name: str, detail: str = "") -> Counter[int]:
        return self.seen.get((name, detail), Counter())

    def calls(self, name: str) -> int:
        return sum(sum(c.values()) for (n, _), c in self.seen.items() if n == name)


def _capsule(tmp_path: Path) -> Path:
    big = "x" * 200_000  # a large tool input: a long trace line and a long conversation to count
    responses = [
        {"stop_reason": "tool_call", "content": [
            {"type": "tool_call", "id": "c1", "name": "echo", "input": {"text": big}}]},
        {"stop_reason": "tool_call", "content": [
            {"type": "tool_call", "id": "c2", "name": "printf", "input": {"command": "'%s' hello"}}]},
        {"stop_reason": "end_turn", "content": [{"type": "text", "text": "done"}]},
    ]
    return driver_capsule(
        tmp_path, "scripted-driver", {"responses": responses},
        extra_artifacts=[local("echo", "tool", EXAMPLES / "echo")],
        capabilities={"shell": {"allow": ["printf"]}},
        trace={"include_tool_output": True},
        context={"max_tokens": 10_000_000},
        inference={"compaction": {"threshold": 0.98}},  # the threshold is checked after every turn
    )


async def test_trace_lines_files_shell_resolution_and_token_counts_stay_off_the_loop(tmp_path: Path, host,
                                                                                       monkeypatch) -> None:
    # The trace threads are shared by the process and may predate the profiler: this test's
    # session gets a drain of its own, whose threads start under the watch.
    # Likewise the WASM pool, where a long text's token count runs (issue 29).
    monkeypatch.setattr(writer, "DEFAULT_DRAIN", writer.TraceDrain())
    monkeypatch.setattr(host, "pool", WasmPool(4))
    staged = stage(_capsule(tmp_path), host, tmp_path)
    watch = ThreadWatch(staged.workdir.trace)
    loop_thread = threading.get_ident()
    loop = asyncio.get_running_loop()
    # Worker threads started from here on carry the profiler too: a fresh default executor for
    # this test (the loop is shared by the test session, so the previous one is put back).
    previous = loop._default_executor  # type: ignore[attr-defined]
    executor = ThreadPoolExecutor(4, thread_name_prefix="watched")
    loop.set_default_executor(executor)
    threading.setprofile(watch.profile)
    sys.setprofile(watch.profile)
    try:
        (outcome,) = await run_tasks(staged, host, "echo a lot, then print")
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
        loop._default_executor = previous  # type: ignore[attr-defined]
        executor.shutdown(wait=False)
        host.pool.shutdown()  # this test's own (the fixture's comes back with the monkeypatch)
    assert outcome.ok, outcome.error
    assert outcome.counters.turns == 3 and outcome.counters.shell_calls == 1

    for name, detail in [("trace file", "write"), ("trace file", "flush"), ("write_text", "task.md"),
                         ("write_text", "out/result.txt"), ("prepare_shell", ""), ("shutil.which", ""),
                         ("count_tokens", "long")]:
        threads = watch.threads(name, detail)
        assert threads, f"{name} {detail} was never seen: the watch proves nothing"
        assert loop_thread not in threads, f"{name} {detail} ran on the event loop thread"

    # Resolved once per shell call (the decision point and the run share it), counted once per
    # turn: the input count, the output count, and the compaction check whose count the next
    # turn reuses (3 turns: 3 inputs, the first counted, the others reused; 3 outputs; 3 checks).
    assert watch.calls("prepare_shell") == 1
    assert watch.calls("count_tokens") == 1 + 3 + 3
    kinds = [e["event_type"] for e in trace_events(staged)]
    assert kinds.count("inference") == 3 and "shell" in kinds and kinds[-2:] == ["session_end", "task_end"]


async def test_a_reader_sees_every_line_once_a_task_has_ended(tmp_path: Path, host) -> None:
    """Lines are written by the writer's thread; the task's end is the barrier."""
    from murmurd.session.session import Session, TaskSpec

    staged = stage(_capsule(tmp_path), host, tmp_path)
    session = Session(staged, host)
    await session.open()
    try:
        outcome = await session.run_task(TaskSpec("tsk_" + "1" * 32, "go"))
        assert outcome.ok, outcome.error
        kinds = [e["event_type"] for e in trace_events(staged)]  # read at once, no waiting
        assert kinds[-2:] == ["session_end", "task_end"] and kinds.count("inference") == 3
    finally:
        await session.close()
    assert len(trace_events(staged)) == len(kinds)  # closing writes nothing more
