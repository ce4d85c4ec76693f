"""Issue 11 through a real daemon: tasks of different contexts run at once, each context in its
own session; one context's tasks run in order; replies reach the right task; cancel and SIGTERM
act per task while others run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from a2akit import ROOT, Served, chaos_capsule, serving
from conftest import EXAMPLES
from hookkit import end_turn, tool_call
from loopkit import driver_capsule
from murmurd.manifest.writing import dump_yaml


@pytest.fixture(autouse=True)
def _built(artifacts) -> None:
    for name in ("chaos-driver", "ask"):
        artifacts.fixture(name)
    artifacts.example("echo")


def _queue_capsule(tmp_path: Path, deadline: int = 600, **lifecycle: Any) -> Path:
    return chaos_capsule(tmp_path, deadline=deadline,
                         lifecycle={"task_acceptance": "queue", "queue_depth": 8, **lifecycle})


def _message(text: str, **fields: Any) -> dict[str, Any]:
    return {"messageId": f"m{time.monotonic_ns()}", "role": "user", "parts": [{"text": text}], **fields}


def _reply(served: Served, text: str, **fields: Any) -> dict[str, Any]:
    return served.rpc("message/send", {"message": _message(text, **fields)})


def _intervals(served: Served) -> dict[str, tuple[int, int]]:
    """task id -> (task_start, task_end) timestamps, from every session's trace."""
    starts: dict[str, int] = {}
    spans: dict[str, tuple[int, int]] = {}
    for event in served.all_events():
        if event["event_type"] == "task_start":
            starts[event["task_id"]] = event["timestamp"]
        elif event["event_type"] == "task_end" and event["task_id"] in starts:
            spans[event["task_id"]] = (starts[event["task_id"]], event["timestamp"])
    return spans


def _session_of(served: Served, task_id: str) -> str:
    """The session a task ran in (the daemon's trace names it: `a2a_task_session`)."""
    return next(e["task_session_id"] for e in served.trace()
                if e["event_type"] == "a2a_task_session" and e["task_id"] == task_id)


def test_tasks_of_different_contexts_overlap_and_one_context_runs_in_order(tmp_path: Path) -> None:
    capsule = _queue_capsule(tmp_path, deadline=2)
    with serving(capsule, tmp_path / "state", "--max-concurrent-tasks", "5") as served:
        asking = [served.send("mode:ask") for _ in range(3)]  # three contexts, all at once
        for task in asking:
            served.wait_state(task["id"], "input-required")
        first = served.send("mode:hang", contextId="ctx_one")  # runs (no input wait) until its deadline
        served.wait_state(first["id"], "working")
        second = served.send("after the first", contextId="ctx_one")
        assert served.get(second["id"])["status"]["state"] == "submitted"  # its context is busy
        for task in asking:
            assert _reply(served, f"go {task['id']}", taskId=task["id"])["result"]["id"] == task["id"]
        for task in asking:
            assert served.wait_state(task["id"], "completed")["status"]["response"] == f"answer: go {task['id']}"
        assert served.wait_state(first["id"], "failed")["status"]["message"].endswith("deadline exceeded after 2 s")
        assert served.wait_state(second["id"], "completed")["status"]["response"] == "answer: after the first"
        spans = _intervals(served)
        parallel = [spans[t["id"]] for t in asking]
        assert max(s for s, _e in parallel) < min(e for _s, e in parallel)  # all three ran at once
        assert spans[second["id"]][0] >= spans[first["id"]][1]  # one context: one after the other
        sessions = {_session_of(served, t["id"]) for t in asking}
        assert len(sessions) == 3 and served.session_id not in sessions
        assert _session_of(served, first["id"]) == _session_of(served, second["id"])


def test_a_bound_of_one_keeps_one_session_and_upstream_replies(tmp_path: Path) -> None:
    capsule = _queue_capsule(tmp_path, deadline=2, max_concurrent_tasks=1)
    with serving(capsule, tmp_path / "state") as served:
        asking = served.send("mode:ask")
        served.wait_state(asking["id"], "input-required")
        # upstream: a message naming no task answers the one waiting task, whatever its context
        assert _reply(served, "any message", contextId="ctx_elsewhere")["result"]["id"] == asking["id"]
        assert served.wait_state(asking["id"], "completed")["status"]["response"] == "answer: any message"
        running = served.send("mode:hang", contextId="ctx_x")
        served.wait_state(running["id"], "working")
        queued = served.send("queued behind it", contextId="ctx_y")  # another context, but the bound is 1
        assert served.get(queued["id"])["status"]["state"] == "submitted"
        served.wait_state(queued["id"], "completed")
        assert list(served.session_traces()) == [served.session_id]
        starts = [e["task_id"] for e in served.trace() if e["event_type"] == "task_start"]
        assert starts == [asking["id"], running["id"], queued["id"]]


