"""A worker call awaited on the event loop (`WorkerProcesses.call_tool_on_loop`, issue 29): once
a worker is ready and has the component, `ComponentHost.call_tool` reads the call's socket on the
loop, so no pool thread waits for it. Its chunks reach the sinks on the loop in order, an input
request is answered off the loop, a cancel of the awaiter stops the guest in the worker, a
stopped worker still ends the call at its deadline, and what the worker sends is read under the
same limits as on a thread (`frames.LoopReader`)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import struct
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from hostile import SPIN, tool_component
from murmurd.host import (
    CallCancelled,
    CallGrant,
    CallGuard,
    ComponentHost,
    DeadlineExceeded,
    Limits,
    SessionContext,
    ToolInput,
    ToolStatus,
)
from murmurd.host.workers import frames, processes

WAIT = 60  # what a test waits at most for an event that must happen (a loaded machine)


class Supervisor(SessionContext):
    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.threads: list[int] = []

    def request_input(self, prompt: str) -> str:
        self.threads.append(threading.get_ident())
        return f"{self.answer} ({prompt})"


def _ready(host: ComponentHost, loaded: Any) -> None:
    """A first call, which brings the component's bytes to the worker (on a thread)."""
    host.call_tool_sync(loaded, ToolInput(data='{"text": "first"}'))


def _pool_held(host: ComponentHost) -> tuple[threading.Event, Callable[[], Awaitable[None]]]:
    """Every thread of the host's pool held until the event is set; await the second to know
    they all are."""
    release = threading.Event()
    holding = threading.Semaphore(0)

    def hold() -> None:
        holding.release()
        release.wait(WAIT * 2)

    async def held() -> None:
        for _ in range(host.pool.max_workers):
            asyncio.ensure_future(host.pool.run(hold))
        for _ in range(host.pool.max_workers):
            assert await asyncio.to_thread(holding.acquire, True, WAIT), "a pool thread never started"

    return release, held


def test_a_call_on_the_loop_needs_no_pool_thread_and_its_chunks_arrive_on_the_loop(workers: ComponentHost,
                                                                                  artifacts) -> None:
    echo = workers.load(artifacts.example("echo"))

    async def main() -> None:
        first = await workers.call_tool(echo, ToolInput(data='{"text": "first"}'))  # on a thread: it brings the bytes
        assert first.data == '{"text": "first"}'
        release, held = _pool_held(workers)
        try:
            await held()
            chunks: list[tuple[str, int]] = []
            result = await asyncio.wait_for(workers.call_tool(
                echo, ToolInput(data='{"text": "hi"}'),
                on_chunk=lambda text: chunks.append((text, threading.get_ident()))), WAIT)
        finally:
            release.set()
        assert result.status is ToolStatus.PASSED and result.data == '{"text": "hi"}'
        assert chunks == [("echo: hi", threading.get_ident())]  # on the loop's thread

    asyncio.run(main())
    assert workers.workers is not None and workers.workers._workers[0].in_flight == 0


def test_a_large_answer_and_chunk_are_read_whole(workers: ComponentHost, artifacts) -> None:
    """Frames over the loop's decoding size go to a thread to decode, and arrive whole."""
    echo = workers.load(artifacts.example("echo"))
    _ready(workers, echo)
    text = "ab\u00e9\U0001f600" * 100_000  # 1.1 MB of UTF-8, many socket reads
    chunks: list[str] = []

    async def main() -> Any:
        return await asyncio.wait_for(workers.call_tool(
            echo, ToolInput(data='{"text": "%s"}' % text), on_chunk=chunks.append), WAIT)

    result = asyncio.run(main())
    assert result.data == '{"text": "%s"}' % text
    assert chunks == [f"echo: {text}"]


def test_request_input_on_the_loop_is_answered_off_the_loop(workers: ComponentHost, artifacts) -> None:
    ask = workers.load(artifacts.fixture("ask"))
    supervisor = Supervisor("yes")
    workers.call_tool_sync(ask, ToolInput(data="warm?"), session=supervisor)

    async def main() -> tuple[Any, int]:
        result = await asyncio.wait_for(workers.call_tool(ask, ToolInput(data="may I?"), session=supervisor), WAIT)
        return result, threading.get_ident()

    result, loop_thread = asyncio.run(main())
    assert result.status is ToolStatus.PASSED and result.data == "yes (may I?)"
    assert len(supervisor.threads) == 2 and supervisor.threads[1] != loop_thread  # its wait blocks: never the loop


