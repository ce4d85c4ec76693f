"""`FileProcess`: a served daemon's session file work, handed to a process of its own.

A new context's session begins with file work (its workdir laid down, its index record, the first
task's `task_start` and `task.md`) and every task ends with some (`out/result.txt`, `task_end`).
Done on a thread of the daemon, each piece woke that thread, and the thread and the event loop
then traded the interpreter lock at every system call: about a sixth of a task's CPU
(`docs/benchmarks.md`, issue 29's seventh sitting). The file work must stay off the event loop
(on a disk, creating a file is not bounded). Here the loop writes one request to a socket and
reads the reply when it comes, as it does a WASM worker's: the process has a lock of its own,
and no thread of the daemon wakes for the work. The work is the same code (`workdir_fs`, the
session template), done by `file_process_main.py`.

A request is taken when it is small enough (`MAX_REQUEST`) and the socket takes it at once;
else, and while the process is not running (it is started again, at most once per
`RESTART_GAP_SECONDS`), the caller does the work on a thread as before (a `None` answer). A
request the process never answers (it ended) fails with `FileProcessGone`.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import pickle
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from murmurd.session.file_process_main import descriptors, rights
from murmurd.staging.template import SessionTemplate

log = logging.getLogger("murmurd.session.files")

MAX_REQUEST = 64 * 1024  # bytes of one request; a larger piece of work is done on a thread
MAX_REPLY = 64 * 1024
READY_SECONDS = 60.0  # a process not ready by then (its imports, the template) is given up
REQUEST_SECONDS = 60.0  # a request unanswered this long: the process is killed, its requests fail
RESTART_GAP_SECONDS = 1.0  # a process that ended is started again at most this often, at first
MAX_RESTART_GAP_SECONDS = 60.0  # the gap doubles, up to this, while each start ends soon
STOP_SECONDS = 10.0  # how long `close` waits for the process to finish what it was sent


class FileProcessGone(OSError):
    """The file process ended before it answered."""


@dataclass
class OpenedFiles:
    """A session workdir the process laid down: its trace's descriptor (the caller owns it), the
    root's (held: its shared lock taken; None when a remover held it that instant), and what
    failed of the rest, named."""

    trace_fd: int
    root_fd: int | None
    trace_error: str | None = None
    task_error: str | None = None
    index_error: str | None = None


@dataclass
class EndedFiles:
    result_error: str | None = None
    trace_error: str | None = None


class FileProcess:
    """One file process for a daemon's sessions, from `start` to `close`."""

    def __init__(self, template: Callable[[], SessionTemplate]) -> None:
        """`template`: the capsule's session template (blocking: called on a thread at a start)."""
        self._template = template
        self.template_key: tuple[Any, ...] | None = None  # the key of the template it lays down
        self._sock: socket.socket | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[tuple[dict[str, Any], list[int]]]] = {}
        self._restarting: asyncio.Task[None] | None = None
        self._started_at = 0.0
        self._gap = RESTART_GAP_SECONDS
        self._closed = False
        self.starts = 0  # processes started (what a test reads)

    @property
    def running(self) -> bool:
        return self._sock is not None

    async def start(self) -> None:
        """Start the process (its start-up off the loop); on failure, work goes to threads."""
        self._loop = asyncio.get_running_loop()
        self._started_at = time.monotonic()
        try:
            process, sock = await asyncio.to_thread(self._spawn)
        except Exception as exc:  # noqa: BLE001 - whatever it was, the work stays on a thread
            log.error("the file process could not start (session file work stays on a thread): %s", exc)
            self._gap = min(self._gap * 2, MAX_RESTART_GAP_SECONDS)
            return
        if self._closed:
            sock.close()
            await asyncio.to_thread(_reap, process)
            return
        self._process, self._sock = process, sock
        self.starts += 1
        self._loop.add_reader(sock.fileno(), self._readable)

    def _spawn(self) -> tuple[subprocess.Popen[bytes], socket.socket]:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        template = -1
        try:
            template = os.memfd_create("murmurd-session-template", os.MFD_CLOEXEC)
            session_template = self._template()
            self.template_key = session_template.key
            with os.fdopen(os.dup(template), "wb") as sink:
                pickle.dump(session_template, sink, protocol=pickle.HIGHEST_PROTOCOL)
            os.lseek(template, 0, os.SEEK_SET)
            process = subprocess.Popen(
                [sys.executable, "-m", "murmurd.session.file_process_main", str(theirs.fileno()), str(template)],
                pass_fds=(theirs.fileno(), template), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                start_new_session=True,  # a terminal's Ctrl-C is the daemon's to act on (it closes this)
                env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)})  # the daemon's murmurd
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
            if template >= 0:
                os.close(template)
        try:  # nothing is sent before it says it is ready: a start that fails fails no request
            ours.settimeout(READY_SECONDS)
            if json.loads(ours.recv(MAX_REPLY) or b"null") != {"ready": True}:
                raise OSError("the file process ended before it was ready")
        except (OSError, ValueError):
            ours.close()
            process.kill()
            process.wait()
            raise
        ours.setblocking(False)
        return process, ours

    # -- requests (on the loop) ----------------------------------------------------------------

    async def open_session(self, root: Path, session_id: str, index_dir: Path | None, context_id: str,
                           lines: str, task: str) -> OpenedFiles | None:
        """Lay `root` down for `session_id`, record it in `index_dir` against `context_id`, append
        `lines` to its trace and write `task` as its `task.md`. None: not taken (do it on a
        thread); OSError when the workdir could not be laid down."""
        sent = self._request({"op": "open", "root": str(root), "session_id": session_id,
                              "index_dir": None if index_dir is None else str(index_dir),
                              "context_id": context_id, "lines": lines, "task": task}, [])
        if sent is None:
            return None
        try:
            reply, fds = await asyncio.shield(sent)
        except asyncio.CancelledError:
            sent.add_done_callback(_close_handed)  # the workdir the reply hands over is let go
            raise
        if len(fds) != (2 if reply.get("held") else 1):
            _close_all(fds)
            raise FileProcessGone(f"the file process handed over {len(fds)} descriptors for {session_id}")
        return OpenedFiles(fds[0], fds[1] if len(fds) > 1 else None, reply.get("trace_error"),
                           reply.get("task_error"), reply.get("index_error"))

    def end_task(self, root: Path, result: str, text: str, lines: str,
                 trace_fd: int) -> asyncio.Future[EndedFiles] | None:
        """Write `text` to `result` beneath `root`, then append `lines` to the trace on `trace_fd`
        (handed over for the request). None: not taken (do it on a thread)."""
        sent = self._request({"op": "end", "root": str(root), "result": result, "text": text, "lines": lines},
                             [trace_fd])
        if sent is None:
            return None
        assert self._loop is not None
        ended: asyncio.Future[EndedFiles] = self._loop.create_future()

        def answered(done: asyncio.Future[tuple[dict[str, Any], list[int]]]) -> None:
            if done.exception() is not None:
                ended.set_exception(done.exception())  # type: ignore[arg-type]
                return
            reply, fds = done.result()
            _close_all(fds)
            ended.set_result(EndedFiles(reply.get("result_error"), reply.get("trace_error")))

        sent.add_done_callback(answered)
        return ended

    def _request(self, request: dict[str, Any], fds: list[int]) -> asyncio.Future[Any] | None:
        sock, loop = self._sock, self._loop
        if self._closed:
            return None  # closing: what comes now goes to a thread
        if sock is None or loop is None:
            self._restart_later()
            return None
        request["id"] = request_id = next(self._ids)
        data = json.dumps(request).encode()
        if len(data) > MAX_REQUEST:
            return None
        try:
            sock.sendmsg([data], rights(fds))
        except BlockingIOError:
            return None  # it is behind: this piece goes to a thread
        except OSError as exc:
            self._gone(f"it could not be sent a request ({exc})")
            return None
        answer: asyncio.Future[Any] = loop.create_future()
        self._waiting[request_id] = answer
        overdue = loop.call_later(REQUEST_SECONDS, self._overdue, request_id)
        answer.add_done_callback(lambda _answer: overdue.cancel())
        return answer

    def _overdue(self, request_id: int) -> None:
        if request_id in self._waiting:
            self._kill()
            self._gone(f"a request went unanswered for {REQUEST_SECONDS:.0f} s")

    def _readable(self) -> None:
        sock = self._sock
        while sock is not None:
            try:
                data, ancillary, flags, _ = sock.recvmsg(MAX_REPLY, socket.CMSG_SPACE(4 * 4))
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._gone(f"its socket failed ({exc})")
                return
            fds = descriptors(ancillary)
            if not data:
                _close_all(fds)
                self._gone("it ended")
                return
            try:
                if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
                    raise ValueError("a reply larger than a reply can be")
                reply = json.loads(data)
            except ValueError as exc:  # not what this process's own code sends: it is not trusted further
                _close_all(fds)
                self._kill()
                self._gone(f"it sent a reply that cannot be read ({exc})")
                return
            answer = self._waiting.pop(reply.get("id"), None)
            if answer is None or answer.done():
                _close_all(fds)
            elif reply.get("error") is not None:
                _close_all(fds)
                answer.set_exception(OSError(reply.get("errno") or 0, reply["error"]))
            else:
                answer.set_result((reply, fds))

    def _gone(self, why: str) -> None:
        """The process is no more: its unanswered requests fail; the next request starts another."""
        sock, self._sock = self._sock, None
        if sock is None:
            return
        if self._loop is not None:
            self._loop.remove_reader(sock.fileno())
        sock.close()
        if not self._closed:
            log.error("the file process ended (%s); session file work goes to a thread until it is back", why)
            lived = time.monotonic() - self._started_at
            self._gap = min(self._gap * 2, MAX_RESTART_GAP_SECONDS) if lived < 10 * self._gap else RESTART_GAP_SECONDS
        waiting, self._waiting = self._waiting, {}
        for answer in waiting.values():
            if not answer.done():
                answer.set_exception(FileProcessGone(f"the file process ended before it answered ({why})"))
        process = self._process
        if process is not None:
            process.poll()  # reaped when it has exited (a kill leaves it to `close`)

    def _kill(self) -> None:
        if self._process is not None:
            self._process.kill()

    def _restart_later(self) -> None:
        if self._closed or self._loop is None or self._restarting is not None:
            return
        if time.monotonic() - self._started_at < self._gap:
            return
        self._restarting = self._loop.create_task(self._restart(), name="murmurd-file-process-start")

    async def _restart(self) -> None:
        try:
            old, self._process = self._process, None
            if old is not None:
                await asyncio.to_thread(_reap, old)
            await self.start()
        finally:
            self._restarting = None

    async def close(self) -> None:
        """Stop: the process finishes what it was sent, then ends at its socket's end."""
        self._closed = True
        if self._restarting is not None:
            await asyncio.wait({self._restarting}, timeout=STOP_SECONDS)
        pending = [answer for answer in self._waiting.values() if not answer.done()]
        if pending:
            await asyncio.wait(pending, timeout=STOP_SECONDS)
            if not all(answer.done() for answer in pending):
                self._kill()  # it did not answer in time: no reason to wait for it again
        self._gone("the daemon stopped")
        process, self._process = self._process, None
        if process is not None:
            await asyncio.to_thread(_reap, process)


def _reap(process: subprocess.Popen[bytes]) -> None:
    try:
        process.wait(STOP_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


def _close_handed(sent: asyncio.Future[tuple[dict[str, Any], list[int]]]) -> None:
    if not sent.cancelled() and sent.exception() is None:
        _close_all(sent.result()[1])
