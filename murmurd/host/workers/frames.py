"""What a call's socket carries between the daemon and a WASM worker process, and how.

A frame is a 4-byte big-endian length and that many bytes: a kind byte, then a pydantic model as
JSON, or (for a chunk, the one frame a guest sizes at will) the text's UTF-8. The
daemon opens one stream socket per call (`socketpair`, its worker end passed over the worker's
control socket), so a call's frames are never interleaved with another call's, and a reader
needs no dispatcher: the caller reads its own socket, on its thread (`receive`) or on the event
loop (`LoopReader`).

The daemon sends a `CallRequest` (and, the first time a worker needs a component, its
serialized bytes as one raw frame), then answers each `InputRequest` with a `Reply`; the worker
sends chunks, input requests and egress denials as the guest makes them, and ends with `Done`
or `Failed`. Nothing here is trusted more than it must be: a frame longer than `MAX_FRAME` or
not of its model is a protocol error, never a guess.
"""

from __future__ import annotations

import array
import asyncio
import os
import socket
import struct
import time
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

MAX_FRAME = 256 * 1024 * 1024  # a component's compiled bytes ride in the first call that needs them
_FIRST_READ = 1024 * 1024  # a frame's buffer at first, at most; it grows by as much each time it fills
_NARROW_BELOW = 0.9  # a frame's body read narrowed once a tenth of its time has gone: at most 1.1x the timeout
_LOOP_READ = 64 * 1024  # what a read on the loop asks for at least (a small frame and the next)
_GROWTH = memoryview(bytes(_FIRST_READ))  # zeros to grow by, never copied first (no temporary of the growth's size)
_LENGTH = struct.Struct(">I")
_JSON, _TEXT, _THINKING = b"J", b"C", b"T"  # a frame's first byte: a model, a chunk, a thinking chunk


class FrameError(Exception):
    """The other side closed the socket, or sent what is not a frame of this protocol."""


