"""The streamed answer is the stored answer (issue 24 item 4), through a real daemon serving the
README's `examples/hello`: its first turn says "Let me check my tools. " and calls `echo`, whose
chunk ("echo: hello from the hello capsule") streams while it runs; only the last turn's text is
the answer. On the upstream, 0.3 and 1.0 framings, what a streaming client assembles the way each
framing says equals what `tasks/get` returns afterwards."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from a2akit import Served, serving
from test_serve_operator import hello_copy

ANSWER = ("Hello! I echoed a message, read my greeting skill, and wrote out/greeting.txt. "
          "Everything ran offline inside WebAssembly.")


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Served:
    root = tmp_path_factory.mktemp("streamed")
    with serving(hello_copy(root), root / "state") as running:
        yield running


def _message(text: str, **extra: Any) -> dict[str, Any]:
    return {"messageId": f"m{time.monotonic_ns()}", "role": "user", "parts": [{"text": text}], **extra}


def _assemble(artifacts: dict[str, str], artifact: dict[str, Any], append: bool, text_of) -> None:
    """A2A's artifact-update rule: `append` adds to the artifact with that id, else replaces it."""
    key = artifact.get("artifactId") or artifact.get("name")
    text = "".join(text_of(p) for p in artifact["parts"])
    artifacts[key] = artifacts.get(key, "") + text if append else text


def test_upstream_framing(served: Served) -> None:
    frames = served.events("message/stream", {"message": _message("hi")})
    texts = [data for _, kind, data in frames if kind == "text"]
    tool_chunks = [t["text"] for t in texts if t.get("source") == "tool"]
    assert tool_chunks == ["echo: hello from the hello capsule"]
    # upstream: a `final: true` text frame ends a turn; the answer is the last turn's text
    turns, turn = [], ""
    for frame in texts:
        if frame.get("source") == "tool":
            continue
        turn += frame["text"]
        if frame["final"]:
            turns.append(turn)
            turn = ""
    assert turns[0] == "Let me check my tools. " and turns[-1] == ANSWER
    final = frames[-1][2]
    assert final["final"] and final["status"]["state"] == "completed"
    stored = served.get(final["id"])
    assert final["status"]["response"] == stored["status"]["response"] == turns[-1]


def test_v03_framing(served: Served) -> None:
    message = _message("hi", kind="message")
    message["parts"] = [{"kind": "text", "text": "hi"}]
    frames = served.events("message/stream", {"message": message}, headers={"A2A-Version": "0.3"})
    artifacts: dict[str, str] = {}
    names: dict[str, str] = {}
    task_id = None
    for _, _, data in frames:
        result = data["result"]
        task_id = task_id or result.get("taskId") or result.get("id")
        if result.get("kind") == "artifact-update":
            artifact = result["artifact"]
            names[artifact["artifactId"]] = artifact["name"]
            _assemble(artifacts, artifact, bool(result.get("append")), lambda p: p.get("text", ""))
    (result_id,) = [key for key, name in names.items() if name == "result"]
    stored = served.rpc("tasks/get", {"id": task_id}, headers={"A2A-Version": "0.3"})["result"]
    (stored_result,) = [a for a in stored["artifacts"] if a["name"] == "result"]
    assert artifacts[result_id] == "".join(p["text"] for p in stored_result["parts"]) == ANSWER
    (tool_output,) = [key for key, name in names.items() if name == "tool-output"]
    assert artifacts[tool_output] == "echo: hello from the hello capsule"
    last = [d["result"] for _, _, d in frames if d["result"].get("kind") == "artifact-update"
            and d["result"]["artifact"]["name"] == "result"][-1]
    assert last["append"] is False and last["lastChunk"] is True


def test_v10_framing(served: Served) -> None:
    message = {"messageId": f"m{time.monotonic_ns()}", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    frames = served.events("SendStreamingMessage", {"message": message}, headers={"A2A-Version": "1.0"})
    artifacts: dict[str, str] = {}
    names: dict[str, str] = {}
    task_id = None
    for _, _, data in frames:
        result = data["result"]
        if "task" in result:
            task_id = result["task"]["id"]
        update = result.get("artifactUpdate")
        if update is not None:
            names[update["artifact"]["artifactId"]] = update["artifact"]["name"]
            _assemble(artifacts, update["artifact"], bool(update.get("append")), lambda p: p.get("text", ""))
    assert task_id is not None
    stored = served.rpc("GetTask", {"id": task_id}, headers={"A2A-Version": "1.0"})["result"]
    (stored_result,) = [a for a in stored["artifacts"] if a["name"] == "result"]
    (result_id,) = [key for key, name in names.items() if name == "result"]
    assert artifacts[result_id] == "".join(p["text"] for p in stored_result["parts"]) == ANSWER
    assert "echo:" not in artifacts[result_id] and "Let me check" not in artifacts[result_id]


def test_the_console_shows_the_stored_answer(served: Served, browser) -> None:
    """The console (upstream framing over the GET streams) shows what tasks/get returns: not the
    first turn's "Let me check my tools. ", not the echo tool's chunk."""
    from browserkit import send_from_console, wait_answer, wait_task_state

    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(served.url + "console/")
    page.wait_for_function("() => document.querySelector('#connection').dataset.state === 'live'", timeout=60_000)
    task_id = send_from_console(page, "hello from the console", timeout_ms=60_000)
    wait_task_state(page, "completed", timeout_ms=120_000)
    wait_answer(page, ANSWER, timeout_ms=60_000)
    assert served.get(task_id)["status"]["response"] == page.text_content("#task-answer") == ANSWER
    assert errors == []
