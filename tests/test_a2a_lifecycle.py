"""Task lifecycle through a real daemon: acceptance modes, input-required, cancel, shutdown, restart."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from a2akit import ROOT, chaos_capsule, serving, start
from conftest import EXAMPLES


@pytest.fixture(autouse=True)
def _built(artifacts) -> None:
    for name in ("chaos-driver", "ask"):
        artifacts.fixture(name)
    artifacts.example("echo")


def test_single_rejects_a_second_task_while_one_runs(tmp_path: Path) -> None:
    with serving(chaos_capsule(tmp_path, deadline=3), tmp_path / "state") as served:
        first = served.send("mode:hang")
        served.wait_state(first["id"], "working")
        second = served.send("me too")
        assert second["status"]["state"] == "rejected"
        assert "single task" in second["status"]["message"]
        assert served.wait_state(first["id"], "failed")["status"]["message"].endswith("deadline exceeded after 3 s")
        third = served.send("now")
        assert served.wait_state(third["id"], "completed")["status"]["response"] == "answer: now"


def test_single_accepts_the_next_task_as_soon_as_the_last_one_reads_finished(tmp_path: Path) -> None:
    """A caller polls `tasks/get` until `completed`, then sends again at once. The run is still
    releasing its slot in that moment; `single` must not answer "one is running" (it used to,
    now and then, under load)."""
    import httpx

    with serving(chaos_capsule(tmp_path), tmp_path / "state") as served, httpx.Client(timeout=30) as client:
        for i in range(40):
            # a blocking send answers the moment the task reads completed; the next goes at once
            msg = {"messageId": f"m{i}", "role": "user", "parts": [{"text": f"turn {i}"}]}
            body = {"jsonrpc": "2.0", "id": i, "method": "message/send",
                    "params": {"message": msg, "configuration": {"blocking": True}}}
            done = client.post(served.url, json=body).json()["result"]
            assert done["status"]["state"] == "completed", done["status"]
            assert done["status"]["response"] == f"answer: turn {i}"


def test_queue_holds_queue_depth_tasks_and_cancel_runs_the_next(tmp_path: Path) -> None:
    capsule = chaos_capsule(tmp_path, lifecycle={"task_acceptance": "queue", "queue_depth": 1,
                                                         "max_concurrent_tasks": 1})
    with serving(capsule, tmp_path / "state") as served:
        running = served.send("mode:hang")
        served.wait_state(running["id"], "working")
        queued = served.send("queued")
        full = served.send("one too many")
        assert served.get(queued["id"])["status"]["state"] == "submitted"
        assert full["status"]["state"] == "rejected" and "queue is full" in full["status"]["message"]
        started = time.monotonic()
        canceled = served.rpc("tasks/cancel", {"id": running["id"]})["result"]
        assert canceled["status"]["state"] == "canceled"
        assert time.monotonic() - started < 1.0
        assert served.wait_state(queued["id"], "completed", timeout=10)["status"]["response"] == "answer: queued"


def test_cancel_of_a_queued_task(tmp_path: Path) -> None:
    capsule = chaos_capsule(tmp_path, lifecycle={"task_acceptance": "queue", "queue_depth": 2,
                                                         "max_concurrent_tasks": 1})
    with serving(capsule, tmp_path / "state") as served:
        running = served.send("mode:hang")
        served.wait_state(running["id"], "working")
        queued = served.send("never runs")
        assert served.rpc("tasks/cancel", {"id": queued["id"]})["result"]["status"]["state"] == "canceled"
        served.rpc("tasks/cancel", {"id": running["id"]})
        assert served.get(queued["id"])["status"]["state"] == "canceled"


def test_input_required_end_to_end(tmp_path: Path) -> None:
    with serving(chaos_capsule(tmp_path), tmp_path / "state") as served:
        msg = {"messageId": "ask-1", "role": "user", "parts": [{"text": "mode:ask"}]}
        frames: list = []

        reader = threading.Thread(target=lambda: served.events("message/stream", {"message": msg}, into=frames))
        reader.start()
        deadline = time.monotonic() + 20
        while not any(d.get("status", {}).get("state") == "input-required" for _i, e, d in frames if e == "status"):
            assert time.monotonic() < deadline, frames
            time.sleep(0.05)
        task_id = frames[0][2]["id"]
        waiting = served.get(task_id)
        assert waiting["status"]["state"] == "input-required"
        assert waiting["artifacts"] == [{"name": "prompt", "parts": [{"text": "May I proceed?"}]}]
        prompt_frame = next(d for _i, e, d in frames if e == "status" and d["status"]["state"] == "input-required")
        assert prompt_frame["status"]["message"] == "May I proceed?" and prompt_frame["final"] is False
        reply = {"messageId": "reply-1", "role": "user", "parts": [{"text": "approved, go"}], "taskId": task_id}
        assert served.rpc("message/send", {"message": reply})["result"]["id"] == task_id
        reader.join(timeout=20)
        assert frames[-1][2]["status"] == {"state": "completed", "message": "answer: approved, go",
                                            "response": "answer: approved, go"}
        states = [d["status"]["state"] for _i, e, d in frames if e == "status"]
        assert states == ["submitted", "working", "input-required", "working", "completed"]


def test_a_message_naming_a_task_that_does_not_wait_is_invalid(tmp_path: Path) -> None:
    with serving(chaos_capsule(tmp_path), tmp_path / "state") as served:
        done = served.send("first")
        served.wait_state(done["id"], "completed")
        reply = {"messageId": "r", "role": "user", "parts": [{"text": "late"}], "taskId": done["id"]}
        error = served.rpc("message/send", {"message": reply})["error"]
        assert error["code"] == -32602 and "not waiting for input" in error["message"]
        missing = {"messageId": "r2", "role": "user", "parts": [{"text": "?"}], "taskId": "tsk_" + "0" * 32}
        assert served.rpc("message/send", {"message": missing})["error"]["code"] == -32001


def test_input_timeout_fails_the_task(tmp_path: Path) -> None:
    capsule = chaos_capsule(tmp_path, lifecycle={"input_timeout_secs": 1})
    with serving(capsule, tmp_path / "state") as served:
        msg = {"messageId": "t", "role": "user", "parts": [{"text": "mode:ask"}]}
        frames = served.events("message/stream", {"message": msg})
        assert frames[-1][1] == "status"
        assert frames[-1][2]["status"] == {"state": "failed", "message": "input-timeout"} and frames[-1][2]["final"]
        ends = [e for e in served.trace() if e["event_type"] == "task_end"]
        assert ends[-1]["exit_status"] == "failed"


def test_cancel_stops_a_long_wasm_call_within_a_second(tmp_path: Path) -> None:
    with serving(chaos_capsule(tmp_path, deadline=600), tmp_path / "state") as served:
        task = served.send("mode:hang")
        served.wait_state(task["id"], "working")
        time.sleep(0.3)  # the driver is spinning inside WASM now
        started = time.monotonic()
        answer = served.rpc("tasks/cancel", {"id": task["id"]})
        assert "result" in answer, answer
        assert answer["result"]["status"]["state"] == "canceled"
        assert time.monotonic() - started < 1.0
        after = served.send("after cancel")
        assert served.wait_state(after["id"], "completed")["status"]["response"] == "answer: after cancel"


def test_after_task_exit_ends_the_daemon_with_a_complete_trace(tmp_path: Path) -> None:
    capsule = chaos_capsule(tmp_path)
    served = start(capsule, tmp_path / "state", "--after-task", "exit")
    task = served.send("only one")
    assert served.wait_state(task["id"], "completed")["status"]["response"] == "answer: only one"
    assert served.proc.wait(timeout=20) == 0
    kinds = [e["event_type"] for e in served.trace()]
    # upstream: the session pair of the task's one attempt nests inside the task
    assert kinds == ["a2a_task_received", "task_start", "session_start", "inference", "session_end", "task_end"]


def _debug_hooked(capsule: Path) -> Path:
    """`capsule` with the debug hook attached: it logs every event it receives, one JSON line each."""
    manifest = yaml.safe_load((capsule / "murmur.yaml").read_text())
    manifest["artifacts"].append({"name": "debug-hook", "runtime": "hook", "source": str(EXAMPLES / "debug-hook"),
                                  "local_source": True})
    (capsule / "murmur.yaml").write_text(yaml.safe_dump(manifest))
    return capsule


def _debug_events(workdir: Path) -> list[str]:
    lines = (workdir / "logs" / "hook-debug-hook.log").read_text().splitlines()
    return [json.loads(line)["event"] for line in lines if line.startswith("{")]


@pytest.mark.parametrize(("acceptance", "after", "tasks"), [("none", "exit", 1), ("single", "exit", 1),
                                                        ("single", "sleep", 2)])
def test_the_daemons_hooks_hear_one_session_start_and_end_per_launch(tmp_path: Path, artifacts, acceptance: str,
                                                                     after: str, tasks: int) -> None:
    """The seed: once per launch each, `on-session-start` before the first task's work (with `none`
    or `single`, `on-task-start` follows it at once), `on-session-end` when the daemon ends
    (`after_task: exit`, or SIGTERM), however many tasks (and trace session pairs) ran."""
    artifacts.example("debug-hook")
    capsule = _debug_hooked(chaos_capsule(tmp_path, lifecycle={"task_acceptance": acceptance, "after_task": after}))
    if acceptance == "none":  # a launch task, no A2A
        served = start(capsule, tmp_path / "state", "--task", "launch")
    else:
        served = start(capsule, tmp_path / "state")
        for n in range(tasks):
            task = served.send(f"task {n}")
            assert served.wait_state(task["id"], "completed")["status"]["response"] == f"answer: task {n}"
    if after == "sleep":
        assert "on-session-end" not in _debug_events(served.workdir)  # the session is still open
        served.proc.send_signal(signal.SIGTERM)
    assert served.proc.wait(timeout=30) == 0
    one_task = ["on-task-start", "on-inference", "on-task-end"]
    assert _debug_events(served.workdir) == ["on-stage", "on-session-start", *one_task * tasks, "on-session-end"]
    kinds = [e["event_type"] for e in served.trace()]
    assert kinds.count("session_start") == kinds.count("session_end") == tasks  # the trace: per attempt
    assert kinds[-4:] == ["session_start", "inference", "session_end", "task_end"]


@pytest.mark.parametrize(("acceptance", "after"), [("single", "exit"), ("single", "sleep"), ("queue", "exit")])
def test_the_idle_rule_runs_an_empty_task_then_ends_the_daemon(tmp_path: Path, acceptance: str, after: str) -> None:
    served = start(chaos_capsule(tmp_path), tmp_path / "state", "--after-task", after,
                   "--task-acceptance", acceptance, env={"MURMUR_A2A_TIMEOUT_SECS": "1"})
    assert served.proc.wait(timeout=30) == 0
    assert any("no A2A message received within timeout; running with empty task" in line for line in served.stderr)
    kinds = [e["event_type"] for e in served.trace()]
    # the loop ran once, but it was no task anyone sent: no task_start / task_end
    assert kinds == ["session_start", "inference", "session_end"]


def test_queue_with_after_task_sleep_waits_past_the_idle_window(tmp_path: Path) -> None:
    capsule = chaos_capsule(tmp_path, lifecycle={"task_acceptance": "queue", "after_task": "sleep"})
    with serving(capsule, tmp_path / "state", env={"MURMUR_A2A_TIMEOUT_SECS": "1"}) as served:
        time.sleep(2.5)
        assert served.proc.poll() is None
        task = served.send("late")
        assert served.wait_state(task["id"], "completed")["status"]["response"] == "answer: late"


def test_none_without_a_launch_task_exits_at_once(tmp_path: Path) -> None:
    started = time.monotonic()
    served = start(chaos_capsule(tmp_path), tmp_path / "state", "--lifecycle-task-acceptance", "none")
    assert served.proc.wait(timeout=20) == 0
    assert time.monotonic() - started < 20
    assert served.trace() == []  # no task, no loop: the trace exists and is empty (upstream)


@pytest.mark.parametrize("acceptance", ["none", "single"])
def test_a_launch_task_runs_once_then_the_daemon_exits(tmp_path: Path, acceptance: str) -> None:
    served = start(chaos_capsule(tmp_path), tmp_path / "state", "--task-acceptance", acceptance,
                   "--task", "from the launch")
    assert served.proc.wait(timeout=30) == 0
    events = served.trace()
    start_event = next(e for e in events if e["event_type"] == "task_start")
    assert start_event["source"] == "task_md"
    assert start_event["task_id"].startswith("tsk_") and start_event["context_id"].startswith("ctx_")
    assert (served.workdir / "out" / "result.txt").read_text() == "answer: from the launch"
    assert [e["exit_status"] for e in events if e["event_type"] == "task_end"] == ["ok"]


def test_a_queue_capsule_runs_the_launch_task_then_serves(tmp_path: Path) -> None:
    capsule = chaos_capsule(tmp_path, lifecycle={"task_acceptance": "queue"})
    with serving(capsule, tmp_path / "state", "--task", "first") as served:
        deadline = time.monotonic() + 30
        while not any(e["event_type"] == "task_end" for e in served.all_events()):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        task = served.send("second")
        assert served.wait_state(task["id"], "completed")["status"]["response"] == "answer: second"
        # a queue capsule runs each context in its own session: read every session's trace
        sources = [e["source"] for e in served.all_events() if e["event_type"] == "task_start"]
        assert sources == ["task_md", "a2a"]


def test_sigterm_lets_the_running_task_end_then_exits_zero(tmp_path: Path) -> None:
    with serving(chaos_capsule(tmp_path, deadline=2), tmp_path / "state", "--grace", "10") as served:
        task = served.send("mode:hang")
        served.wait_state(task["id"], "working")
        assert served.stop(signal.SIGTERM) == 0
        events = served.trace()
        ends = [e for e in events if e["event_type"] == "task_end"]
        assert ends and "deadline" in ends[-1].get("error", "")
        assert [e["event_type"] for e in events][-2:] == ["session_end", "task_end"]
        assert events[-2]["exit_status"] == "failed"


def test_sigint_cancels_after_the_grace_period(tmp_path: Path) -> None:
    with serving(chaos_capsule(tmp_path, deadline=600), tmp_path / "state", "--grace", "0.5") as served:
        task = served.send("mode:hang")
        served.wait_state(task["id"], "working")
        started = time.monotonic()
        assert served.stop(signal.SIGINT) == 0
        assert time.monotonic() - started < 5
        events = served.trace()
        # the cancelled attempt still ends its session, then the task ends
        assert [e["event_type"] for e in events][-2:] == ["session_end", "task_end"]
        assert events[-1]["error"] == "canceled"


def test_a_restart_keeps_finished_tasks_and_fails_the_interrupted_one(tmp_path: Path) -> None:
    capsule = chaos_capsule(tmp_path, deadline=600)
    state = tmp_path / "state"
    first = start(capsule, state)
    done = first.send("finished before the crash")
    first.wait_state(done["id"], "completed")
    running = first.send("mode:hang")
    first.wait_state(running["id"], "working")
    first.stop(signal.SIGKILL)
    with serving(capsule, state) as second:
        assert second.get(done["id"])["status"]["response"] == "answer: finished before the crash"
        interrupted = second.get(running["id"])
        assert interrupted["status"] == {"state": "failed", "message": "interrupted: daemon restarted"}


def test_a_taken_internal_port_is_an_error_naming_it(tmp_path: Path) -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    capsule = chaos_capsule(tmp_path, capabilities={"network": {"internal_port": port}})
    proc = subprocess.run([sys.executable, "-m", "murmurd", "serve", str(capsule), "--state-dir", str(tmp_path / "s")],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    holder.close()
    assert proc.returncode == 1
    assert f"127.0.0.1:{port}" in proc.stderr and "already in use" in proc.stderr


@pytest.mark.parametrize("where", ["network", "capabilities"])
def test_the_internal_port_is_used_when_free(tmp_path: Path, where: str) -> None:
    """Upstream writes the port in a top-level `network:` block; murmurd's older place still works."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    block = {"internal_port": port} if where == "network" else {"network": {"internal_port": port}}
    capsule = chaos_capsule(tmp_path, **{where: block})
    with serving(capsule, tmp_path / "state", "--port", "1") as served:
        assert served.url == f"http://127.0.0.1:{port}/"


