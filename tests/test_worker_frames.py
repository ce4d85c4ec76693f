"""The daemon-worker framing (`murmurd.host.workers.frames`) under a profiler that keeps frames.

A sampling or tracing profiler run inside the daemon (`sys._current_frames`, a `setprofile`
hook) may keep a function's frame, and with it its locals, after the function returns. The
frame reader's views of its buffer must not outlive the read on that account: the caller
strips the frame's kind byte in place, and a view still exported there is a `BufferError`, a
failed task (seen under load with an in-process sampler holding every object for a moment).
"""

from __future__ import annotations

import socket
import sys
import threading
from types import FrameType

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