class _Frame(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LimitsSpec(_Frame):
    memory_bytes: int
    table_elements: int
    instances: int
    deadline_seconds: float


class GrantSpec(_Frame):
    """A `CallGrant` as data: paths stay paths (the worker shares the daemon's file system and
    user, and reaches them through `workdir_fs` exactly as the daemon would)."""

    env: dict[str, str]
    preopen: str | None
    log_path: str | None
    network: list[str]
    limits: LimitsSpec
    root: str | None


class GuardSpec(_Frame):
    """One guard of the call's chain: its nominal deadline, and the seconds left of it now
    (None: its clock is stopped, or it has not started)."""

    deadline_seconds: float
    remaining: float | None


class CallRequest(_Frame):
    kind: Literal["call"] = "call"
    artifact: str
    sha256: str
    compiled: bool = False  # the serialized component follows as a raw frame (once per worker)
    data: str | None
    log_path: str | None
    grant: GrantSpec
    guards: list[GuardSpec]  # the call's own guard first, then the guards it is nested in


class Reply(_Frame):
    """The daemon's answer to an `InputRequest`; `failed` when the daemon's side raised (the
    worker's import then traps, and the daemon reports its own exception)."""

    kind: Literal["reply"] = "reply"
    text: str = ""
    failed: bool = False


class Chunk(_Frame):
    kind: Literal["chunk"] = "chunk"
    text: str
    thinking: bool = False


class InputRequest(_Frame):
    kind: Literal["input"] = "input"
    prompt: str


class Denied(_Frame):
    """A request the egress policy refused, as `EgressDenial` holds it."""

    kind: Literal["denied"] = "denied"
    artifact: str
    interface: str
    reason: str
    origin: str | None = None
    scheme: str | None = None
    authority: str | None = None


class Done(_Frame):
    kind: Literal["done"] = "done"
    status: Literal["passed", "failed", "error"]  # `ToolStatus`'s values
    summary: str | None
    data: str | None
    data_path: str | None
    truncated: bool
    metadata: list[tuple[str, str]]


ERROR_FIELDS = ("seconds", "limit_bytes")  # what a `Failed` carries in `extra`: the fields host errors add
COMPONENT_MISSING = "ComponentMissing"  # a `Failed.error`: the daemon sends the call again with the component's bytes


class Failed(_Frame):
    """The call ended with a host error: its class (one of `murmurd.host.errors`), its two
    fields and the attributes its subclass adds (`seconds`, `limit_bytes`)."""

    kind: Literal["failed"] = "failed"
    error: str
    artifact: str
    cause: str
    extra: dict[str, float | int | str | None] = {}


ToWorker = TypeAdapter(Annotated[Union[CallRequest, Reply], Field(discriminator="kind")])
FromWorker = TypeAdapter(Annotated[Union[Chunk, InputRequest, Denied, Done, Failed], Field(discriminator="kind")])


def send(sock: socket.socket, frame: _Frame) -> None:
    """A model as JSON; a `Chunk` as its kind byte and its text's UTF-8 (surrogates passed
    through, as a chunk in-process would carry them), so a guest's text costs its own size on
    the wire and no escaping."""
    if isinstance(frame, Chunk):
        send_chunk(sock, frame.text, thinking=frame.thinking)
    else:
        send_raw(sock, encode(frame))


def encode(frame: _Frame) -> bytes:
    """A model's frame body (what `send` sends after its length)."""
    return _JSON + frame.model_dump_json().encode()


def framed(body: bytes) -> bytes:
    """A frame body with its length before it, in one buffer (for a small frame sent in parts)."""
    return _length(body) + body


def _length(body: bytes | bytearray) -> bytes:
    """A frame's length prefix; `FrameError` for a body over the limit."""
    if len(body) > MAX_FRAME:
        raise FrameError(f"a frame of {len(body)} bytes is over the {MAX_FRAME}-byte limit")
    return _LENGTH.pack(len(body))


def send_chunk(sock: socket.socket, text: str, *, thinking: bool = False) -> None:
    encoded = text.encode("utf-8", "surrogatepass")
    if len(encoded) + 1 > MAX_FRAME:
        raise FrameError(f"a chunk of {len(encoded)} bytes is over the {MAX_FRAME}-byte frame limit")
    _send_parts(sock, _LENGTH.pack(len(encoded) + 1) + (_THINKING if thinking else _TEXT), encoded)


def send_raw(sock: socket.socket, data: bytes | bytearray) -> None:
    _send_parts(sock, _length(data), data)


def _send_parts(sock: socket.socket, *parts: bytes | bytearray) -> None:
    """`parts` in order, gathered by the kernel: one system call (and one wake-up of the reader)
    for a frame that fits the socket's buffer, and no copy of a large body into one buffer with
    its header."""
    views = [memoryview(part).cast("B") for part in parts if len(part)]
    timeout = sock.gettimeout()
    due = time.monotonic() + timeout if timeout else None  # for the whole frame, as `sendall`
    narrowed = False  # the socket's timeout is changed only for a frame that needs a second send
    try:
        while views:
            sent = sock.sendmsg(views)
            while sent and views:
                if sent >= len(views[0]):
                    sent -= len(views.pop(0))
                else:
                    views[0], sent = views[0][sent:], 0
            if views and due is not None:
                left = due - time.monotonic()
                if left <= 0:
                    raise TimeoutError("timed out sending a frame")
                sock.settimeout(left)
                narrowed = True
    finally:
        if narrowed:
            sock.settimeout(timeout)


def receive_raw(sock: socket.socket) -> bytearray:
    """The next frame's bytes, its length and body read by one deadline (`_read_exactly`)."""
    timeout = sock.gettimeout()
    due = time.monotonic() + timeout if timeout else None
    try:
        (length,) = _LENGTH.unpack(_read_exactly(sock, _LENGTH.size, due, first=True))
        if length > MAX_FRAME:
            raise FrameError(f"a frame of {length} bytes is over the {MAX_FRAME}-byte limit")
        return _read_exactly(sock, length, due, first=False)
    finally:
        if due is not None and sock.gettimeout() != timeout:
            sock.settimeout(timeout)


def receive(sock: socket.socket, adapter: TypeAdapter) -> _Frame:  # type: ignore[type-arg]
    """The next frame, read whole; `FrameError` at the end of the stream or on a bad frame."""
    return decode(receive_raw(sock), adapter)


def decode(body: bytearray, adapter: TypeAdapter) -> _Frame:  # type: ignore[type-arg]
    """A frame's body as its model (`body` is consumed); `FrameError` for a bad frame."""
    kind = bytes(body[:1])
    try:
        if kind in (_TEXT, _THINKING) and adapter is FromWorker:
            return Chunk.model_construct(text=str(memoryview(body)[1:], "utf-8", "surrogatepass"),
                                         thinking=kind == _THINKING)
        if kind == _JSON:
            del body[:1]  # in place: no second copy of a large answer
            return adapter.validate_json(body)  # type: ignore[no-any-return]
    except ValueError as exc:
        raise FrameError(f"not a frame of this protocol: {str(exc)[:200]}") from None
    raise FrameError(f"not a frame of this protocol: kind {bytes(kind)!r}")


def _read_exactly(sock: socket.socket, count: int, due: float | None, *, first: bool) -> bytearray:
    """`count` bytes in a buffer of their own, by `due` (the frame's deadline, as `send_raw`
    sends a frame): past it no read starts, and every read after the first of the length or
    of the body waits only for what is left of it (the body's first once a tenth of the time has
    gone), so a frame takes at most 1.1 times the socket's timeout, and a peer trickling a byte
    at a time gets no fresh timeout per read. The buffer grows with what arrived, a megabyte at
    a time, so a length the peer claims costs memory only as its bytes come. Its views are
    released here, not when they are freed: a profiler may keep this frame and its locals alive
    after the return, and the caller resizes the buffer in place (`receive`), which an exported
    view would refuse. The caller restores the socket's timeout."""
    buffer = bytearray(min(count, _FIRST_READ))
    got = 0
    while got < count:
        if got == len(buffer):
            buffer.extend(_GROWTH[:count - got])
        if due is not None and not (first and got == 0):
            left = due - time.monotonic()
            if left <= 0:
                raise TimeoutError("timed out reading a frame")
            if got or left < _NARROW_BELOW * (sock.gettimeout() or left):
                # the body's first read keeps the frame's timeout while most of it is left: it
                # mostly finds its bytes there, and narrowing is a system call
                sock.settimeout(left)
        with memoryview(buffer) as view, view[got:] as rest:
            n = sock.recv_into(rest)
        if n == 0:
            raise FrameError("the other side closed the call's socket")
        got += n
    return buffer


class LoopReader:
    """Frames from a nonblocking stream socket, read on the event loop. What one receive brings
    beyond a frame is kept for the next, so a small frame's length and body come in one system
    call; a length the peer claims costs memory only as its bytes arrive. Deadlines are the
    caller's (`asyncio.timeout` around each `receive_raw`)."""

    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop) -> None:
        self.sock, self._loop = sock, loop
        self._pending = bytearray()

    async def receive_raw(self) -> bytearray:
        while len(self._pending) < _LENGTH.size:
            await self._more(_LENGTH.size - len(self._pending))
        (length,) = _LENGTH.unpack_from(self._pending)
        if length > MAX_FRAME:
            raise FrameError(f"a frame of {length} bytes is over the {MAX_FRAME}-byte limit")
        end = _LENGTH.size + length
        while len(self._pending) < end:
            await self._more(end - len(self._pending))
        if len(self._pending) == end:  # the usual case: the frame alone, taken whole without a copy
            body, self._pending = self._pending, bytearray()
            del body[:_LENGTH.size]
            return body
        body = self._pending[_LENGTH.size:end]
        del self._pending[:end]
        return body

    async def _more(self, wanted: int) -> None:
        data = await self._loop.sock_recv(self.sock, min(max(wanted, _LOOP_READ), _FIRST_READ))
        if not data:
            raise FrameError("the other side closed the call's socket")
        self._pending += data


