"""A slow SSE reader never loses chunks silently, on every framing (issue 29).

A real daemon streams one long answer, word by word, to a real reader that stops reading (its
socket's receive buffer small) until the task has completed and then reads to the end. With a
small replay buffer it must fall behind; what it then receives must be the answer's text with
holes only where a gap frame stands: every run of chunks between gap frames is one contiguous
piece of the answer, in order, the first from its start and the last to its end. The framings:
upstream `message/stream`, A2A 0.2 `tasks/sendSubscribe`, 0.3 `message/stream`, 1.0
`SendStreamingMessage`, and an EventSource's `GET /tasks/{id}/stream?framing=a2a`.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from httpx_sse import EventSource

from a2akit import Served, serving
from conftest import EXAMPLES

WORDS = 8_000
ANSWER = " ".join(f"w{i:05d}-" + "x" * 110 for i in range(WORDS))


@pytest.fixture(autouse=True)
def _built(artifacts) -> None:
    artifacts.example("scripted-driver")


def _talker(root: Path, answer: str = ANSWER) -> Path:
    directory = root / "talker"
    directory.mkdir()
    manifest = {
        "name": "talker", "version": "1.0.0",
        "artifacts": [{"name": "scripted-driver", "runtime": "driver", "source": str(EXAMPLES / "scripted-driver"),
                       "local_source": True}],
        "inference": {"endpoint": "http://127.0.0.1:9", "model": "m", "driver": {
            "artifact": "scripted-driver",
            "config": {"responses": [{"stop_reason": "end_turn", "content": [{"type": "text", "text": answer}]}]}}},
        "lifecycle": {"after_task": "sleep", "task_acceptance": "queue", "queue_depth": 10},
    }
    (directory / "murmur.yaml").write_text(yaml.safe_dump(manifest))
    return directory


def _request(framing: str) -> tuple[str, dict[str, Any], dict[str, str]]:
    """(method, params, headers) of a streaming send in `framing`."""
    stamp = time.monotonic_ns()
    if framing == "0.2":
        return "tasks/sendSubscribe", {"id": f"slow-{stamp}", "message": {
            "role": "user", "parts": [{"type": "text", "text": "talk"}]}}, {}
    if framing == "0.3":
        return "message/stream", {"message": {"kind": "message", "messageId": f"m{stamp}", "role": "user",
                                              "parts": [{"kind": "text", "text": "talk"}]}}, {"A2A-Version": "0.3"}
    if framing == "1.0":
        return "SendStreamingMessage", {"message": {"messageId": f"m{stamp}", "role": "ROLE_USER",
                                                    "parts": [{"text": "talk"}]}}, {}
    return "message/stream", {"message": {"messageId": f"m{stamp}", "role": "user", "parts": [{"text": "talk"}]}}, {}


def _task_id(framing: str, params: dict[str, Any], event: str, data: Any) -> str:
    if framing == "0.2":
        return params["id"]
    if framing == "upstream":
        return data["id"]
    result = data["result"]
    return result["task"]["id"] if framing == "1.0" else result["id"]


def _classify(framing: str, event: str, data: Any) -> tuple[str, Any]:
    """("text", chunk), ("gap", what it says) or ("other", None) for one SSE frame."""
    if framing == "upstream":
        if event == "text":
            return "text", data["text"]
        if event == "gap":
            return "gap", data
        return "other", None
    result = data["result"]
    inner = result.get("statusUpdate") or result.get("artifactUpdate") or result
    gap = (inner.get("metadata") or {}).get("murmurd", {}).get("gap")
    if gap is not None:
        message = inner["status"]["message"]
        return "gap", {**gap, "said": "".join(part["text"] for part in message["parts"])}
    artifact = inner.get("artifact")
    if artifact is not None and artifact.get("name") == "result":
        text = "".join(part["text"] for part in artifact["parts"])
        append = inner.get("append", artifact.get("append"))  # 0.2 carries them on the artifact
        last_chunk = inner.get("lastChunk", artifact.get("lastChunk"))
        if append is False and last_chunk is True and text == ANSWER:
            return "whole", text  # issue 24: the stored answer, replacing every earlier chunk
        return "text", text
    return "other", None


def _read_slowly(served: Served, framing: str) -> tuple[str, list[tuple[str, Any]]]:
    """Open the stream, read its first frame, stop reading until the task has completed, then
    read to the end."""
    transport = httpx.HTTPTransport(socket_options=[(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)])
    frames: list[tuple[str, Any]] = []
    if framing == "GET a2a":  # an EventSource's stream of a 1.0 task, started by a non-blocking send
        _method, params, _headers = _request("1.0")
        sent = served.rpc("SendMessage", {**params, "configuration": {"returnImmediately": True}})
        task_id = sent["result"]["task"]["id"]
        opening: dict[str, Any] = {"method": "GET", "url": f"{served.url}tasks/{task_id}/stream?framing=a2a"}
        framing = "1.0"
    else:
        method, params, headers = _request(framing)
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        opening = {"method": "POST", "url": served.url, "json": body, "headers": headers}
    with httpx.Client(transport=transport, timeout=120) as client:
        headers = {"Accept": "text/event-stream", **opening.pop("headers", {})}
        with client.stream(**opening, headers=headers) as response:
            assert response.status_code == 200
            events = (event for event in EventSource(response).iter_sse() if event.data)  # not the retry hint
            first = next(events)
            if opening["method"] == "POST":
                task_id = _task_id(framing, params, first.event, json.loads(first.data))
            served.wait_state(task_id, "completed", timeout=300)  # the reader reads nothing meanwhile
            for event in events:
                frames.append(_classify(framing, event.event, json.loads(event.data)))
    return task_id, frames


@pytest.mark.parametrize("framing", ["upstream", "0.2", "0.3", "1.0", "GET a2a"])
def test_a_slow_reader_gets_every_chunk_or_a_gap_frame_saying_what_it_missed(tmp_path: Path, framing: str) -> None:
    # --write-timeout: the reader stops for as long as the task takes; the write deadline that
    # cuts off a reader stuck that long (a visible error, not a silent loss) is not what is tested
    with serving(_talker(tmp_path), tmp_path / "state", "--stream-buffer", "16", "--write-timeout", "900") as served:
        task_id, frames = _read_slowly(served, framing)
        runs: list[str] = [""]
        gaps: list[Any] = []
        wholes = [value for kind, value in frames if kind == "whole"]
        # An A2A client ends with the stored answer whole when what it streamed differs (a gap);
        # the chunks before it are still checked: never a hole without a gap frame.
        assert len(wholes) <= 1
        if any(kind == "gap" for kind, _ in frames):
            assert framing == "upstream" or wholes == [ANSWER], "an A2A client that missed chunks gets the answer whole"
        for kind, value in frames:
            if kind == "text":
                runs[-1] += value
            elif kind == "gap":
                gaps.append(value)
                runs.append("")
        if not gaps:  # it kept up (socket buffers absorbed the burst): then it has every chunk
            assert runs == [ANSWER], f"{len(runs[0])} of {len(ANSWER)} characters arrived with no gap frame"
        for gap in gaps:  # each says what was missed
            first = gap.get("first_available_id", gap.get("firstAvailableId"))
            assert isinstance(first, int) and first > 1
            if framing != "upstream" and "afterId" in gap:
                assert gap["afterId"] < first - 1
                lost = gap["afterId"] + 1  # one event lost is said in the singular
                said = f"event {lost} of" if lost == first - 1 else f"events {lost} to {first - 1} of"
                assert said in gap["said"], gap
        # Between gap frames nothing is missing: each run is one contiguous piece of the answer
        # (the first is empty only when a gap came before any text: a GET stream replays from 0).
        assert ANSWER.startswith(runs[0]) and (runs[0] or frames[0][0] == "gap")
        assert ANSWER.endswith(runs[-1]) and runs[-1]
        position = 0
        for run in runs:
            found = ANSWER.find(run, position)
            assert found >= position, f"a run of {len(run)} characters is not the answer's next piece"
            position = found + len(run)
        # The task itself holds the whole answer, as the gap frame's message says.
        assert ANSWER in json.dumps(served.get(task_id))


class _LaggingReader:
    """A stream on a small receive buffer whose reader takes its first frame (the task's id),
    then reads nothing until `resume()`, then hands every frame with data to `on_event`."""

    def __init__(self, served: Served, framing: str, request_id: int, on_event: Any) -> None:
        method, params, self._headers = _request(framing)
        self._served, self._framing, self._params, self._on_event = served, framing, params, on_event
        self._body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        self._opened, self._go = threading.Event(), threading.Event()
        self.task_id = ""
        self._thread = threading.Thread(target=self._read, daemon=True)

    def start(self) -> str:
        self._thread.start()
        assert self._opened.wait(120)
        return self.task_id

    def resume_and_end(self) -> bool:
        """Let it read on; True once its stream has ended."""
        self._go.set()
        self._thread.join(timeout=300)
        return not self._thread.is_alive()

    def _read(self) -> None:
        transport = httpx.HTTPTransport(socket_options=[(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)])
        with httpx.Client(transport=transport, timeout=120) as client:
            with client.stream("POST", self._served.url, json=self._body,
                               headers={"Accept": "text/event-stream", **self._headers}) as response:
                events = (event for event in EventSource(response).iter_sse() if event.data)
                first = next(events)
                self.task_id = _task_id(self._framing, self._params, first.event, json.loads(first.data))
                self._opened.set()
                self._go.wait(300)  # reads nothing meanwhile
                for event in events:
                    self._on_event(event.event, json.loads(event.data))


@pytest.mark.parametrize("framing", ["upstream", "1.0"])
def test_a_reader_whose_task_ended_in_the_gap_still_gets_its_end(tmp_path: Path, framing: str) -> None:
    """The reader stops until its task has completed and another task's events have pushed the
    final status out of the replay buffer: after the gap frame it must still be told the task
    ended (from the stored record), not be left with heartbeats forever."""
    long_answer = " ".join(f"w{i:05d}" for i in range(40_000))  # 40,000 frames: more than the sockets hold
    with serving(_talker(tmp_path, long_answer), tmp_path / "state", "--stream-buffer", "16",
                 "--write-timeout", "900") as served:
        frames: list[tuple[str, Any]] = []
        finals: list[Any] = []

        def on_event(kind: str, data: Any) -> None:
            frames.append(_classify(framing, kind, data))
            status = data if framing == "upstream" else data["result"].get("statusUpdate")
            if kind in ("status", "message") and status and status.get("final") is True:
                finals.append(status)
            if framing == "1.0" and status and status["status"]["state"] == "TASK_STATE_COMPLETED":
                finals.append(status)

        reader = _LaggingReader(served, framing, 1, on_event)
        task_id = reader.start()
        served.wait_state(task_id, "completed", timeout=300)
        other = served.send("talk again")  # its chunks push the first task's final status out
        served.wait_state(other["id"], "completed", timeout=300)
        assert reader.resume_and_end(), f"the reader was left waiting after {len(frames)} frames"
        assert any(kind == "gap" for kind, _ in frames), (len(frames), [k for k, _ in frames][:5], [k for k, _ in frames][-5:], finals)
        assert finals, "the stream ended without telling the task's end"


@pytest.mark.parametrize("framing", ["upstream", "1.0"])
def test_a_reader_whose_task_was_removed_while_it_lagged_is_told_and_the_stream_ends(
        tmp_path: Path, framing: str) -> None:
    """As above, but the store keeps one finished task: by the time the reader reads on, its task
    has ended and been removed, so neither the replay buffer nor the store holds its end. The
    stream must say so (task not found, -32001) and end, not send heartbeats forever."""
    long_answer = " ".join(f"w{i:05d}" for i in range(40_000))
    with serving(_talker(tmp_path, long_answer), tmp_path / "state", "--stream-buffer", "16",
                 "--write-timeout", "900", "--retain-finished-count", "1") as served:
        kinds: list[str] = []
        errors: list[tuple[str, Any]] = []

        def on_event(kind: str, data: Any) -> None:
            if kind == "error" or "error" in data:
                errors.append((kind, data))
                kinds.append("error")
            else:
                kinds.append(_classify(framing, kind, data)[0])

        reader = _LaggingReader(served, framing, 7, on_event)
        task_id = reader.start()
        served.wait_state(task_id, "completed", timeout=300)
        other = served.send("talk again")  # pushes the first task out of the replay and the store
        served.wait_state(other["id"], "completed", timeout=300)
        deadline = time.monotonic() + 120
        while "error" not in served.rpc("tasks/get", {"id": task_id}):
            assert time.monotonic() < deadline, "the finished task was never removed"
            served.wait_state(other["id"], "completed", timeout=30)  # a round trip between looks
        assert reader.resume_and_end(), f"the reader was left waiting after {len(kinds)} frames"
        assert "gap" in kinds and kinds[-1] == "error", kinds[-5:]
        assert len(errors) == 1
        event, data = errors[0]
        error = data if framing == "upstream" else data["error"]
        if framing != "upstream":
            assert data["id"] == 7 and event == "message"
        assert error["code"] == -32001 and error["data"] == {"id": task_id}
        assert "removed while this stream was behind" in error["message"]
