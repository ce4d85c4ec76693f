"""Issue 21, item 5: a hook returning huge artifacts cannot hold the daemon's memory.

A real daemon on loopback runs a real hook component (tests/fixtures/flood-hook, in wasmtime)
that answers every inference with a 16 MiB artifact: each is refused at the cap (a fault naming
the hook, traced as `hook_dispatch_error`), the tasks complete, and the daemon's memory does not
keep what the hook returned. Artifacts under the cap stream, and the replay buffer keeps at most
`--stream-buffer-bytes` of them.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
from httpx_sse import connect_sse

from a2akit import Served, serving
from conftest import FIXTURES
from hookkit import end_turn, hooked_capsule, tool_call
from loopkit import local
from murmurd.hooks.commit import ARTIFACT_MAX_BYTES

TURNS = 12  # inferences per task: 11 echo calls, then the answer
SCRIPT = [tool_call(f"c{i}", "echo", {"text": f"turn {i}"}) for i in range(TURNS - 1)] + [end_turn("all done")]


def _compiled(artifacts, host) -> None:  # type: ignore[no-untyped-def]
    """Built and compiled before the daemon starts (the compile cache is the machine's)."""
    from murmurd.contract import Role

    host.load(artifacts.fixture("flood-hook"), expected=Role.HOOK)


def _capsule(root: Path) -> Path:
    hook = local("flood", "hook", FIXTURES / "flood-hook", capabilities={"env": {"allow": ["FLOOD_HOOK_BYTES"]}})
    return hooked_capsule(root, [hook], SCRIPT, name="flooded", inference={"max_turns": TURNS + 2},
                          lifecycle={"after_task": "sleep"})


def _rss_mib(served: Served) -> float:
    for line in Path(f"/proc/{served.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _run_task(served: Served, text: str) -> dict[str, Any]:
    task = served.send(text)
    try:
        return served.wait_state(task["id"], "completed", "failed", timeout=600)
    except httpx.HTTPError:
        raise AssertionError(f"the daemon stopped answering (exit {served.proc.poll()}):\n"
                             + "".join(served.stderr)) from None


def test_16_mib_hook_artifacts_are_refused_at_the_cap_and_not_kept(tmp_path: Path, artifacts, host) -> None:
    _compiled(artifacts, host)
    with serving(_capsule(tmp_path), tmp_path / "state", env={"FLOOD_HOOK_BYTES": str(16 * 1024 * 1024)}) as served:
        before = _rss_mib(served)
        finished = [_run_task(served, f"task {n}") for n in range(2)]  # 24 artifacts of 16 MiB
        assert [t["status"]["state"] for t in finished] == ["completed", "completed"]
        for task in finished:
            answer = json.dumps(served.get(task["id"]))
            assert len(answer) < ARTIFACT_MAX_BYTES and '"pad"' not in answer  # nothing of them was kept
        grown = _rss_mib(served) - before
        assert grown < 200, f"the daemon grew by {grown:.0f} MiB after 24 refused 16 MiB artifacts"
        errors = [e for e in served.all_events() if e["event_type"] == "hook_dispatch_error"]
        assert [(e["hook_name"], e["event"], e["arm"]) for e in errors] == [("flood", "on-inference", "artifact")] * 24
        logs = "".join(p.read_text() for p in (served.capsule / "workdir").glob("ses_*/logs/hook-flood.log"))
        refusals = [line for line in logs.splitlines() if "hook flood: on-inference returned artifact, discarded: " in line]
        assert len(refusals) == 24
        assert all(f"is over the cap of {ARTIFACT_MAX_BYTES} bytes per hook artifact" in line for line in refusals)
        assert served.proc.poll() is None


def _replay(served: Served, task_id: str) -> list[tuple[str, Any]]:
    """Every frame a watcher resuming from the very start (`Last-Event-ID: 0`) is replayed, up to
    and including `task_id`'s final status."""
    frames: list[tuple[str, Any]] = []
    body = {"jsonrpc": "2.0", "id": 1, "method": "stream/watch", "params": {}}
    with httpx.Client(timeout=120) as client:
        with connect_sse(client, "POST", served.url, json=body, headers={"last-event-id": "0"}) as source:
            for event in source.iter_sse():
                data = json.loads(event.data) if event.data else None
                frames.append((event.event, data))
                if event.event == "status" and data.get("id") == task_id and data.get("final"):
                    break
    return frames


def test_the_replay_buffer_is_bounded_in_bytes(tmp_path: Path, artifacts, host) -> None:
    _compiled(artifacts, host)
    size, bound = 200_000, 1_000_000  # 12 artifacts of 200 kB under a 1 MB buffer (and 1024 events)
    with serving(_capsule(tmp_path), tmp_path / "state", "--stream-buffer-bytes", str(bound),
                 env={"FLOOD_HOOK_BYTES": str(size)}) as served:
        task = _run_task(served, "go")
        assert task["status"]["state"] == "completed"
        started = time.monotonic()
        frames = _replay(served, task["id"])
        assert time.monotonic() - started < 120
    kinds = [kind for kind, _ in frames]
    assert kinds[0] == "gap"  # the oldest events left the buffer
    replayed = [data for kind, data in frames
                if kind == "artifact" and isinstance(data["artifact"].get("content"), dict)]  # the hook's, not echo's
    assert 1 <= len(replayed) <= bound // size  # not all 12: the bytes bound evicted the rest
    assert sum(len(json.dumps(data)) for _, data in frames if data) <= bound + size
    assert all(len(data["artifact"]["content"]["pad"]) == size for data in replayed)  # each one whole