def test_a_reply_by_context_id_and_a_message_naming_neither_starts_a_task(tmp_path: Path) -> None:
    with serving(_queue_capsule(tmp_path), tmp_path / "state", "--max-concurrent-tasks", "4") as served:
        waiting = served.send("mode:ask", contextId="ctx_reply")
        other = served.send("mode:ask")
        served.wait_state(waiting["id"], "input-required")
        served.wait_state(other["id"], "input-required")
        fresh = _reply(served, "a new caller")["result"]  # names neither: never a reply here
        assert fresh["id"] not in (waiting["id"], other["id"])
        assert served.wait_state(fresh["id"], "completed")["status"]["response"] == "answer: a new caller"
        assert served.get(waiting["id"])["status"]["state"] == "input-required"
        assert _reply(served, "by context", contextId="ctx_reply")["result"]["id"] == waiting["id"]
        assert served.wait_state(waiting["id"], "completed")["status"]["response"] == "answer: by context"
        assert served.get(other["id"])["status"]["state"] == "input-required"
        served.rpc("tasks/cancel", {"id": other["id"]})


def test_an_ambiguous_reply_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    with serving(_queue_capsule(tmp_path), tmp_path / "state", "--max-concurrent-tasks", "4") as served:
        waiting = served.send("mode:ask", contextId="ctx_a")
        served.wait_state(waiting["id"], "input-required")
        error = _reply(served, "which?", taskId=waiting["id"], contextId="ctx_b")["error"]
        assert error["code"] == -32602
        assert "ambiguous reply: task" in error["message"] and "ctx_a" in error["message"]
        assert served.get(waiting["id"])["status"]["state"] == "input-required"  # nothing was delivered
        assert _reply(served, "this one", taskId=waiting["id"], contextId="ctx_a")["result"]["id"] == waiting["id"]
        assert served.wait_state(waiting["id"], "completed")["status"]["response"] == "answer: this one"


def test_request_input_in_one_task_while_another_streams(tmp_path: Path) -> None:
    with serving(_queue_capsule(tmp_path), tmp_path / "state", "--max-concurrent-tasks", "4") as served:
        waiting = served.send("mode:ask")
        served.wait_state(waiting["id"], "input-required")
        frames = served.events("message/stream", {"message": _message("streamed meanwhile")}, timeout=20)
        states = [d["status"]["state"] for _i, e, d in frames if e == "status"]
        assert states == ["submitted", "working", "completed"]
        assert frames[-1][2]["status"]["response"] == "answer: streamed meanwhile"
        assert served.get(waiting["id"])["status"]["state"] == "input-required"
        _reply(served, "now", taskId=waiting["id"])
        assert served.wait_state(waiting["id"], "completed")["status"]["response"] == "answer: now"


def test_cancel_of_one_of_several_running_tasks(tmp_path: Path) -> None:
    with serving(_queue_capsule(tmp_path), tmp_path / "state", "--max-concurrent-tasks", "4") as served:
        spinning = served.send("mode:hang")
        asking = [served.send("mode:ask") for _ in range(2)]
        served.wait_state(spinning["id"], "working")
        for task in asking:
            served.wait_state(task["id"], "input-required")
        started = time.monotonic()
        assert served.rpc("tasks/cancel", {"id": spinning["id"]})["result"]["status"]["state"] == "canceled"
        assert served.rpc("tasks/cancel", {"id": asking[0]["id"]})["result"]["status"]["state"] == "canceled"
        assert time.monotonic() - started < 2.0
        assert served.get(asking[1]["id"])["status"]["state"] == "input-required"
        _reply(served, "still here", taskId=asking[1]["id"])
        assert served.wait_state(asking[1]["id"], "completed")["status"]["response"] == "answer: still here"
        ends = {e["task_id"]: e["exit_status"] for e in served.all_events() if e["event_type"] == "task_end"}
        assert ends[spinning["id"]] == "failed" and ends[asking[1]["id"]] == "ok"


