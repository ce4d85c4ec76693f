"""Hostile sizes: a tool makes a file the runtime reads back huge (a sparse truncate costs it
nothing on disk), or writes more output than a log should hold. Each test performs the attack
with a real WASM tool (tests/fixtures/bloat) and checks that memory and the log stay bounded,
that the one call or task fails clearly, and that the next one works."""

from __future__ import annotations

import json
import os
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from a2akit import serving
from conftest import EXAMPLES, FIXTURES
from loopkit import capsule_dir, driver_capsule, local, stage
from murmurd.manifest.writing import dump_yaml
from murmurd.host.capped_copy import KEPT_TAIL, LOG_BYTES_PER_STREAM, copy_stretch, read_tail
from murmurd.session.session import Session, TaskSpec

MIB = 1024 * 1024
# What the guest truncates each file to (sparse: free on disk): four times the file's limit, so
# a regression that reads the whole file shows in the memory bound without exhausting the
# machine (a 256 MiB skill read whole once took a test runner past 20 GiB as it went round
# the conversation).
SKILL_ATTACK = 4 * MIB
RESULT_ATTACK = 40 * MIB
HISTORY_ATTACK = 64 * MIB
NOTE_ROOM = 512  # the cut notes


@pytest.fixture(autouse=True)
def _built(artifacts) -> None:
    artifacts.fixture("bloat")
    artifacts.fixture("pull-capsule")
    artifacts.example("scripted-driver")


