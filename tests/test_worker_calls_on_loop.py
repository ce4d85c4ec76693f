"""A worker call awaited on the event loop (`WorkerProcesses.call_tool_on_loop`, issue 29): once
a worker is ready and has the component, `ComponentHost.call_tool` reads the call's socket on the
loop, so no pool thread waits for it. Its chunks reach the sinks on the loop in order, an input
request is answered off the loop, a cancel of the awaiter stops the guest in the worker, a
stopped worker still ends the call at its deadline, and what the worker sends is read under the
same limits as on a thread (`frames.LoopReader`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import struct
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import uvloop

from hostile import SPIN, tool_component
from murmurd.host import (CallCancelled, CallGrant, CallGuard, CallTrap, ComponentHost, DeadlineExceeded, Limits,
                          SessionContext, ToolInput, ToolStatus)
from murmurd.host.workers import calls, frames
from murmurd.host.workers.calls import FRAMES_PER_TURN, Call

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
    monkeypatch.setattr(calls, "OVERDUE_GRACE_SECONDS", 0.5)
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


# -- a compromised worker's end of a call's socket, played by a thread ------------------------


class PeerLink:
    """Stands in a `WorkerLink` whose worker end of each call's socket is `peer(sock)` on a
    thread: what a compromised worker process could send."""

    def __init__(self, peer: Callable[[socket.socket], None]) -> None:
        self.peer = peer
        self.components: set[tuple[str, str]] = {(LOADED.sha256, LOADED.name)}
        self.drains: set[asyncio.Task[None]] = set()
        self.cancels: list[str] = []
        self.thread: threading.Thread | None = None

    def open_call(self, _call_id: int, theirs: socket.socket, _artifact: str, _guards: object) -> None:
        sock = socket.socket(fileno=os.dup(theirs.fileno()))
        sock.setblocking(True)

        def run() -> None:
            with sock, contextlib.suppress(OSError):
                self.peer(sock)

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def cancel(self, _call_id: int, reason: str) -> None:
        self.cancels.append(reason)


class _Loaded:
    name, sha256 = "hostile", "0" * 64


LOADED = _Loaded()


def _peer_call(peer: Callable[[socket.socket], None], *, deadline: float = 30.0, on_chunk: Any = None,
               session: SessionContext | None = None) -> tuple[Call, PeerLink]:
    link = PeerLink(peer)
    call = Call(link, 1, LOADED, CallGuard(deadline), session or SessionContext(), on_chunk, None)  # type: ignore[arg-type]
    return call, link


async def _pool(fn: Callable[..., Any], *args: Any) -> Any:
    return await asyncio.to_thread(fn, *args)


def _chunk(text: bytes) -> bytes:
    return frames.framed(b"C" + text)


def _done() -> bytes:
    return frames.framed(frames.encode(frames.Done(status="passed", summary=None, data="ok", data_path=None,
                                                   truncated=False, metadata=[])))


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_flood_of_small_frames_leaves_the_loop_its_turns(loop: str) -> None:
    """A worker keeping the socket full of five-byte chunks: the reader lets the loop run other
    tasks every `FRAMES_PER_TURN` frames (before, one 64 KiB read's 13,000 frames ran at once on
    uvloop, and asyncio's loop, whose `sock_recv` answers at once when bytes wait, ran no other
    task for the whole flood)."""
    sent = threading.Event()

    def peer(sock: socket.socket) -> None:
        blob = _chunk(b"") * 20_000
        for _ in range(5):
            sock.sendall(blob)
        sent.set()
        sock.sendall(_done())

    chunks: list[str] = []
    call, _link = _peer_call(peer, on_chunk=chunks.append)
    marks: list[int] = []

    async def beat() -> None:
        while True:
            marks.append(len(chunks))
            await asyncio.sleep(0)

    async def main() -> Any:
        beating = asyncio.ensure_future(beat())
        try:
            return await call.run_on_loop(ToolInput(data="{}"), CallGrant(), _pool)
        finally:
            beating.cancel()

    factory = uvloop.new_event_loop if loop == "uvloop" else None
    with asyncio.Runner(loop_factory=factory) as runner:
        result = runner.run(main())
    assert result.data == "ok" and len(chunks) == 100_000 and sent.is_set()
    assert max(b - a for a, b in zip(marks, marks[1:])) <= FRAMES_PER_TURN


def test_component_missing_after_the_guest_spoke_is_a_trap_not_a_second_run() -> None:
    """"Nothing of the call ran" after a chunk came is a worker's lie: the call fails, and is
    not made again (its output streamed twice, its time started afresh)."""
    def peer(sock: socket.socket) -> None:
        sock.sendall(_chunk(b"said") + frames.framed(frames.encode(frames.Failed(
            error=frames.COMPONENT_MISSING, artifact="hostile", cause="gone"))))

    chunks: list[str] = []
    call, _link = _peer_call(peer, on_chunk=chunks.append)
    with pytest.raises(CallTrap, match="missing after the call had run"):
        asyncio.run(call.run_on_loop(ToolInput(data="{}"), CallGrant(), _pool))
    assert chunks == ["said"]
    call, _link = _peer_call(peer)  # the thread's reader keeps the same rule
    with pytest.raises(CallTrap, match="missing after the call had run"):
        call.run(ToolInput(data="{}"), CallGrant())


def test_a_worker_that_lost_the_component_gets_it_again_within_the_call(workers: ComponentHost, artifacts) -> None:
    """The loop's reader sends no compiled bytes: a worker without them answers "missing", and
    the call is made again on a thread, with them, in the same call."""
    echo = workers.load(artifacts.example("echo"))
    assert workers.workers is not None
    _ready(workers, workers.load(artifacts.example("echo"), name="first"))  # the worker is ready, without "echo"
    workers.workers._workers[0].components.add((echo.sha256, echo.name))  # as if it had it

    async def main() -> Any:
        return await asyncio.wait_for(workers.call_tool(echo, ToolInput(data='{"text": "back"}')), WAIT)

    assert asyncio.run(main()).data == '{"text": "back"}'
    assert workers.workers._workers[0].in_flight == 0


async def _cancelled_once_open(call: Call, link: PeerLink) -> None:
    """Start `call` on the loop, and cancel its awaiter once the worker's end has the socket."""
    running = asyncio.ensure_future(call.run_on_loop(ToolInput(data="{}"), CallGrant(), _pool))
    while link.thread is None:
        await asyncio.sleep(0.01)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running