def test_sigterm_with_several_running_cancels_them_after_the_grace_and_loses_nothing(tmp_path: Path) -> None:
    capsule = _queue_capsule(tmp_path)
    state = tmp_path / "state"
    with serving(capsule, state, "--max-concurrent-tasks", "4", "--grace", "0.5") as served:
        asking = [served.send("mode:ask") for _ in range(3)]
        for task in asking:
            served.wait_state(task["id"], "input-required")
        done = served.send("finished first")
        served.wait_state(done["id"], "completed")
        assert served.stop(signal.SIGTERM) == 0
        traces = served.session_traces()
        assert len(traces) == 5  # the daemon's own, and one per context
        own = [e["event_type"] for e in traces.pop(served.workdir.name)]
        # the daemon's own session only records acceptance: no session pair of its own
        assert set(own) == {"a2a_task_received", "a2a_task_session"} and len(own) == 8
        for events in traces.values():  # each task's attempt ended, canceled or not, inside its task
            kinds = [e["event_type"] for e in events]
            assert kinds[:2] == ["task_start", "session_start"] and kinds[-2:] == ["session_end", "task_end"]
    with serving(capsule, state, "--max-concurrent-tasks", "4") as again:
        for task in asking:
            assert again.get(task["id"])["status"] == {"state": "canceled", "message": "canceled: daemon shutting down"}
        assert again.get(done["id"])["status"]["response"] == "answer: finished first"


def test_one_contexts_files_are_invisible_to_another(tmp_path: Path) -> None:
    with serving(_queue_capsule(tmp_path), tmp_path / "state", "--max-concurrent-tasks", "4") as served:
        alpha = served.send("alpha secret", contextId="ctx_alpha")
        beta = served.send("beta words", contextId="ctx_beta")
        served.wait_state(alpha["id"], "completed")
        served.wait_state(beta["id"], "completed")
        root = served.capsule / "workdir"
        alpha_dir, beta_dir = root / _session_of(served, alpha["id"]), root / _session_of(served, beta["id"])
        assert alpha_dir != beta_dir
        assert (alpha_dir / "task.md").read_text() == "alpha secret"
        assert (beta_dir / "out" / "result.txt").read_text() == "answer: beta words"
        for path in beta_dir.rglob("*"):
            if path.is_file():
                assert b"alpha" not in path.read_bytes(), path
        assert not (served.workdir / "task.md").exists()  # the daemon's own session ran no task


