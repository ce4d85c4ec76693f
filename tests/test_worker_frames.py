"""The daemon-worker framing (`murmurd.host.workers.frames`) under a profiler that keeps frames,
and against a worker that no longer keeps the protocol (a guest that escaped its sandbox).

A sampling or tracing profiler run inside the daemon (`sys._current_frames`, a `setprofile`
hook) may keep a function's frame, and with it its locals, after the function returns. The
frame reader's views of its buffer must not outlive the read on that account: the caller
strips the frame's kind byte in place, and a view still exported there is a `BufferError`, a
failed task (seen under load with an in-process sampler holding every object for a moment).
"""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import threading
import time
import tracemalloc
from types import FrameType

import pytest

from murmurd.host.workers import frames
from murmurd.host.workers.frames import Chunk, Done


def _received_while_frames_are_kept(sent: list[Chunk | Done]) -> tuple[list[object], list[FrameType]]:
    """Each of `sent` written by another thread and read here, under a profiler that keeps
    every frame of the reader's `_read_exactly` when it returns."""
    kept: list[FrameType] = []

    def profiler(frame: FrameType, event: str, _arg: object) -> None:
        if event == "return" and frame.f_code.co_name == "_read_exactly":
            kept.append(frame)  # the frame, and every local it held, outlive the call

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with ours, theirs:
        writer = threading.Thread(target=lambda: [frames.send(theirs, frame) for frame in sent])
        writer.start()
        received: list[object] = []
        sys.setprofile(profiler)  # this thread's only: the writer runs unprofiled
        try:
            for _ in sent:
                received.append(frames.receive(ours, frames.FromWorker))
        finally:
            sys.setprofile(None)
            writer.join(60)
    return received, kept


def test_json_frames_are_read_while_a_profiler_keeps_the_readers_frames() -> None:
    done = Done(status="passed", summary=None, data="answer", data_path=None, truncated=False, metadata=[])
    received, kept = _received_while_frames_are_kept([Chunk(text="a chunk"), done, done])
    assert received == [Chunk(text="a chunk"), done, done]
    assert len(kept) == 6  # two reads per frame (its length, then its body), every one kept


def test_a_frame_larger_than_the_socket_buffer_is_read_whole_under_the_same_profiler() -> None:
    """Its body arrives over several `recv_into`s, each into a view of the rest of the buffer."""
    done = Done(status="passed", summary="s", data="é" * 2_000_000, data_path=None, truncated=False, metadata=[])
    received, kept = _received_while_frames_are_kept([done])
    assert received == [done]
    assert len(kept) == 2


def test_a_claimed_length_costs_memory_only_as_its_bytes_arrive() -> None:
    """A header saying 256 MiB, then 10 bytes and the end: the reader fails the frame having
    held about what came (a buffer of the claimed size would be 256 MiB, zero-filled)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with ours, theirs:
        theirs.sendall(struct.pack(">I", frames.MAX_FRAME) + b"J" + b"x" * 9)
        theirs.shutdown(socket.SHUT_WR)
        tracemalloc.start()
        try:
            with pytest.raises(frames.FrameError, match="closed the call's socket"):
                frames.receive(ours, frames.FromWorker)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 4 * 1024 * 1024, peak


def test_a_large_frame_is_read_with_about_its_own_size_of_memory() -> None:
    """Growing as bytes arrive costs no temporary copy: a 64 MiB frame (a component's compiled
    bytes ride in one) peaks near 64 MiB, as a buffer made whole at once would."""
    size = 64 * 1024 * 1024
    payload = bytes(size)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with ours, theirs:
        writer = threading.Thread(target=lambda: frames.send_raw(theirs, payload))
        tracemalloc.start()
        try:
            writer.start()
            body = frames.receive_raw(ours)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
            writer.join(60)
    assert len(body) == size and not any(body[:: 1024 * 1024])
    assert peak < size * 1.3, peak / size


def test_a_frame_trickled_a_byte_at_a_time_times_out_as_a_whole() -> None:
    """The socket's timeout bounds the whole frame, not each read: a worker sending one byte
    a little more often than the timeout never finishes its frame, and the reader gives up."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    stop = threading.Event()
    sent = [0]

    def trickle() -> None:
        theirs.sendall(struct.pack(">I", 200) + b"J")
        while sent[0] < 199 and not stop.wait(0.1):
            theirs.sendall(b" ")
            sent[0] += 1

    with ours, theirs:
        ours.settimeout(1.0)  # for each frame: its length and its body together
        writer = threading.Thread(target=trickle)
        writer.start()
        try:
            with pytest.raises(TimeoutError):
                frames.receive(ours, frames.FromWorker)
        finally:
            stop.set()
            writer.join(60)
        assert sent[0] < 199  # it gave up long before the frame could end (199 bytes take 20 s)
        assert ours.gettimeout() == 1.0  # the socket's own timeout is back for the next frame


