"""Helpers for A2A tests: real `murmurd serve` subprocesses on loopback, JSON-RPC and SSE calls."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from httpx_sse import connect_sse

import uvicorn

from conftest import EXAMPLES, FIXTURES
from murmurd.a2a.core.daemon import CapsuleDaemon
from murmurd.a2a.core.lifecycle import LifecyclePolicy
from murmurd.a2a.http.server import ServerConfig, create_app
from murmurd.a2a.serve import bind_socket
from murmurd.a2a.stores.sqlite import SqliteTaskStore
from murmurd.host import ComponentHost
from murmurd.manifest.writing import dump_yaml
from murmurd.staging.stage import stage_capsule

ROOT = Path(__file__).resolve().parent.parent


def chaos_capsule(root: Path, name: str = "chaos", *, lifecycle: dict | None = None, deadline: int = 600,
                  **extra: Any) -> Path:
    """A capsule whose driver fails or asks on demand (see tests/fixtures/chaos-driver)."""
    directory = root / name
    directory.mkdir(parents=True, exist_ok=True)
    manifest = {
        "name": name,
        "version": "1.0.0",
        "artifacts": [
            {"name": "chaos-driver", "runtime": "driver", "source": str(FIXTURES / "chaos-driver"),
             "local_source": True, "capabilities": {"limits": {"deadline_seconds": deadline}}},
            {"name": "ask", "runtime": "tool", "source": str(FIXTURES / "ask"), "local_source": True},
            {"name": "echo", "runtime": "tool", "source": str(EXAMPLES / "echo"), "local_source": True},
        ],
        "inference": {"endpoint": "http://127.0.0.1:9", "model": "chaos",
                      "driver": {"artifact": "chaos-driver", "config": {}}},
        "lifecycle": {"after_task": "sleep", **(lifecycle or {})},
        **extra,
    }
    (directory / "murmur.yaml").write_text(dump_yaml(manifest))
    return directory


def napping_capsule(root: Path, word: str = "nap") -> Path:
    """A capsule whose scripted driver says it will nap, then runs `sleep 600` through the shell,
    for a task holding `word` (a rule also matches the system prompt, which holds the capsule's
    name: pick a word it lacks), and answers "Woke up." otherwise: a napping task is surely
    running until it is cancelled (it could only complete after ten minutes)."""
    nap = {"stop_reason": "tool_call", "content": [
        {"type": "text", "text": "Taking a long nap now. "},
        {"type": "tool_call", "id": "nap_1", "name": "sleep", "input": {"command": "600"}}]}
    woke = {"stop_reason": "end_turn", "content": [{"type": "text", "text": "Woke up."}]}
    manifest = {
        "name": "napper", "version": "0.1.0",
        "artifacts": [{"name": "scripted-driver", "runtime": "driver", "local_source": True,
                       "source": str(EXAMPLES / "scripted-driver")}],
        "capabilities": {"shell": {"allow": ["sleep"]}},
        "lifecycle": {"task_acceptance": "queue", "after_task": "sleep"},
        "inference": {"endpoint": "http://127.0.0.1:9", "model": "scripted", "driver": {
            "artifact": "scripted-driver", "config": {"rules": [{"when": word, "response": nap}],
                                                      "responses": [woke] * 4}}},
    }
    directory = root / "napper"
    directory.mkdir()
    (directory / "murmur.yaml").write_text(dump_yaml(manifest))
    return directory


def script_capsule(root: Path, name: str, capsule_wasm: Path, **extra: Any) -> Path:
    directory = root / name
    directory.mkdir(parents=True, exist_ok=True)
    manifest = {"name": name, "version": "1.0.0", "lifecycle": {"after_task": "sleep"}, **extra}
    (directory / "murmur.yaml").write_text(dump_yaml(manifest))
    (directory / "capsule.wasm").write_bytes(capsule_wasm.read_bytes())
    return directory


@dataclass
class Served:
    proc: subprocess.Popen[str]
    capsule: Path
    state_dir: Path
    url: str
    session_id: str
    stderr: list[str] = field(default_factory=list)

    @property
    def workdir(self) -> Path:
        return self.capsule / "workdir" / self.session_id

    def trace(self) -> list[dict[str, Any]]:
        path = self.workdir / "trace.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def session_traces(self) -> dict[str, list[dict[str, Any]]]:
        """Every session's trace by session id: the daemon's own and, above a bound of 1, one per
        context (workdir/ses_*/trace.jsonl)."""
        traces = {}
        for path in sorted((self.capsule / "workdir").glob("ses_*/trace.jsonl")):
            traces[path.parent.name] = [json.loads(line) for line in path.read_text().splitlines()]
        return traces

    def all_events(self) -> list[dict[str, Any]]:
        """The events of every session's trace, in time order (stable within one trace)."""
        merged = [e for events in self.session_traces().values() for e in events]
        return sorted(merged, key=lambda e: e["timestamp"])

    def post(self, body: Any, headers: dict[str, str] | None = None, raw: bytes | None = None) -> httpx.Response:
        content = raw if raw is not None else json.dumps(body).encode()
        return httpx.post(self.url, content=content, headers={"content-type": "application/json", **(headers or {})},
                          timeout=30)

    def rpc(self, method: str, params: Any = None, headers: dict[str, str] | None = None, id: Any = 1) -> dict:
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
        if params is not None:
            body["params"] = params
        return self.post(body, headers).json()

    def send(self, text: str, **message: Any) -> dict:
        msg = {"messageId": f"m{time.monotonic_ns()}", "role": "user", "parts": [{"text": text}], **message}
        return self.rpc("message/send", {"message": msg})["result"]

    def get(self, task_id: str) -> dict:
        return self.rpc("tasks/get", {"id": task_id})["result"]

    def wait_state(self, task_id: str, *states: str, timeout: float = 30) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            task = self.get(task_id)
            if task["status"]["state"] in states:
                return task
            if time.monotonic() > deadline:
                raise AssertionError(f"task {task_id} stayed {task['status']['state']}, wanted {states}")
            time.sleep(0.05)

    def events(self, method: str, params: Any, headers: dict[str, str] | None = None,
               limit: int | None = None, timeout: float = 30,
               into: list[tuple[str | None, str, Any]] | None = None) -> list[tuple[str | None, str, Any]]:
        """(id, event, data) of every SSE frame until the stream closes (or `limit` frames);
        `into` receives each frame as it arrives."""
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        frames: list[tuple[str | None, str, Any]] = into if into is not None else []
        with httpx.Client(timeout=timeout) as client:
            with connect_sse(client, "POST", self.url, json=body, headers=headers or {}) as source:
                for event in source.iter_sse():
                    frames.append((event.id or None, event.event, json.loads(event.data) if event.data else None))
                    if limit is not None and len(frames) >= limit:
                        break
        return frames

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=timeout)