def test_eight_callers_at_once_are_all_accepted_and_each_gets_its_own_answer(tmp_path: Path) -> None:
    with serving(_queue_capsule(tmp_path, queue_depth=1), tmp_path / "state", "--max-concurrent-tasks", "8") as served:
        sent: dict[int, dict[str, Any]] = {}

        def call(n: int) -> None:
            sent[n] = served.send(f"caller {n}")

        threads = [threading.Thread(target=call, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert sorted(sent) == list(range(8))
        for n, task in sent.items():
            assert task["status"]["state"] != "rejected", task
            assert served.wait_state(task["id"], "completed")["status"]["response"] == f"answer: caller {n}"


def _first_inference(served: Served, task_id: str) -> dict[str, Any]:
    """The first `inference` line of a task, in the trace of the session it ran in."""
    events = served.session_traces()[_session_of(served, task_id)]
    start = next(i for i, e in enumerate(events) if e["event_type"] == "task_start" and e["task_id"] == task_id)
    return next(e for e in events[start:] if e["event_type"] == "inference")


def _hooked_queue_capsule(tmp_path: Path, artifacts) -> Path:
    """The chaos capsule with the debug hook, which logs every event it receives, per session."""
    artifacts.example("debug-hook")
    directory = _queue_capsule(tmp_path, conversation="threaded")
    manifest = yaml.safe_load((directory / "murmur.yaml").read_text())
    manifest["artifacts"].append({"name": "debug-hook", "runtime": "hook", "source": str(EXAMPLES / "debug-hook"),
                                  "local_source": True})
    (directory / "murmur.yaml").write_text(dump_yaml(manifest))
    return directory


def _hook_events(workdir: Path) -> list[dict[str, Any]]:
    log = workdir / "logs" / "hook-debug-hook.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return [json.loads(line) for line in lines if line.startswith("{")]


def _open_beneath(pid: int, directory: Path) -> list[str]:
    """What process `pid` holds open beneath `directory` (its trace, a hook's preopened dirs)."""
    held = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = Path(fd.readlink())
        except OSError:
            continue  # closed meanwhile
        if target == directory or directory in target.parents:
            held.append(str(target))
    return held


def _wait_for(condition: Any, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_each_context_session_has_its_own_hook_instance_and_ordered_events(tmp_path: Path, artifacts) -> None:
    capsule = _hooked_queue_capsule(tmp_path, artifacts)
    with serving(capsule, tmp_path / "state", "--max-concurrent-tasks", "4") as served:
        asking = [served.send("mode:ask") for _ in range(2)]
        for task in asking:
            served.wait_state(task["id"], "input-required")
        for task in asking:
            _reply(served, "ok", taskId=task["id"])
            served.wait_state(task["id"], "completed")
        sessions = {task["id"]: _session_of(served, task["id"]) for task in asking}
        for task in asking:
            events = _hook_events(served.capsule / "workdir" / sessions[task["id"]])
            names = [e["event"] for e in events]
            # the context session opened before its first task; it is still open: no on-session-end
            assert names[:2] == ["on-session-start", "on-task-start"] and names[-1] == "on-task-end"
            assert "on-session-end" not in names
            assert {e["session_id"] for e in events} == {sessions[task["id"]]}  # one instance, this session's own
            assert {e["task_id"] for e in events if "task_id" in e} == {task["id"]}  # never another task's
        # a second task of each context runs in the same session: no second on-session-start
        again = {task["id"]: served.send("again", contextId=task["contextId"]) for task in asking}
        for first, second in again.items():
            served.wait_state(second["id"], "completed")
            assert _session_of(served, second["id"]) == sessions[first]
        assert served.stop() == 0  # shutdown closes every context session: each hears its end once
        for first, second in again.items():
            events = _hook_events(served.capsule / "workdir" / sessions[first])
            names = [e["event"] for e in events]
            assert names.count("on-session-start") == 1 and names[0] == "on-session-start"
            assert names.count("on-session-end") == 1 and names[-2:] == ["on-task-end", "on-session-end"]
            second_start = names.index("on-task-start", names.index("on-task-end"))
            assert names[second_start - 1] == "on-task-end" and names.count("on-task-start") == 2
            assert [e["task_id"] for e in events if e["event"] == "on-task-end"] == [first, second["id"]]
            assert {e["session_id"] for e in events} == {sessions[first]}
        own = [e["event"] for e in _hook_events(served.workdir)]
        assert own == ["on-stage"]  # the daemon's own session runs no hook above a bound of 1


def test_an_idle_context_session_closes_and_the_conversation_continues_in_a_new_one(tmp_path: Path,
                                                                                   artifacts) -> None:
    capsule = _hooked_queue_capsule(tmp_path, artifacts)
    with serving(capsule, tmp_path / "state", "--max-concurrent-tasks", "4", "--session-idle", "0.3") as served:
        first = served.send("one", contextId="ctx_thread")
        served.wait_state(first["id"], "completed")
        first_session = served.capsule / "workdir" / _session_of(served, first["id"])
        # the idle close, not the task's end, is the session's end: its hooks hear it then, once
        _wait_for(lambda: [e["event"] for e in _hook_events(first_session)][-1:] == ["on-session-end"])
        names = [e["event"] for e in _hook_events(first_session)]
        assert names.count("on-session-start") == names.count("on-session-end") == 1
        assert names[:2] == ["on-session-start", "on-task-start"] and names[-2:] == ["on-task-end", "on-session-end"]
        # closing writes no line (upstream): the closed session holds no descriptor beneath its workdir
        _wait_for(lambda: not _open_beneath(served.proc.pid, first_session))
        assert served.session_traces()[first_session.name][-1]["event_type"] == "task_end"
        second = served.send("two", contextId="ctx_thread")
        served.wait_state(second["id"], "completed")
        second_session = served.capsule / "workdir" / _session_of(served, second["id"])
        assert second_session != first_session  # a new session, same context, its own start
        assert [e["event"] for e in _hook_events(second_session)][:2] == ["on-session-start", "on-task-start"]
        tokens = {t["id"]: _first_inference(served, t["id"])["input_tokens"] for t in (first, second)}
        assert tokens[second["id"]] > tokens[first["id"]]  # the history went along
        history = (served.workdir / "contexts" / "ctx_thread" / "history.json").read_text()
        assert "one" in history and "answer: two" in history


def test_a_session_that_cannot_be_opened_fails_its_task_alone(tmp_path: Path) -> None:
    with serving(_queue_capsule(tmp_path), tmp_path / "state", "--max-concurrent-tasks", "4") as served:
        sessions = served.capsule / "workdir"
        moved = served.capsule / "workdir.moved"
        sessions.rename(moved)
        sessions.write_text("not a directory")  # where the next context session would be laid out
        try:
            failed = served.send("nowhere to run")
            task = served.wait_state(failed["id"], "failed")
            assert task["status"]["message"].startswith("cannot open a session:")
        finally:
            sessions.unlink()
            moved.rename(sessions)
        after = served.send("somewhere again")
        assert served.wait_state(after["id"], "completed")["status"]["response"] == "answer: somewhere again"


def test_the_bound_on_the_command_line_must_be_positive_and_applies_to_queue_only(tmp_path: Path) -> None:
    refused = subprocess.run([sys.executable, "-m", "murmurd", "serve", str(tmp_path), "--max-concurrent-tasks", "0"],
                             capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert refused.returncode == 2 and "--max-concurrent-tasks" in refused.stderr
    with serving(chaos_capsule(tmp_path, deadline=5), tmp_path / "state", "--max-concurrent-tasks", "8") as served:
        running = served.send("mode:hang")
        served.wait_state(running["id"], "working")
        assert served.send("second")["status"]["state"] == "rejected"  # single: still one at a time
        assert any("applies to task_acceptance: queue" in line for line in served.stderr)
        served.rpc("tasks/cancel", {"id": running["id"]})


def test_a_stuck_task_delays_neither_tasks_get_nor_another_tasks_stream(tmp_path: Path) -> None:
    # the deadline is far beyond anything below, however loaded the machine: every answer comes
    # while the stuck task still spins (each get says so), and the cancel at the end stops it
    with serving(_queue_capsule(tmp_path, deadline=120), tmp_path / "state", "--max-concurrent-tasks", "4") as served:
        stuck = served.send("mode:hang")  # spins inside WASM until its deadline
        served.wait_state(stuck["id"], "working")
        frames = served.events("message/stream", {"message": _message("meanwhile")}, timeout=60)
        assert frames[-1][2]["status"]["response"] == "answer: meanwhile"
        samples = []
        for _ in range(40):
            begun = time.monotonic()
            assert served.get(stuck["id"])["status"]["state"] == "working"
            samples.append(time.monotonic() - begun)
        assert sorted(samples)[-2] < 1.0, samples  # a loop blocked by the spin would answer only at the deadline
        served.rpc("tasks/cancel", {"id": stuck["id"]})


def test_resubscribe_follows_one_task_among_several(tmp_path: Path) -> None:
    with serving(_queue_capsule(tmp_path), tmp_path / "state", "--max-concurrent-tasks", "4") as served:
        tasks = [served.send("mode:ask") for _ in range(3)]
        for task in tasks:
            served.wait_state(task["id"], "input-required")
        followed = tasks[1]["id"]
        frames: list = []
        reader = threading.Thread(target=lambda: served.events("tasks/resubscribe", {"id": followed}, into=frames))
        reader.start()
        time.sleep(0.5)  # the stream is open (it replays nothing without Last-Event-ID)
        for task in (tasks[0], tasks[2], tasks[1]):  # the others end first, while it follows
            _reply(served, f"to {task['id']}", taskId=task["id"])
            served.wait_state(task["id"], "completed")
        reader.join(timeout=20)
        assert not reader.is_alive()
        assert {d["id"] for _i, _e, d in frames} == {followed}  # only that task's frames
        assert frames[-1][2]["status"]["response"] == f"answer: to {followed}"


def test_a_file_one_contexts_task_writes_is_invisible_to_anothers(tmp_path: Path, artifacts) -> None:
    """Context A's task writes `secret.txt` with a shell command; context B's task then runs
    `cat secret.txt` in its own workdir and finds nothing (the scripted driver answers by what
    the last message holds)."""
    artifacts.example("scripted-driver")
    rules = [
        {"when": "LEAK-2", "response": end_turn("leaked")},  # the cat printed A's file
        {"when": "No such file", "response": end_turn("not there")},
        {"when": "Exit code: 0", "response": end_turn("written")},
        {"when": "write the secret", "response": tool_call("w", "sh", {"command": "echo LEAK-$((1+1)) > secret.txt"})},
        {"when": "read the secret", "response": tool_call("r", "cat", {"command": "secret.txt"})},
    ]
    capsule = driver_capsule(tmp_path, "scripted-driver", {"rules": rules, "responses": []},
                             capabilities={"shell": {"allow": ["sh", "cat"]}},
                             lifecycle={"task_acceptance": "queue", "after_task": "sleep"})
    with serving(capsule, tmp_path / "state", "--max-concurrent-tasks", "4") as served:
        writer = served.send("write the secret", contextId="ctx_a")
        assert served.wait_state(writer["id"], "completed")["status"]["response"] == "written"
        reader = served.send("read the secret", contextId="ctx_b")
        assert served.wait_state(reader["id"], "completed")["status"]["response"] == "not there"
        again = served.send("read the secret", contextId="ctx_a")  # the writer's own context sees it
        assert served.wait_state(again["id"], "completed")["status"]["response"] == "leaked"
        written = served.capsule / "workdir" / _session_of(served, writer["id"]) / "secret.txt"
        assert written.read_text().strip() == "LEAK-2"