def test_a_frame_begun_late_is_still_bounded_by_its_deadline() -> None:
    """Its length comes when most of the socket's timeout has gone, its body later: the body's
    read waits only for what is left of the frame's time, not for a timeout of its own."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    stop = threading.Event()
    sent_body = threading.Event()

    def late() -> None:
        if stop.wait(3.0):  # three quarters of the reader's 4 s
            return
        theirs.sendall(struct.pack(">I", 3))
        if stop.wait(2.5):  # the body: past the frame's deadline, within a timeout of the length's
            return
        theirs.sendall(b"C..")
        sent_body.set()

    with ours, theirs:
        ours.settimeout(4.0)
        writer = threading.Thread(target=late)
        writer.start()
        try:
            with pytest.raises(TimeoutError):
                frames.receive(ours, frames.FromWorker)
            assert not sent_body.is_set()  # it gave up before the body came
        finally:
            stop.set()
            writer.join(60)


def test_a_worker_that_keeps_frames_coming_is_still_stopped_at_the_calls_deadline(host, artifacts) -> None:
    """Whole small frames, back to back, past the call's deadline and grace: no read ever waits
    out its timeout, so the call's own reader ends it (`DeadlineExceeded`, the worker told to
    cancel) instead of taking chunks for as long as the worker sends them."""
    from murmurd.host.errors import DeadlineExceeded
    from murmurd.host.interrupt import CallGuard
    from murmurd.host.workers.calls import Call as _Call
    from murmurd.host.workers.link import WorkerLink as _Worker

    loaded = host.load(artifacts.example("echo"), name="echo")
    control, control_peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    worker = _Worker(process=process, control=control)
    chunks: list[str] = []
    call = _Call(worker, 7, loaded, CallGuard(0.2), session=None, on_chunk=chunks.append,  # type: ignore[arg-type]
                 on_thinking=None)
    call.due = time.monotonic() + 0.5  # the deadline and its grace, shortened for the test
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    # the worker: a process of its own (as a worker is), keeping the socket full of whole chunk frames
    burst = frames.framed(b"C.") * 2000
    flood = subprocess.Popen(
        [sys.executable, "-c", "import socket, sys\n"
         "s = socket.socket(fileno=int(sys.argv[1]))\n"
         f"burst = {burst!r}\n"
         "try:\n"
         "    while True:\n"
         "        s.sendall(burst)\n"
         "except OSError:\n"
         "    pass\n", str(theirs.fileno())],
        pass_fds=[theirs.fileno()])
    theirs.close()
    ended: list[BaseException] = []

    def read() -> None:
        try:
            call._read(ours)
        except BaseException as exc:  # noqa: BLE001 - what ended the read is the finding
            ended.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        reader.join(60)  # ends at once past `due`; a reader that does not is the defect (it would read on)
        assert not reader.is_alive(), "the call's reader kept taking frames past the call's deadline"
    finally:
        flood.kill()
        flood.wait(60)
        reader.join(60)  # the flood gone, a read that was still going times out
        ours.close()
        worker.stop()
    assert len(ended) == 1 and isinstance(ended[0], TimeoutError), ended
    assert chunks  # it took the chunks that came in time
    assert isinstance(call._overdue(), DeadlineExceeded)
    message, _fds = frames.receive_control(control_peer)
    assert message is not None and (message.op, message.id) == ("cancel", 7)
    control.close()
    control_peer.close()