def _bloat(call_id: str, plan: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_call", "id": call_id, "name": "bloat", "input": plan}


def _peak_python_bytes(work: Callable[[], Any]) -> tuple[Any, int]:
    """What `work` returns and the peak of Python's traced allocations while it ran (every
    thread): a whole-file read of a huge file shows here, the guest's own memory does not."""
    tracemalloc.start()
    try:
        result = work()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# --------------------------------------------------------------------------- guest output


def test_a_tools_output_reaches_its_log_capped_and_its_scratch_files_are_out_of_reach(tmp_path, host, artifacts) -> None:
    from murmurd.host import CallGrant, ToolInput

    root = tmp_path / "workdir"
    (root / "logs").mkdir(parents=True)
    bloat = host.load(artifacts.fixture("bloat"), name="bloat")
    grant = CallGrant(root=root, preopen=root, log_path=root / "logs" / "tool-bloat.log")
    plan = {"truncate": [["logs/.*", HISTORY_ATTACK], ["logs/*", HISTORY_ATTACK]], "stdout_bytes": 6 * MIB, "stderr_bytes": 9 * MIB}
    result, peak = _peak_python_bytes(lambda: host.call_tool_sync(bloat, ToolInput(data=json.dumps(plan)), grant=grant))

    assert result.data == "bloated "  # no scratch file had a name to truncate
    log = root / "logs" / "tool-bloat.log"
    text = log.read_bytes()
    assert len(text) <= 2 * LOG_BYTES_PER_STREAM + NOTE_ROOM
    assert f"[murmurd: {6 * MIB - LOG_BYTES_PER_STREAM} bytes of stdout cut here".encode() in text
    assert f"[murmurd: {9 * MIB - LOG_BYTES_PER_STREAM} bytes of stderr cut here".encode() in text
    assert text.index(b"STDOUT-END") < text.index(b"bytes of stderr cut") and text.endswith(b"STDERR-END")
    assert peak < 2 * MIB, peak
    assert os.listdir(root / "logs") == ["tool-bloat.log"]

    before = log.stat().st_size
    small = host.call_tool_sync(bloat, ToolInput(data=json.dumps({"stderr_bytes": 100})), grant=grant)
    assert small.data == "bloated " and log.stat().st_size == before + 100  # under the cap: copied whole


def _sparse(path: Path, size: int, tail: bytes) -> int:
    with open(path, "wb") as handle:
        handle.truncate(size)
        handle.seek(size - len(tail))
        handle.write(tail)
    return os.open(path, os.O_RDONLY)


def test_a_sparse_output_file_of_gigabytes_is_copied_capped_through_a_small_buffer(tmp_path: Path) -> None:
    """What the log copy does if a scratch file were ever made huge: head, note, tail; never the whole."""
    size = 3 * 1024**3
    source = _sparse(tmp_path / "scratch", size, b"THE-TRAP-MESSAGE")
    sink = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        _none, peak = _peak_python_bytes(lambda: copy_stretch(source, 0, size, sink, "stderr"))
        assert read_tail(source, 0, size, 16) == b"THE-TRAP-MESSAGE"
    finally:
        os.close(source)
        os.close(sink)
    log = (tmp_path / "log").read_bytes()
    assert len(log) <= LOG_BYTES_PER_STREAM + NOTE_ROOM
    assert log.startswith(b"\0" * (LOG_BYTES_PER_STREAM - KEPT_TAIL) + b"\n[murmurd: ")
    assert f"{size - LOG_BYTES_PER_STREAM} bytes of stderr cut here".encode() in log
    assert log.endswith(b"THE-TRAP-MESSAGE")
    assert peak < MIB, peak


def test_the_copy_takes_a_stretch_from_its_start_and_stops_where_a_file_shrank(tmp_path: Path) -> None:
    (tmp_path / "scratch").write_bytes(b"old new")
    source = os.open(tmp_path / "scratch", os.O_RDONLY)
    sink = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        copy_stretch(source, 4, 7, sink, "stdout")
        copy_stretch(source, 4, 100, sink, "stdout")  # the size taken said 100; the file has 7
        assert read_tail(source, 4, 7, 4096) == b"new" and read_tail(source, 7, 7, 4096) == b""
    finally:
        os.close(source)
        os.close(sink)
    assert (tmp_path / "log").read_bytes() == b"newnew"


# --------------------------------------------------------------------------- files read back


@pytest.mark.anyio
async def test_a_skill_a_tool_made_huge_fails_that_call_and_the_task_goes_on(tmp_path: Path, host) -> None:
    skill = tmp_path / "skills" / "guide" / "skill.md"
    skill.parent.mkdir(parents=True)
    skill.write_text("# Guide\n")
    responses = [
        {"stop_reason": "tool_call", "content": [_bloat("call_1", {"truncate": [["tools/guide/skill.md", SKILL_ATTACK]]})]},
        {"stop_reason": "tool_call", "content": [{"type": "tool_call", "id": "call_2", "name": "guide", "input": {}}]},
        {"stop_reason": "end_turn", "content": [{"type": "text", "text": "done"}]},
    ]
    directory = driver_capsule(tmp_path, "scripted-driver", {"responses": responses},
                               extra_artifacts=[local("bloat", "tool", FIXTURES / "bloat"),
                                                local("guide", "skill", skill.parent)])
    staged = stage(directory, host, tmp_path)
    session = Session(staged, host)
    await session.open()
    try:
        first = await session.run_task(TaskSpec("tsk_" + "1" * 32, "first"))
        # The second task repeats the attack, traced (the first loaded the tokenizer and the like).
        tracemalloc.start()
        try:
            second = await session.run_task(TaskSpec("tsk_" + "2" * 32, "second"))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    finally:
        await session.close()

    for outcome in (first, second):
        assert outcome.exit_status == "ok" and outcome.result_text == "done", outcome.error
        bloated, guide = [m for m in outcome.messages if m.role == "tool"]
        assert not bloated.is_error and bloated.text == "bloated tools/guide/skill.md"
        assert guide.is_error
        assert guide.text == f"error: skill guide: 'tools/guide/skill.md' is {SKILL_ATTACK} bytes, over the {MIB}-byte limit"
    assert (staged.workdir.root / "tools" / "guide" / "skill.md").stat().st_size == SKILL_ATTACK  # the attack happened
    assert peak < SKILL_ATTACK, peak


@pytest.mark.anyio
async def test_a_script_capsules_huge_result_fails_that_task_and_the_next_works(tmp_path, host, artifacts) -> None:
    manifest = {"name": "script", "version": "1.0.0", "artifacts": [local("bloat", "tool", FIXTURES / "bloat")]}
    staged = stage(capsule_dir(tmp_path, manifest, artifacts.fixture("pull-capsule")), host, tmp_path)
    plan = {"truncate": [["out/result.txt", RESULT_ATTACK]]}
    session = Session(staged, host)
    await session.open()
    tracemalloc.start()
    try:
        hostile = await session.run_task(TaskSpec("tsk_" + "1" * 32, json.dumps(
            {"invoke": "bloat", "data": json.dumps(plan), "skip_result": True})))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    ordinary = await session.run_task(TaskSpec("tsk_" + "2" * 32, json.dumps({})))
    await session.close()

    assert hostile.exit_status == "failed"
    assert hostile.error == (f"the capsule's out/result.txt is refused: 'out/result.txt' is {RESULT_ATTACK} bytes, "
                             f"over the {10 * MIB}-byte limit")
    assert peak < 4 * MIB, peak
    assert ordinary.exit_status == "ok", ordinary.error
    assert "before" in json.loads(ordinary.result_text)


def test_a_skill_past_the_limit_is_refused_at_staging(tmp_path: Path, host) -> None:
    from murmurd.staging.stage import StagingError

    skill = tmp_path / "skills" / "tome" / "skill.md"
    skill.parent.mkdir(parents=True)
    skill.write_text("x" * (MIB + 1))
    directory = driver_capsule(tmp_path, "scripted-driver", {"responses": []},
                               extra_artifacts=[local("tome", "skill", skill.parent)])
    with pytest.raises(StagingError) as refused:
        stage(directory, host, tmp_path)
    assert refused.value.problems == [f"artifact tome: skill.md is {MIB + 1} bytes; a skill holds at most {MIB} bytes"]
    assert not (directory / "workdir").exists()


@pytest.mark.anyio
async def test_a_hook_reading_a_history_a_tool_made_huge_gets_an_error_not_the_file(tmp_path, host, artifacts,
                                                                                    monkeypatch) -> None:
    from hookkit import end_turn, hook_events, hook_ref, hooked_capsule
    from murmurd.session.messages import user_message

    monkeypatch.setenv("ARM_HOOK", json.dumps({"on-task-end": {"do": "io"}}))
    hook = hook_ref(tmp_path, "reader", artifacts.fixture("arm-hook"), config_var="ARM_HOOK")
    responses = [{"stop_reason": "tool_call", "content": [_bloat("call_1", {"truncate": [
        ["contexts/ctx_t/history.json", HISTORY_ATTACK]]})]}, end_turn("done")]
    staged = stage(hooked_capsule(tmp_path, [hook, local("bloat", "tool", FIXTURES / "bloat")], responses,
                                  lifecycle={"conversation": "threaded"}), host, tmp_path)
    earlier = [user_message("first question", source_id="a2a:m1")]
    (staged.workdir.root / "contexts" / "ctx_t").mkdir(parents=True)
    (staged.workdir.root / "contexts" / "ctx_t" / "history.json").write_text(json.dumps([m.__dict__ for m in earlier]))
    session = Session(staged, host)
    await session.open()
    try:
        outcome = await session.run_task(TaskSpec("tsk_t", "second question", context_id="ctx_t", history=earlier))
    finally:
        await session.close()
    assert outcome.exit_status == "ok", outcome.error
    (read,) = [event for event in hook_events(staged.workdir.root, "reader") if "io" in event]
    assert "history" not in read
    assert read["history_error"] == (f"conversation: the history of ctx_t cannot be read: 'contexts/ctx_t/history.json' "
                                     f"is {HISTORY_ATTACK} bytes, over the {16 * MIB}-byte limit")


# --------------------------------------------------------------------------- the daemon


def _peak_rss(pid: int) -> int:
    """The process's peak resident set (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")  # pragma: no cover


def test_the_daemon_reads_no_huge_history_or_scratch_file_and_keeps_serving(tmp_path: Path) -> None:
    plan = {"truncate": [["contexts/*/history.json", HISTORY_ATTACK], ["logs/.stderr-*.tmp", HISTORY_ATTACK]],
            "stderr_bytes": 6 * MIB}
    responses = [{"stop_reason": "tool_call", "content": [_bloat("call_1", plan)]},
                 {"stop_reason": "end_turn", "content": [{"type": "text", "text": "done"}]}]
    capsule = tmp_path / "bloater"
    capsule.mkdir()
    manifest = {
        "name": "bloater", "version": "1.0.0",
        "artifacts": [local("scripted-driver", "driver", EXAMPLES / "scripted-driver"),
                      local("bloat", "tool", FIXTURES / "bloat")],
        "inference": {"endpoint": "http://127.0.0.1:9", "model": "m",
                      "driver": {"artifact": "scripted-driver", "config": {"responses": responses}}},
        "lifecycle": {"after_task": "sleep", "conversation": "threaded"},
    }
    (capsule / "murmur.yaml").write_text(dump_yaml(manifest))
    with serving(capsule, tmp_path / "state") as served:
        first = served.send("one", contextId="ctx_a")  # no history yet: nothing to bloat
        assert served.wait_state(first["id"], "completed", "failed")["status"]["state"] == "completed"
        before = _peak_rss(served.proc.pid)
        other = served.send("two", contextId="ctx_b")  # makes ctx_a's history huge
        assert served.wait_state(other["id"], "completed", "failed")["status"]["state"] == "completed"
        history = served.workdir / "contexts" / "ctx_a" / "history.json"
        assert history.stat().st_size == HISTORY_ATTACK
        again = served.send("three", contextId="ctx_a")
        failed = served.wait_state(again["id"], "completed", "failed")
        assert failed["status"]["state"] == "failed"
        assert (f"'contexts/ctx_a/history.json' is {HISTORY_ATTACK} bytes, over the {16 * MIB}-byte limit"
                in failed["status"]["message"])
        fresh = served.send("four", contextId="ctx_c")
        assert served.wait_state(fresh["id"], "completed", "failed")["status"]["state"] == "completed"
        after = _peak_rss(served.proc.pid)
        log = served.workdir / "logs" / "tool-bloat.log"
        assert log.stat().st_size <= 3 * (LOG_BYTES_PER_STREAM + NOTE_ROOM)  # three calls, each capped
    assert after - before < 64 * MIB, (before, after)
