"""`inference.transport: process` behind a real `murmurd serve` (issue 27): the CLI's answer is
the A2A task's, its text streams to SSE subscribers, many tasks run at once (one CLI each, the
concurrency bound applies), and tasks/cancel ends the CLI's whole tree."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import clikit
from a2akit import serving
from test_process_transport import ARGS, process_capsule, cli_processes

pytestmark = pytest.mark.skipif(clikit.missing_reason() is not None, reason=str(clikit.missing_reason()))


@pytest.fixture(autouse=True)
def _built(artifacts) -> None:
    artifacts.example("echo")


def _task_ends(served, task_id: str, timeout: float = 60) -> list[dict]:
    """The task's `task_end` lines, once its trace holds one (waited for, never assumed)."""
    deadline = time.monotonic() + timeout
    while True:
        events = served.all_events()
        ends = [e for e in events if e["event_type"] == "task_end" and e.get("task_id") == task_id]
        if ends:
            return ends
        if time.monotonic() > deadline:
            raise AssertionError(f"no task_end for {task_id} after {timeout}s; the traces hold "
                                 f"{[e['event_type'] for e in events]}")
        time.sleep(0.05)


def _message(text: str) -> dict:
    return {"message": {"messageId": f"m{time.monotonic_ns()}", "role": "user", "parts": [{"text": text}]}}


def _served_capsule(tmp_path: Path, script: clikit.ModelScript, dialect: str, **lifecycle: object) -> tuple[Path, dict]:
    bin_dir = tmp_path / "bin"
    clikit.linked_bin(bin_dir, dialect, clikit.claude_binary() if dialect == "claude" else clikit.codex_binary())
    env = clikit.cli_env(tmp_path / "home", script, bin_dir)
    model = clikit.CODEX_MODEL if dialect == "codex" else None
    capsule = process_capsule(tmp_path, dialect, model=model, provider=script.origin,
                              lifecycle={"after_task": "sleep", **lifecycle})
    return capsule, env


def test_the_cli_answer_is_the_a2a_answer_and_streams_to_subscribers(tmp_path: Path) -> None:
    with clikit.model_standin(clikit.ModelScript("echo", ARGS)) as script:
        capsule, env = _served_capsule(tmp_path, script, "claude")
        with serving(capsule, tmp_path / "state", env=env) as served:
            frames = served.events("message/stream", _message("echo, then answer"), timeout=300)
            task_id = frames[0][2]["id"]
            task = served.wait_state(task_id, "completed", timeout=300)
    text = json.dumps(task)
    assert clikit.ANSWER_PREFIX in text and "hello from the model" in text  # tasks/get carries the answer
    streamed = [data for _, _, data in frames if clikit.ANSWER_PREFIX in json.dumps(data)]
    assert streamed, frames  # the text reached the stream while the task ran
    assert frames[-1][2]["status"]["state"] == "completed"


def test_serve_runs_many_process_tasks_at_once_and_cancel_kills_the_cli(tmp_path: Path) -> None:
    with clikit.model_standin(clikit.ModelScript("echo", ARGS)) as script:
        capsule, env = _served_capsule(tmp_path, script, "codex", task_acceptance="queue", queue_depth=4,
                                       max_concurrent_tasks=3)
        with serving(capsule, tmp_path / "state", env=env) as served:
            sent = [served.send(f"task {i}") for i in range(3)]
            done = [served.wait_state(t["id"], "completed", timeout=300) for t in sent]
            for task in done:
                assert clikit.ANSWER_PREFIX in json.dumps(task) and "hello from the model" in json.dumps(task)
            events = served.all_events()
            starts = [e["timestamp"] for e in events if e["event_type"] == "task_start"]
            ends = [e["timestamp"] for e in events if e["event_type"] == "task_end"]
            assert len(starts) == 3 and max(starts) < min(ends)  # all three ran at once, each its own CLI

            script.always_call = True  # a model that never stops: cancel ends it
            running = served.send("loop forever")
            deadline = time.monotonic() + 120
            calls = script.model_calls("/v1/responses")
            while script.model_calls("/v1/responses") < calls + 2:
                assert time.monotonic() < deadline, script.problems
                time.sleep(0.05)
            assert cli_processes(tmp_path)
            canceled = served.rpc("tasks/cancel", {"id": running["id"]})["result"]
            assert canceled["status"]["state"] == "canceled"
            deadline = time.monotonic() + 60
            while cli_processes(tmp_path):
                assert time.monotonic() < deadline, "the CLI outlived tasks/cancel"
                time.sleep(0.05)


def test_a_tool_that_requests_input_pauses_the_a2a_task_until_the_reply(tmp_path: Path, artifacts) -> None:
    from conftest import FIXTURES

    artifacts.fixture("ask")
    ask = {"name": "ask", "runtime": "tool", "source": str(FIXTURES / "ask"), "local_source": True}
    with clikit.model_standin(clikit.ModelScript("ask", {"prompt": "May I proceed?"})) as script:
        bin_dir = tmp_path / "bin"
        clikit.linked_bin(bin_dir, "claude", clikit.claude_binary())
        env = clikit.cli_env(tmp_path / "home", script, bin_dir)
        capsule = process_capsule(tmp_path, "claude", artifacts=[ask], lifecycle={"after_task": "sleep"},
                                  provider=script.origin)
        with serving(capsule, tmp_path / "state", env=env) as served:
            task = served.send("ask first")
            waiting = served.wait_state(task["id"], "input-required", timeout=300)
            assert waiting["artifacts"] == [{"name": "prompt", "parts": [{"text": "May I proceed?"}]}]
            reply = {"messageId": "reply-1", "role": "user", "parts": [{"text": "approved, go"}], "taskId": task["id"]}
            assert served.rpc("message/send", {"message": reply})["result"]["id"] == task["id"]
            done = served.wait_state(task["id"], "completed", "failed", timeout=300)
    assert done["status"]["state"] == "completed", done
    assert clikit.ANSWER_PREFIX + "approved, go" in json.dumps(done)


def test_an_unanswered_request_input_ends_the_task_and_its_cli(tmp_path: Path, artifacts) -> None:
    from conftest import FIXTURES

    artifacts.fixture("ask")
    ask = {"name": "ask", "runtime": "tool", "source": str(FIXTURES / "ask"), "local_source": True}
    with clikit.model_standin(clikit.ModelScript("ask", {"prompt": "Anyone there?"})) as script:
        bin_dir = tmp_path / "bin"
        clikit.linked_bin(bin_dir, "claude", clikit.claude_binary())
        env = clikit.cli_env(tmp_path / "home", script, bin_dir)
        capsule = process_capsule(tmp_path, "claude", artifacts=[ask], provider=script.origin,
                                  lifecycle={"after_task": "sleep", "input_timeout_secs": 2})
        with serving(capsule, tmp_path / "state", env=env) as served:
            task = served.send("ask, nobody answers")
            served.wait_state(task["id"], "input-required", timeout=300)
            failed = served.wait_state(task["id"], "failed", timeout=300)
            assert cli_processes(tmp_path) == []  # the task's end took the CLI with it
            ends = _task_ends(served, task["id"])
    assert [e["exit_status"] for e in ends] == ["failed"]
    assert ends[0]["error"] == "input-timeout"  # the tool's abort ended the task, not the CLI's own answer
    assert clikit.ANSWER_PREFIX not in json.dumps(failed)