def start(capsule: Path, state_dir: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 90) -> Served:
    proc = subprocess.Popen(
        [sys.executable, "-m", "murmurd", "serve", str(capsule), "--state-dir", str(state_dir), *args],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, **(env or {})},
    )
    lines: list[str] = []
    ready = threading.Event()
    found: dict[str, str] = {}

    def drain() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if line.startswith("murmur: url "):
                found["url"] = line.split()[-1]
            elif line.startswith("session: "):
                found["session"] = line.split()[-1]
                ready.set()
        ready.set()

    threading.Thread(target=drain, daemon=True).start()
    if not ready.wait(timeout) or "session" not in found:
        proc.kill()
        raise AssertionError("murmurd serve did not start:\n" + "".join(lines))
    return Served(proc, capsule, state_dir, f"http://{found['url']}/", found["session"], lines)


@contextmanager
def serving(capsule: Path, state_dir: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[Served]:
    served = start(capsule, state_dir, *args, env=env)
    try:
        yield served
    except BaseException:  # a failing test's report shows what the daemon said (pytest captures it)
        print("".join(["murmurd serve's stderr, last 60 lines:\n", *served.stderr[-60:]]), file=sys.stderr)
        raise
    finally:
        if served.proc.poll() is None:
            served.proc.kill()
            served.proc.wait(timeout=10)


def orchestrator_capsule(root: Path, capsule_wasm: Path, worker: Served, **extra: Any) -> Path:
    """A script capsule (tests/fixtures/pull-capsule) allowed to message exactly `worker`."""
    from urllib.parse import urlsplit

    address = urlsplit(worker.url)
    allow = {"network": {"allow": [f"http://{address.hostname}:{address.port}"]}}
    return script_capsule(root, "orchestrator", capsule_wasm, capabilities=allow, **extra)


@contextmanager
def in_process(tmp_path: Path, host: ComponentHost) -> Iterator[tuple[CapsuleDaemon, SqliteTaskStore, str, asyncio.AbstractEventLoop]]:
    """A daemon of the chaos capsule with a real SQLite store behind uvicorn on loopback, its loop on a
    thread of this process (a test reaches its parts): (daemon, store, url, loop)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def run(coro, timeout: float = 60):
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)

    staged = stage_capsule(chaos_capsule(tmp_path), host=host)

    async def build() -> tuple[CapsuleDaemon, SqliteTaskStore, uvicorn.Server, asyncio.Task, str]:
        store = await SqliteTaskStore.open(tmp_path / "state" / "tasks.sqlite3")
        daemon = CapsuleDaemon(staged, host, store, policy=LifecyclePolicy(after_task="sleep"))
        await daemon.start()
        sock = bind_socket("127.0.0.1", 0)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        server = uvicorn.Server(uvicorn.Config(create_app(daemon, ServerConfig(url=url + "/")), log_level="warning",
                                               lifespan="off"))
        return daemon, store, server, asyncio.create_task(server.serve(sockets=[sock])), url

    daemon, store, server, serving_task, url = run(build())
    try:
        yield daemon, store, url, loop
    finally:
        async def shut() -> None:
            server.should_exit = True
            await serving_task
            await daemon.stop(1.0)

        run(shut())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
