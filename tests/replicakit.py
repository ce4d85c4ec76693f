"""Helpers for replica tests: several `murmurd serve` on one PostgreSQL database (or, where a test
also runs against SQLite, one daemon standing in for all of them)."""

from __future__ import annotations

import json
import re
import signal
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from a2akit import Served, chaos_capsule, start
from proxykit import LoopbackProxy

QUEUE = {"task_acceptance": "queue", "queue_depth": 100}


def replica_args(dsn: str | None, lease: float) -> list[str]:
    return ["--store", dsn, "--replica-lease", str(lease)] if dsn else []


@contextmanager
def replicas(root: Path, count: int, dsn: str | None, *, lease: float = 3.0, lifecycle: dict | None = None,
             grace: float = 10.0, deadline: int = 600, extra: Sequence[str] = ()) -> Iterator[list[Served]]:
    """`count` replicas on `dsn`, each with its own capsule copy and state directory; with no
    `dsn` (SQLite) one daemon, listed `count` times."""
    started: list[Served] = []
    try:
        for i in range(count if dsn else 1):
            capsule = chaos_capsule(root / f"replica{i}", lifecycle={**QUEUE, **(lifecycle or {})}, deadline=deadline)
            started.append(start(capsule, root / f"state{i}", *replica_args(dsn, lease), "--grace", str(grace),
                                 *extra))
        yield started * count if not dsn else started
    finally:
        for served in started:
            if served.proc.poll() is None:
                served.proc.send_signal(signal.SIGKILL)
                served.proc.wait(timeout=10)


def send_async(served: Served, text: str, **message: Any) -> dict:
    """A non-blocking send (the answer comes back at once, the task runs wherever it is claimed)."""
    msg = {"messageId": f"m{time.monotonic_ns()}", "role": "user", "parts": [{"text": text}], **message}
    reply = served.rpc("message/send", {"message": msg, "configuration": {"blocking": False}})
    assert "result" in reply, reply
    return reply["result"]


def task_starts(served: Served) -> list[str]:
    """Ids of the tasks whose run started in this replica (every session trace of its capsule)."""
    return [e["task_id"] for e in served.all_events() if e.get("event_type") == "task_start"]


def reply_to(served: Served, task_id: str, text: str) -> dict:
    msg = {"messageId": f"r{time.monotonic_ns()}", "role": "user", "parts": [{"text": text}], "taskId": task_id}
    return served.rpc("message/send", {"message": msg})


def wait_for(predicate: Any, timeout: float, what: str) -> float:
    """Poll `predicate` until true; the seconds it took."""
    began = time.monotonic()
    while not predicate():
        if time.monotonic() - began > timeout:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)
    return time.monotonic() - began


def frames_text(frames: list[tuple[str | None, str, Any]]) -> str:
    return json.dumps(frames)


class Partition(LoopbackProxy):
    """A loopback TCP proxy in front of the database. `drop()` makes it a black hole, as a
    network partition is: bytes already sent and new connections alike wait, nothing is refused
    or reset. `refuse()` is a database that went away: every connection is closed, new ones are
    closed at once. `heal()` lets everything through again (held bytes first)."""

    def __init__(self, target_port: int) -> None:
        self._flowing = threading.Event()
        self._flowing.set()
        self._refusing = False
        super().__init__(target_port)

    def dsn(self, dsn: str) -> str:
        """`dsn` with its host:port replaced by this proxy's."""
        return re.sub(r"@[^/]+/", f"@127.0.0.1:{self.port}/", dsn, count=1)

    def drop(self) -> None:
        self._flowing.clear()

    def refuse(self) -> None:
        self._refusing = True
        self._close_all()

    def heal(self) -> None:
        self._refusing = False
        self._flowing.set()

    def close(self) -> None:
        self._flowing.set()
        super().close()

    def _admit(self) -> bool:
        self._flowing.wait()
        return not self._refusing

    def _pump(self, source: socket.socket, sink: socket.socket, from_target: bool) -> None:
        try:
            while data := source.recv(65536):
                self._flowing.wait()
                sink.sendall(data)
        except OSError:
            pass
        finally:
            self._close(source, sink)
