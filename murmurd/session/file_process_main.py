"""The file process itself: a served daemon's session file work, done in a process of its own.

`python -m murmurd.session.file_process_main SOCKET TEMPLATE` (started by `file_process.py`,
never by hand): TEMPLATE is a descriptor holding the capsule's pickled `SessionTemplate`, written
by the daemon that started this process (trusted: nothing a guest wrote); SOCKET a `SOCK_SEQPACKET`
socket to that daemon. Each message is one JSON request, answered with one JSON reply (and the
descriptors it hands over), in order:

- `open`: lay a new session's workdir down (`SessionTemplate.lay_down`), record it in the context
  index, append the given trace lines, write `task.md`; hand over the workdir's held descriptor
  and its trace's.
- `end`: write `out/result.txt`, then append the given lines to the trace handed over with it
  (not when the result could not be written: the task's `task_end` then says it failed).

A failure of one piece is named in the reply and the rest goes on, as the thread that did this
work before acts (`session/task.py`); a request that fails whole gets its `OSError` back. Paths
come from the daemon, never from a guest: the session's root (a directory the daemon named), the
index directory (its state directory). What is written beneath a workdir goes through
`workdir_fs`, as on the thread: a symlink a guest planted is refused, never followed.
"""

from __future__ import annotations

import json
import os
import pickle
import socket
import sys
from pathlib import Path
from typing import Any

from murmurd import workdir_fs
from murmurd.staging.template import SessionTemplate
from murmurd.workdir import TASK

MAX_MESSAGE = 256 * 1024  # a request the daemon sends is smaller (file_process.MAX_REQUEST)
MAX_FDS = 4


def main(argv: list[str]) -> int:
    sock = socket.socket(fileno=int(argv[0]))
    with open(int(argv[1]), "rb") as source:
        template = pickle.load(source)  # noqa: S301 - written by the daemon that started this process
    assert isinstance(template, SessionTemplate)
    _send(sock, {"ready": True}, [])  # requests are sent from now on (the daemon waited for this)
    FileWork(template).serve(sock)
    return 0


class FileWork:
    """The requests' work, one at a time, in arrival order."""

    def __init__(self, template: SessionTemplate) -> None:
        self.template = template
        self._index_dirs: set[str] = set()

    def serve(self, sock: socket.socket) -> None:
        while True:
            try:
                data, ancillary, _, _ = sock.recvmsg(MAX_MESSAGE, socket.CMSG_SPACE(MAX_FDS * 4))
            except InterruptedError:
                continue
            except OSError:
                return  # the daemon's end is gone
            if not data:
                return  # the daemon closed its end: it has stopped
            fds = descriptors(ancillary)
            request: dict[str, Any] = {}
            handed: list[int] = []
            try:
                request = json.loads(data)
                reply, handed = self._answer(request, fds)
            except Exception as exc:  # noqa: BLE001 - the daemon hears of it; this process goes on
                reply = {"error": _named(exc), "errno": getattr(exc, "errno", None)}
            finally:
                for fd in fds:
                    os.close(fd)
            reply["id"] = request.get("id")
            try:
                _send(sock, reply, handed)
            except OSError:
                return  # the daemon stopped listening: nobody is left to answer
            finally:
                for fd in handed:
                    os.close(fd)

    def _answer(self, request: dict[str, Any], fds: list[int]) -> tuple[dict[str, Any], list[int]]:
        op = request.get("op")
        if op == "open":
            return self._open(request)
        if op == "end":
            if len(fds) != 1:
                raise ValueError("an end hands over exactly its trace")
            return self._end(request, fds[0]), []
        raise ValueError(f"unknown request {op!r}")

    def _open(self, request: dict[str, Any]) -> tuple[dict[str, Any], list[int]]:
        root, session_id = Path(request["root"]), request["session_id"]
        fresh = self.template.lay_down(root, session_id)  # raises: the opening fails whole
        hold, trace_fd = fresh.take_hold(), fresh.take_trace()
        assert trace_fd is not None
        handed = [trace_fd]
        held = hold is not None and hold.held
        if held:
            handed.append(hold.hand_over())  # type: ignore[union-attr]
        reply: dict[str, Any] = {"held": held}
        if request.get("index_dir") is not None:
            reply["index_error"] = _failed(lambda: self._record(request["index_dir"], session_id, request["context_id"]))
        lines = request.get("lines") or ""
        reply["trace_error"] = _failed(lambda: workdir_fs.write_all(trace_fd, lines.encode("utf-8")))
        if request.get("task") is not None and reply["trace_error"] is None:  # else the session fails first
            reply["task_error"] = _failed(lambda: workdir_fs.write_text(root, TASK, request["task"]))
        return reply, handed

    def _record(self, index_dir: str, session_id: str, context_id: str) -> None:
        if index_dir not in self._index_dirs:
            Path(index_dir).mkdir(parents=True, exist_ok=True)
            self._index_dirs.add(index_dir)
        workdir_fs.write_text(Path(index_dir), session_id, context_id)

    @staticmethod
    def _end(request: dict[str, Any], trace_fd: int) -> dict[str, Any]:
        root = Path(request["root"])
        result_error = _failed(lambda: workdir_fs.write_text(root, request["result"], request["text"]))
        if result_error is not None:  # the task ends failed: its `task_end` is not the one sent
            return {"result_error": result_error}
        lines = request.get("lines") or ""
        return {"trace_error": _failed(lambda: workdir_fs.write_all(trace_fd, lines.encode("utf-8")))}


def _failed(work: Any) -> str | None:
    """None when `work()` went through, else what failed, named (a file's error, a line that
    cannot be encoded)."""
    try:
        work()
    except (OSError, ValueError) as exc:
        return _named(exc)
    return None


def _named(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"


def descriptors(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    """The descriptors a message handed over (`SCM_RIGHTS`), now this process's own."""
    fds: list[int] = []
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            usable = len(data) - len(data) % 4
            fds += [int.from_bytes(data[i:i + 4], sys.byteorder, signed=True) for i in range(0, usable, 4)]
    return fds


def rights(fds: list[int]) -> list[tuple[int, int, bytes]]:
    """The ancillary data that hands `fds` over with a message."""
    data = b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in fds)
    return [(socket.SOL_SOCKET, socket.SCM_RIGHTS, data)] if fds else []


def _send(sock: socket.socket, reply: dict[str, Any], fds: list[int]) -> None:
    sock.sendmsg([json.dumps(reply).encode()], rights(fds))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