class Control(_Frame):
    """A message on a worker's control socket (a `SOCK_SEQPACKET`: one message each, sent
    whole): `ready` (the worker's first word), `call` (with the call's socket attached, its
    artifact's name, and how long it may wait for a place: `wait_seconds`, the deadline of
    `deadline_seconds` nominal that bounds it), and `cancel` (a call's guard is cancelled with
    `reason`)."""

    op: Literal["ready", "call", "cancel"]
    id: int = 0
    reason: str | None = None
    artifact: str = ""
    wait_seconds: float | None = None
    deadline_seconds: float | None = None


CONTROL_BYTES = 4096  # a control message's largest size (a cancel's reason is cut to fit)
ControlMessage = TypeAdapter(Control)


def control_bytes(message: Control) -> bytes:
    """A control message's bytes, its reason cut (by encoded size) until it fits."""
    body = message.model_dump_json().encode()
    reason = message.reason or ""
    while len(body) > CONTROL_BYTES:
        reason = reason[: len(reason) // 2]
        body = message.model_copy(update={"reason": reason}).model_dump_json().encode()
    return body


def send_control(sock: socket.socket, message: Control, fds: list[int] | None = None, *, wait: bool = True) -> None:
    """Send whole or not at all. With `wait=False` a full socket (a worker that stopped reading)
    raises `BlockingIOError` instead of blocking the sender."""
    body, flags = control_bytes(message), 0 if wait else socket.MSG_DONTWAIT
    rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    sock.sendmsg([body], rights, flags)  # not `socket.send_fds`: Python 3.11's drops its flags


def receive_control(sock: socket.socket) -> tuple[Control | None, list[int]]:
    """The next control message and the descriptors it carries (None for what is not a control
    message, whose descriptors are closed); `FrameError` once the other side has closed."""
    body, fds, flags, _address = socket.recv_fds(sock, CONTROL_BYTES, 4)
    if not body and not fds:
        raise FrameError("the control socket was closed")
    if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
        body = b""  # cut short: not a message this protocol sends
    try:
        return ControlMessage.validate_json(body), list(fds)
    except ValueError:
        for fd in fds:
            os.close(fd)
        return None, []
