"""`murmurd serve` as an operator leaves it running (issue 24 items 1 and 2): a manifest without a
lifecycle block is served as queue + sleep (it stays up, the idle rule never runs), an explicit
single/exit capsule exits after its task and logs why, and the log has one line per task accepted
and finished, as text or as JSON lines. Every check runs against a real daemon."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from a2akit import ROOT, Served, chaos_capsule, start
from conftest import EXAMPLES


def hello_copy(root: Path, lifecycle: dict | None = None) -> Path:
    """The README's `examples/hello`, its sources made absolute, in a directory of the test's own."""
    manifest = yaml.safe_load((EXAMPLES / "hello" / "murmur.yaml").read_text())
    for entry in manifest["artifacts"]:
        entry["source"] = str((EXAMPLES / "hello" / entry["source"]).resolve())
    assert "lifecycle" not in manifest  # the point: the README's capsule sets no lifecycle
    if lifecycle is not None:
        manifest["lifecycle"] = lifecycle
    capsule = root / "hello"
    capsule.mkdir()
    (capsule / "murmur.yaml").write_text(yaml.safe_dump(manifest))
    return capsule


def wait_line(served: Served, predicate, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in list(served.stderr):
            if predicate(line):
                return line
        time.sleep(0.05)
    raise AssertionError("no such log line in:\n" + "".join(served.stderr))


def json_lines(served: Served) -> list[dict]:
    out = []
    for line in list(served.stderr):
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


IDLE = {"MURMUR_A2A_TIMEOUT_SECS": "1"}


def test_hello_without_a_lifecycle_answers_three_tasks_and_outlives_the_idle_window(tmp_path: Path) -> None:
    served = start(hello_copy(tmp_path), tmp_path / "state", env=IDLE)
    try:
        wait_line(served, lambda line: "task_acceptance: queue, after_task: sleep (serve's default" in line)
        for n in range(3):
            task = served.send(f"hello number {n}")
            done = served.wait_state(task["id"], "completed", timeout=120)
            assert "Hello! I echoed a message" in json.dumps(done)
        # the idle window (1 s) passes several times over while the daemon keeps answering
        ready = time.monotonic() + 5
        while time.monotonic() < ready:
            assert served.proc.poll() is None, "".join(served.stderr)
            assert httpx_get(served.url + "healthz") == 200
            time.sleep(0.2)
        assert not any("no A2A message received" in line for line in served.stderr)
        starts = [e for e in served.all_events() if e["event_type"] == "session_start"]
        assert len(starts) == 3  # the three tasks' attempts, no empty idle task
        assert served.stop() == 0
    finally:
        if served.proc.poll() is None:
            served.proc.kill()
    finished = [line for line in served.stderr if "task finished" in line]
    assert len(finished) == 3 and all("state=completed" in line and "turns=4" in line for line in finished)
    assert any("shutting down: a signal asked for it" in line for line in served.stderr)


def httpx_get(url: str) -> int:
    import httpx

    return httpx.get(url, timeout=30).status_code


def test_an_explicit_single_exit_capsule_exits_after_one_task_and_logs_why(tmp_path: Path) -> None:
    capsule = hello_copy(tmp_path, {"task_acceptance": "single", "after_task": "exit"})
    served = start(capsule, tmp_path / "state", "--log-format", "json", env=IDLE | {"MURMUR_A2A_TIMEOUT_SECS": "600"})
    task = served.send("just once")
    served.wait_state(task["id"], "completed", timeout=120)
    assert served.proc.wait(timeout=60) == 0
    records = json_lines(served)
    why = [r for r in records if r["message"].startswith("shutting down:")]
    assert len(why) == 1 and "after_task: exit" in why[0]["message"] and "(as set)" in why[0]["message"]
    assert why[0]["logger"] == "murmurd.serve" and why[0]["level"] == "INFO" and why[0]["time"].endswith("Z")
    # the machine-readable banner survives the JSON format, with the console for a person
    assert any(line.startswith("murmur: url 127.0.0.1:") for line in served.stderr)
    console = [line for line in served.stderr if line.startswith("murmur: console ")]
    assert console == [f"murmur: console {served.url}console/\n"]


def test_one_explicit_field_keeps_upstreams_idle_rule(tmp_path: Path) -> None:
    """`after_task: sleep` alone is an explicit lifecycle: upstream's (single + sleep), whose idle
    rule runs the empty task and exits."""
    served = start(hello_copy(tmp_path, {"after_task": "sleep"}), tmp_path / "state", env=IDLE)
    assert served.proc.wait(timeout=120) == 0
    assert any("no A2A message received within timeout" in line for line in served.stderr)
    assert any("shutting down: no A2A message within the idle window" in line for line in served.stderr)


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_the_log_has_a_line_per_task_accepted_and_finished(tmp_path: Path, fmt: str) -> None:
    capsule = chaos_capsule(tmp_path, lifecycle={"task_acceptance": "queue"})
    served = start(capsule, tmp_path / "state", "--log-format", fmt)
    try:
        ok = served.send("fine")
        bad = served.send("mode:failed")  # the chaos driver fails this task
        served.wait_state(ok["id"], "completed")
        served.wait_state(bad["id"], "failed")
        wait_line(served, lambda line: "task finished" in line and bad["id"] in line)
        assert served.stop() == 0
    finally:
        if served.proc.poll() is None:
            served.proc.kill()
    if fmt == "json":
        records = [r for r in json_lines(served) if r["logger"] == "murmurd.tasks"]
        by = {(r["message"], r["task_id"]): r for r in records}
        accepted = by[("task accepted", ok["id"])]
        assert accepted["context_id"] == ok["contextId"] and accepted["origin"] == "operator"
        done = by[("task finished", ok["id"])]
        assert done["state"] == "completed" and done["turns"] == 1 and done["duration_ms"] >= 0
        assert "reason" not in done
        failed = by[("task finished", bad["id"])]
        assert failed["state"] == "failed" and failed["level"] == "WARNING" and failed["reason"]
        assert len([r for r in records if r["message"] == "task finished"]) == 2
        stopped = [r for r in json_lines(served) if r["message"].startswith("stopped:")]
        assert stopped and stopped[0]["drained"] == 0 and stopped[0]["canceled_queued"] == 0
    else:
        lines = [line for line in served.stderr if " murmurd.tasks: " in line]
        assert len([line for line in lines if "task accepted" in line]) == 2
        (done,) = [line for line in lines if "task finished" in line and ok["id"] in line]
        assert f"task_id={ok['id']}" in done and "state=completed" in done and " INFO " in done
        (failed,) = [line for line in lines if "task finished" in line and bad["id"] in line]
        assert "state=failed" in failed and "reason=" in failed and " WARNING " in failed


def test_serve_help_states_the_lifecycle_rule() -> None:
    proc = subprocess.run([sys.executable, "-m", "murmurd", "serve", "--help"], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    text = " ".join(proc.stdout.split())
    assert "served as task_acceptance: queue + after_task: sleep" in text
    assert "upstream's lifecycle exactly" in text and "--log-format {text,json}" in text


STALLED = (b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
           b"Content-Length: 100\r\n\r\n{")  # a body that never comes: the connection stays busy


def test_refusals_at_a_limit_and_the_shutdown_are_logged(tmp_path: Path) -> None:
    import socket
    import threading
    from urllib.parse import urlsplit

    capsule = chaos_capsule(tmp_path, lifecycle={"task_acceptance": "queue", "queue_depth": 10})
    served = start(capsule, tmp_path / "state", "--log-format", "json", "--max-connections", "3",
                   "--max-streams", "1", "--body-timeout", "120", "--grace", "0.5")
    address = urlsplit(served.url)
    try:
        # a stream of a task that hangs holds the one stream slot
        frames: list = []
        streaming = threading.Thread(target=lambda: served.events(
            "message/stream", {"message": {"messageId": "m-hang", "role": "user", "parts": [{"text": "mode:hang"}]}},
            into=frames, timeout=120), daemon=True)
        streaming.start()
        wait_line(served, lambda line: '"task accepted"' in line)
        second = served.post({"jsonrpc": "2.0", "id": 2, "method": "message/stream", "params": {
            "message": {"messageId": "m-2", "role": "user", "parts": [{"text": "hi"}]}}})
        assert "error" in second.json()
        refused = wait_line(served, lambda line: '"stream refused' in line)
        assert json.loads(refused)["limit"] == "max_streams"
        # every other connection busy: the next one is answered 503, and the log says so
        def stall() -> socket.socket:
            sock = socket.create_connection((address.hostname, address.port), timeout=10)
            sock.sendall(STALLED)
            return sock

        def evicted(sock: socket.socket) -> bool:
            sock.setblocking(False)
            try:
                return sock.recv(1, socket.MSG_PEEK) == b""
            except BlockingIOError:
                return False
            except ConnectionError:
                return True
            finally:
                sock.setblocking(True)

        stalled = [stall(), stall()]
        deadline = time.monotonic() + 60
        while True:
            # a probe that arrives before the server read a stalled request's headers evicts that
            # connection (it looked idle): put it back and probe again
            stalled = [stall() if evicted(sock) else sock for sock in stalled]
            late = socket.create_connection((address.hostname, address.port), timeout=30)
            late.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            answer = b""
            while chunk := late.recv(65536):  # to the server's close: this probe is gone before the next
                answer += chunk
            late.close()
            if answer.startswith(b"HTTP/1.1 503") or time.monotonic() > deadline:
                break
        line = json.loads(wait_line(served, lambda line: '"connection refused' in line))
        assert line["limit"] == "max_connections" and line["client"].startswith("127.0.0.1:")
        for sock in stalled:
            sock.close()
        assert served.stop() == 0
    finally:
        if served.proc.poll() is None:
            served.proc.kill()
    records = json_lines(served)
    (stopped,) = [r for r in records if r["message"].startswith("stopped:")]
    assert stopped["canceled_running"] == 1 and stopped["drained"] == 0
    (finished,) = [r for r in records if r["message"] == "task finished"]
    assert finished["state"] == "canceled" and "shutting down" in finished["reason"]