def test_a_cancelled_call_counts_on_its_worker_until_the_worker_ends_it() -> None:
    """The worker is told, and the call's socket is read to its end before the worker's count
    of it drops: a worker still stopping a guest is not taken for an idle one."""
    told, release = threading.Event(), threading.Event()

    def peer(sock: socket.socket) -> None:
        told.wait(WAIT)
        release.wait(WAIT)  # the guest takes its time to stop

    call, link = _peer_call(peer)
    released = threading.Event()
    call.release = released.set

    async def main() -> None:
        await _cancelled_once_open(call, link)
        told.set()
        assert link.cancels == ["cancelled"]
        for _ in range(20):  # turns of the loop: the drain is waiting on the silent worker
            await asyncio.sleep(0)
        assert not released.is_set() and len(link.drains) == 1
        release.set()  # the worker ends the call: its end of the socket closes
        drain = next(iter(link.drains))
        await asyncio.wait_for(drain, WAIT)

    asyncio.run(main())
    assert released.is_set() and not link.drains


def test_a_drain_cancelled_before_it_ran_still_closes_and_releases() -> None:
    """Something cancelling every task at once (a shutdown) right after a call was cancelled:
    its drain never ran a step, and its ending still closes the socket and releases the call."""
    def peer(sock: socket.socket) -> None:
        while sock.recv(65536):  # the request, then nothing until our end closes
            pass

    call, link = _peer_call(peer)
    released: list[bool] = []
    call.release = lambda: released.append(True)

    async def main() -> None:
        await _cancelled_once_open(call, link)
        (drain,) = link.drains
        drain.cancel()
        with pytest.raises(asyncio.CancelledError):
            await drain

    asyncio.run(main())
    assert released == [True] and not link.drains
    assert link.thread is not None
    link.thread.join(WAIT)  # the worker's end saw ours closed
    assert not link.thread.is_alive()


@pytest.mark.parametrize("frame", [
    b'J{"kind": "done", "status": "fine", "summary": null, "data": "x", "data_path": null, "truncated": false, '
    b'"metadata": []}',
])
def test_an_answer_of_no_known_status_is_a_lost_call(frame: bytes) -> None:
    call, _link = _peer_call(lambda sock: sock.sendall(frames.framed(frame)))
    with pytest.raises(CallTrap, match="hostile"):
        asyncio.run(call.run_on_loop(ToolInput(data="{}"), CallGrant(), _pool))


def test_an_error_takes_only_the_fields_errors_have() -> None:
    """A worker naming `__class__` (or any attribute) in an error's extra fields sets nothing
    but the fields the error classes add."""
    failed = frames.Failed(error="DeadlineExceeded", artifact="hostile", cause="deadline exceeded after 3 s",
                           extra={"seconds": 3.0, "__class__": "x", "failure": "planted"})
    call, _link = _peer_call(lambda sock: sock.sendall(frames.framed(frames.encode(failed))))
    with pytest.raises(DeadlineExceeded) as raised:
        asyncio.run(call.run_on_loop(ToolInput(data="{}"), CallGrant(), _pool))
    assert raised.value.seconds == 3.0 and not hasattr(raised.value, "failure")  # type: ignore[attr-defined]


def test_a_cancelled_call_asks_no_supervisor() -> None:
    supervisor = Supervisor("late")
    call, _link = _peer_call(lambda sock: None, session=supervisor)
    call.guard.cancel("the task was cancelled")
    assert call._answer("still there?").failed
    assert supervisor.threads == []
