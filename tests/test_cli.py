"""The command line as users run it: `murmurd call`, `run`, `send`, `watch`, as real subprocesses."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from a2akit import ROOT, chaos_capsule, serving
from conftest import EXAMPLES


def _murmurd(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "murmurd", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=os.environ.copy())


def test_call_prints_the_tool_result_and_streams_chunks_to_stderr(artifacts) -> None:
    wasm = artifacts.example("echo")
    proc = _murmurd("call", str(wasm), "--data", '{"text": "cli"}')
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"status": "passed", "summary": "echoed 15 bytes", "data": '{"text": "cli"}',
                                       "data-path": None, "truncated": False, "metadata": [["state_effect", "read"]]}
    assert "echo: cli" in proc.stderr


def test_call_reports_a_deadline_clearly(tmp_path: Path) -> None:
    from hostile import tool_component

    wasm = tmp_path / "spin.wasm"
    wasm.write_bytes(tool_component())
    proc = _murmurd("call", str(wasm), "--deadline", "0.5")
    assert proc.returncode == 2
    assert "spin: deadline exceeded after 0.5 s" in proc.stderr


def test_call_with_a_grant_dir_runs_write_file_inside_it(artifacts, tmp_path: Path) -> None:
    wasm = artifacts.example("write-file")
    proc = _murmurd("call", str(wasm), "--grant-dir", str(tmp_path), "--data", '{"path": "a.txt", "content": "hi"}')
    assert proc.returncode == 0 and json.loads(proc.stdout)["data-path"] == "a.txt"
    assert (tmp_path / "a.txt").read_text() == "hi"


def test_run_answers_the_hello_capsule_offline(tmp_path: Path) -> None:
    proc = _murmurd("run", str(EXAMPLES / "hello"), "--task", "Say hello", "--workdir", str(tmp_path / "wd"))
    assert proc.returncode == 0, proc.stderr
    assert "Everything ran offline inside WebAssembly." in proc.stdout
    assert f"workdir: {tmp_path / 'wd'}" in proc.stderr
    workdir = tmp_path / "wd"
    # --workdir is the capsule's `.`; the runtime's bookkeeping goes to .murmur/<session-id>
    assert (workdir / "task.md").read_text() == "Say hello"
    assert (workdir / "out" / "greeting.txt").read_text() == "Hello, world!\n"
    (books,) = (workdir / ".murmur").iterdir()
    assert books.name.startswith("ses_") and f"session: {books.name}" in proc.stderr
    assert (books / "out" / "result.txt").read_text().startswith("Hello! I echoed a message")
    assert (books / "MURMUR.md").is_file() and (books / "tools" / "echo").is_dir()
    assert not (workdir / "trace.jsonl").exists() and not (workdir / "tools").exists()
    kinds = [json.loads(line)["event_type"] for line in (books / "trace.jsonl").read_text().splitlines()]
    assert kinds.count("tool_call") == 2 and kinds.count("skill_call") == 1 and kinds[-2:] == ["session_end", "task_end"]
    assert kinds[:2] == ["task_start", "session_start"]  # the session pair nests inside the task


def test_run_exits_one_and_says_why_when_the_task_fails(tmp_path: Path, artifacts) -> None:
    for name in ("chaos-driver", "ask"):
        artifacts.fixture(name)
    capsule = chaos_capsule(tmp_path)
    proc = _murmurd("run", str(capsule), "--task", "mode:banana")
    assert proc.returncode == 1
    assert "task ended failed" in proc.stderr and "unknown stop_reason 'banana'" in proc.stderr


def test_run_refuses_an_invalid_capsule_with_every_error(tmp_path: Path) -> None:
    (tmp_path / "murmur.yaml").write_text("name: broken\ninference: {endpoint: ftp://x}\n")
    proc = _murmurd("run", str(tmp_path), "--task", "x")
    assert proc.returncode == 1
    assert "cannot launch" in proc.stderr and "version" in proc.stderr and "inference.endpoint" in proc.stderr


def test_send_and_stream_against_a_served_capsule(tmp_path: Path, artifacts) -> None:
    for name in ("chaos-driver", "ask"):
        artifacts.fixture(name)
    capsule = chaos_capsule(tmp_path, lifecycle={"task_acceptance": "queue", "queue_depth": 5})
    with serving(capsule, tmp_path / "state") as served:
        sent = _murmurd("send", served.url, "plain send", "--json")
        assert sent.returncode == 0, sent.stderr
        task = json.loads(sent.stdout)
        assert task["id"].startswith("tsk_")
        streamed = _murmurd("send", served.url, "streamed", "--stream")
        assert streamed.returncode == 0, streamed.stderr
        assert "answer: streamed" in streamed.stdout and "completed" in streamed.stdout


def test_watch_renders_the_live_stream(tmp_path: Path, artifacts) -> None:
    for name in ("chaos-driver", "ask"):
        artifacts.fixture(name)
    with serving(chaos_capsule(tmp_path), tmp_path / "state") as served:
        watcher = subprocess.Popen([sys.executable, "-m", "murmurd", "watch", served.url], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, cwd=ROOT)
        lines: list[str] = []
        threading.Thread(target=lambda: lines.extend(watcher.stdout), daemon=True).start()  # type: ignore[arg-type]
        # the watch has no frame of its own to say it is subscribed: send until a task is rendered
        # whole (one sent before the subscription, or while it was made, is missed in part)
        def rendered(task_id: str) -> bool:
            text = "".join(lines)
            return f"[{task_id}] working" in text and f"[{task_id}] completed" in text

        deadline = time.monotonic() + 120
        while True:
            task = served.send("watch me")
            served.wait_state(task["id"], "completed")
            patience = time.monotonic() + 10
            while not rendered(task["id"]) and time.monotonic() < patience:
                time.sleep(0.05)
            if rendered(task["id"]) or time.monotonic() > deadline:
                break
        watcher.terminate()
        watcher.wait(timeout=10)
        text = "".join(lines)
        assert f"[{task['id']}] working" in text and "answer: watch me" in text and f"[{task['id']}] completed" in text


def test_send_to_an_unreachable_peer_fails_clearly() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for args in (("send", f"http://127.0.0.1:{port}/", "hi"), ("watch", f"http://127.0.0.1:{port}/")):
        proc = _murmurd(*args, timeout=30)
        assert proc.returncode == 1
        assert f"127.0.0.1:{port}/: unreachable (ConnectError" in proc.stderr


def test_send_reports_json_rpc_errors(tmp_path: Path, artifacts) -> None:
    for name in ("chaos-driver", "ask"):
        artifacts.fixture(name)
    # `none` runs only its launch task, then exits after a 1 s linger: a launch task that hangs keeps
    # it up for as long as the `send` takes to start on a loaded machine
    with serving(chaos_capsule(tmp_path), tmp_path / "state", "--task-acceptance", "none",
                 "--task", "mode:hang", "--grace", "1") as served:
        proc = _murmurd("send", served.url, "anyone?")
        assert proc.returncode == 1
        assert "JSON-RPC error -32601" in proc.stderr and "task_acceptance none" in proc.stderr