def test_threaded_conversations_keep_history_and_per_task_results(tmp_path: Path) -> None:
    capsule = chaos_capsule(tmp_path, lifecycle={"conversation": "threaded"})
    with serving(capsule, tmp_path / "state") as served:
        first = served.send("one", contextId="ctx_thread")
        served.wait_state(first["id"], "completed")
        second = served.send("two", contextId="ctx_thread")
        served.wait_state(second["id"], "completed")
        history = (served.workdir / "contexts" / "ctx_thread" / "history.json").read_text()
        assert "one" in history and "answer: two" in history
        assert (served.workdir / "out" / f"result_{second['id']}.txt").read_text() == "answer: two"
        starts = [e for e in served.trace() if e["event_type"] == "inference"]
        assert starts[1]["input_tokens"] > starts[0]["input_tokens"]  # the history went along


def test_cancel_while_waiting_for_input(tmp_path: Path) -> None:
    with serving(chaos_capsule(tmp_path), tmp_path / "state") as served:
        task = served.send("mode:ask")
        served.wait_state(task["id"], "input-required")
        started = time.monotonic()
        assert served.rpc("tasks/cancel", {"id": task["id"]})["result"]["status"]["state"] == "canceled"
        assert time.monotonic() - started < 1.0
        assert served.get(task["id"])["status"]["state"] == "canceled"
        after = served.send("next one")
        assert served.wait_state(after["id"], "completed")["status"]["response"] == "answer: next one"


def test_sigterm_while_a_task_waits_for_input_cancels_it_after_the_grace(tmp_path: Path) -> None:
    with serving(chaos_capsule(tmp_path), tmp_path / "state", "--grace", "0.5") as served:
        task = served.send("mode:ask")
        served.wait_state(task["id"], "input-required")
        assert served.stop(signal.SIGTERM) == 0
        events = served.trace()
        assert [e["event_type"] for e in events][-2:] == ["session_end", "task_end"]
        assert events[-1]["error"] == "canceled"
    with serving(chaos_capsule(tmp_path), tmp_path / "state") as again:
        assert again.get(task["id"])["status"] == {"state": "canceled", "message": "canceled: daemon shutting down"}