def _worker_ticks(host: ComponentHost) -> int:
    assert host.workers is not None
    fields = open(f"/proc/{host.workers.pids[0]}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _spinning(host: ComponentHost) -> bool:
    """Whether the worker burns CPU: waits until it is seen spinning (True: 30 ms or more of
    CPU in half a second) or resting (False: at most 10 ms in each of two half seconds in a
    row; its epoch ticker costs a little), within WAIT."""
    deadline = time.monotonic() + WAIT
    resting = 0
    while time.monotonic() < deadline:
        start = _worker_ticks(host)
        time.sleep(0.5)
        burnt = _worker_ticks(host) - start
        if burnt >= 3:
            return True
        resting = resting + 1 if burnt <= 1 else 0
        if resting == 2:
            return False
    raise AssertionError("the worker neither spun nor rested")


def test_cancelling_the_awaiter_stops_the_guest_in_the_worker(workers: ComponentHost) -> None:
    spin = workers.load_bytes(tool_component(SPIN), name="spin")
    with pytest.raises(DeadlineExceeded):  # a first call brings the bytes (on a thread)
        workers.call_tool_sync(spin, ToolInput(), grant=CallGrant(limits=Limits(deadline_seconds=0.2)))
    guard = CallGuard(600)

    async def main() -> None:
        call = asyncio.ensure_future(workers.call_tool(
            spin, ToolInput(), grant=CallGrant(limits=Limits(deadline_seconds=600)), guard=guard))
        assert await asyncio.to_thread(_spinning, workers)
        assert workers.workers is not None and workers.workers._workers[0].in_flight == 1  # read on the loop
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call

    asyncio.run(main())
    assert guard.cancel_reason == "cancelled"
    assert not _spinning(workers)  # the worker was told, and stopped the guest
    assert guard._tickers == set()


def test_a_stopped_worker_still_ends_the_call_at_its_deadline(workers: ComponentHost, artifacts,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker that says nothing (stopped) is not waited for past the call's deadline and its
    grace (shortened here): the call ends as `DeadlineExceeded`, and the worker is told."""
    echo = workers.load(artifacts.example("echo"))
    _ready(workers, echo)
    monkeypatch.setattr(processes, "OVERDUE_GRACE_SECONDS", 0.5)
    assert workers.workers is not None
    pid = workers.workers.pids[0]
    os.kill(pid, signal.SIGSTOP)
    try:
        async def main() -> None:
            with pytest.raises(DeadlineExceeded, match="echo"):
                await asyncio.wait_for(workers.call_tool(
                    echo, ToolInput(data="{}"), grant=CallGrant(limits=Limits(deadline_seconds=0.5))), WAIT)

        asyncio.run(main())
    finally:
        os.kill(pid, signal.SIGCONT)
    assert workers.call_tool_sync(echo, ToolInput(data='{"text": "on"}')).data == '{"text": "on"}'


def test_a_cancel_before_a_call_on_the_loop_starts_stops_it_at_once(workers: ComponentHost, artifacts) -> None:
    spin = workers.load_bytes(tool_component(SPIN), name="spin")
    with pytest.raises(DeadlineExceeded):
        workers.call_tool_sync(spin, ToolInput(), grant=CallGrant(limits=Limits(deadline_seconds=0.2)))
    guard = CallGuard(600)
    guard.cancel("cancelled before it began")

    async def main() -> None:
        with pytest.raises(CallCancelled, match="cancelled before it began"):
            await asyncio.wait_for(workers.call_tool(spin, ToolInput(), guard=guard), WAIT)

    asyncio.run(main())


# -- the loop's frame reader ------------------------------------------------------------------


def _read_with(peer: Callable[[socket.socket], None], timeout: float = WAIT) -> tuple[list[Any], frames.LoopReader]:
    """Frames the loop reads from a socket whose other end `peer` writes (on a thread), until
    the reader raises; what it read, and the reader."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ours.setblocking(False)
    writer = threading.Thread(target=peer, args=(theirs,), daemon=True)
    got: list[Any] = []

    async def main() -> frames.LoopReader:
        reader = frames.LoopReader(ours, asyncio.get_running_loop())
        writer.start()
        try:
            while True:
                async with asyncio.timeout(timeout):
                    got.append(frames.decode(await reader.receive_raw(), frames.FromWorker))
        except (frames.FrameError, TimeoutError) as exc:
            got.append(exc)
        return reader

    try:
        return got, asyncio.run(main())
    finally:
        ours.close()
        theirs.close()
        writer.join(WAIT)


def test_frames_sent_together_are_read_one_by_one_and_the_end_is_an_error() -> None:
    def peer(sock: socket.socket) -> None:
        sock.sendall(frames.framed(b"Cone") + frames.framed(b"Ttwo")
                     + frames.framed(frames.encode(frames.Done(status="passed", summary=None, data="x", data_path=None,
                                                               truncated=False, metadata=[])))
                     + frames.framed(b"Cpart")[:6])
        sock.shutdown(socket.SHUT_WR)

    got, _reader = _read_with(peer)
    assert [type(frame).__name__ for frame in got] == ["Chunk", "Chunk", "Done", "FrameError"]
    assert got[0].text == "one" and not got[0].thinking and got[1].text == "two" and got[1].thinking
    assert "closed" in str(got[3])


def test_a_claimed_length_on_the_loop_costs_memory_only_as_its_bytes_arrive() -> None:
    """A worker claims 200 MiB and sends ten bytes: the reader holds ten bytes until the
    frame's time is up."""
    def peer(sock: socket.socket) -> None:
        sock.sendall(struct.pack(">I", 200 * 1024 * 1024) + b"C123456789")
        sock.recv(1)  # until the reader's end is closed

    got, reader = _read_with(peer, timeout=0.5)
    assert len(got) == 1 and isinstance(got[0], TimeoutError)
    assert len(reader._pending) == 14


def test_a_frame_over_the_limit_is_refused_before_its_body() -> None:
    def peer(sock: socket.socket) -> None:
        sock.sendall(struct.pack(">I", frames.MAX_FRAME + 1))

    got, _reader = _read_with(peer)
    assert len(got) == 1 and isinstance(got[0], frames.FrameError) and "over the" in str(got[0])
