"""Long blocking waits run on threads of their own (`murmurd.session.own_thread`).

A served daemon's loop executor is small (`murmurd serve`: two threads) and meant for short file
work. Shell commands, native tools and CLI waits last as long as their deadlines: on that
executor a few of them would hold every thread, and every other session's file work (a new
context's workdir, `task.md`, a result) would wait behind them. Checked on a real daemon: three
tasks sleeping in the shell do not stop a fourth context from being answered.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import os
import threading
import time
from pathlib import Path

import pytest

from a2akit import napping_capsule, serving
from murmurd.session.own_thread import on_own_thread

WHO = contextvars.ContextVar("who", default="nobody")


@pytest.mark.anyio
async def test_it_returns_raises_and_carries_the_callers_context() -> None:
    WHO.set("the caller")
    assert await on_own_thread(lambda a, b: (a + b, WHO.get(), threading.current_thread().name), 2, 3) == (
        5, "the caller", "murmurd-wait-<lambda>")

    def fails() -> None:
        raise ValueError("from the thread")

    with pytest.raises(ValueError, match="from the thread"):
        await on_own_thread(fails)


@pytest.mark.anyio
async def test_waits_beyond_the_executors_size_leave_it_free() -> None:
    """Five waits at once on a loop whose executor has one thread: a short job still runs."""
    loop = asyncio.get_running_loop()
    executor = concurrent.futures.ThreadPoolExecutor(1)
    loop.set_default_executor(executor)
    release = threading.Event()
    waits = [asyncio.ensure_future(on_own_thread(release.wait, 120)) for _ in range(5)]
    try:
        assert await asyncio.wait_for(asyncio.to_thread(lambda: "short"), 60) == "short"
        assert not any(w.done() for w in waits)
    finally:
        release.set()
        assert await asyncio.gather(*waits) == [True] * 5


@pytest.mark.anyio
async def test_a_cancelled_awaiter_drops_the_result_quietly() -> None:
    loop = asyncio.get_running_loop()
    reported: list[dict] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    release, finished = threading.Event(), threading.Event()

    def slow() -> str:
        release.wait(120)
        finished.set()
        return "late"

    waiting = asyncio.ensure_future(on_own_thread(slow))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    [thread] = [t for t in threading.enumerate() if t.name == "murmurd-wait-slow"]
    release.set()
    await asyncio.to_thread(thread.join, 60)  # its answer is on the loop's queue now
    assert finished.is_set() and not thread.is_alive()
    await asyncio.sleep(0)  # one pass of the loop: the answer reaches the cancelled future, dropped
    assert reported == []


def _naps_under(pid: int) -> int:
    """`sleep 600` processes descended from `pid` (read from /proc)."""
    parents: dict[int, int] = {}
    sleeping: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        parents[int(entry)] = int(stat[stat.rindex(")") + 2:].split()[1])
        if cmdline.split(b"\0")[:2] == [b"sleep", b"600"] or cmdline.endswith(b"/sleep\x00600\x00"):
            sleeping.append(int(entry))

    def under(child: int) -> bool:
        for _ in range(64):
            child = parents.get(child, 0)
            if child == pid:
                return True
            if child <= 1:
                return False
        return False

    return sum(1 for p in sleeping if under(p))


def test_tasks_sleeping_in_the_shell_leave_a_new_context_answered(tmp_path: Path) -> None:
    with serving(napping_capsule(tmp_path, "zzz"), tmp_path / "state", "--max-concurrent-tasks", "8") as served:
        naps = [served.send(f"zzz {n}")["id"] for n in range(3)]  # three contexts, one shell each
        deadline = time.monotonic() + 120
        while _naps_under(served.proc.pid) < 3:  # more than the executor's two threads
            assert time.monotonic() < deadline, "the three naps did not start"
            time.sleep(0.05)
        answered = served.send("hello")
        done = served.wait_state(answered["id"], "completed", "failed", timeout=120)
        assert done["status"]["state"] == "completed", done
        assert all(served.get(n)["status"]["state"] == "working" for n in naps)  # still sleeping
        for nap in naps:
            served.rpc("tasks/cancel", {"id": nap})
        for nap in naps:
            served.wait_state(nap, "canceled", timeout=120)
