"""Hostile input that would become a path: symlinks a tool plants in the workdir, wire ids used
as file names, artifact names that climb out. Each test performs the attack with real parts
(WASM tools in wasmtime, `murmurd serve` and `murmurd run` subprocesses) and checks that
nothing outside the workdir is read or written."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from a2akit import ROOT, chaos_capsule, serving
from conftest import FIXTURES
from loopkit import capsule_dir, driver_capsule, local, stage
from murmurd.session.session import Session, TaskSpec

SECRET = "SECRET-OUTSIDE-THE-WORKDIR"
UNTOUCHED = "untouched\n"


@pytest.fixture(autouse=True)
def _built(artifacts) -> None:
    for name in ("plant-link", "pull-capsule", "chaos-driver", "ask"):
        artifacts.fixture(name)
    artifacts.example("scripted-driver")
    artifacts.example("echo")


def _outside(tmp_path: Path) -> Path:
    """Files a hostile tool aims at: one secret to leak, three to overwrite."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET)
    for name in ("result.txt", "task.md", "tool.log"):
        (outside / name).write_text(UNTOUCHED)
    return outside


def _assert_untouched(outside: Path) -> None:
    assert (outside / "secret.txt").read_text() == SECRET
    for name in ("result.txt", "task.md", "tool.log"):
        assert (outside / name).read_text() == UNTOUCHED, name
    assert sorted(p.name for p in outside.iterdir()) == ["result.txt", "secret.txt", "task.md", "tool.log"]


def _plant(call_id: str, links: list[list[str]]) -> dict:
    return {"type": "tool_call", "id": call_id, "name": "plant-link", "input": links}


# The workdir is <tmp>/<capsule>/workdir/ses_…, so "../../../outside" from its root is <tmp>/outside.
PLANT_FILES = [
    ["tools/tidy/skill.md", "../../../../../outside/secret.txt"],
    ["out/result.txt", "../../../../outside/result.txt"],
    ["task.md", "../../../outside/task.md"],
]
PLANT_LOG = [["logs/tool-plant-link.log", "../../../../outside/tool.log"]]


@pytest.mark.anyio
async def test_symlinks_a_tool_plants_are_never_followed_by_the_host(tmp_path: Path, host) -> None:
    outside = _outside(tmp_path)
    skill = tmp_path / "skills" / "tidy" / "skill.md"
    skill.parent.mkdir(parents=True)
    skill.write_text("# Tidy\n")
    responses = [
        {"stop_reason": "tool_call", "content": [_plant("call_1", PLANT_FILES)]},
        {"stop_reason": "tool_call", "content": [{"type": "tool_call", "id": "call_2", "name": "tidy", "input": {}}]},
        {"stop_reason": "tool_call", "content": [_plant("call_3", PLANT_LOG)]},
        {"stop_reason": "end_turn", "content": [{"type": "text", "text": "done"}]},
    ]
    directory = driver_capsule(
        tmp_path, "scripted-driver", {"responses": responses},
        extra_artifacts=[local("plant-link", "tool", FIXTURES / "plant-link"), local("tidy", "skill", skill.parent)],
    )
    staged = stage(directory, host, tmp_path)
    session = Session(staged, host)
    await session.open()
    first = await session.run_task(TaskSpec("tsk_" + "1" * 32, "first task"))
    # The links are in place now: out/result.txt and task.md point outside.
    assert (staged.workdir.root / "task.md").is_symlink()
    second = await session.run_task(TaskSpec("tsk_" + "2" * 32, "the next caller's text"))
    await session.close()

    assert first.exit_status == "ok", first.error
    tools = [m for m in first.messages if m.role == "tool"]
    planted, skill_read, log_planted = tools
    assert not planted.is_error, planted.text
    # The skill read refused the link instead of returning the outside file to the model.
    assert skill_read.is_error and SECRET not in skill_read.text
    assert "'tools/tidy/skill.md': is a symlink" in skill_read.text
    # The guest's stderr was not appended through logs/tool-plant-link.log.
    assert log_planted.is_error and "'logs/tool-plant-link.log': is a symlink" in log_planted.text
    # The answer replaced the planted out/result.txt instead of going through it.
    assert second.exit_status == "ok", second.error
    result = staged.workdir.root / "out" / "result.txt"
    assert not result.is_symlink() and result.read_text() == "done"
    _assert_untouched(outside)


@pytest.mark.anyio
async def test_a_script_capsules_planted_result_is_refused_and_the_next_task_works(tmp_path, host, artifacts) -> None:
    _outside(tmp_path)
    manifest = {"name": "script", "version": "1.0.0", "artifacts": [local("plant-link", "tool", FIXTURES / "plant-link")]}
    staged = stage(capsule_dir(tmp_path, manifest, artifacts.fixture("pull-capsule")), host, tmp_path)
    plant = [["out/result.txt", "../../../../outside/secret.txt"]]
    session = Session(staged, host)
    await session.open()
    hostile = await session.run_task(TaskSpec("tsk_" + "1" * 32, json.dumps(
        {"invoke": "plant-link", "data": json.dumps(plant), "skip_result": True})))
    ordinary = await session.run_task(TaskSpec("tsk_" + "2" * 32, json.dumps({})))
    await session.close()

    assert hostile.exit_status == "failed"
    assert "'out/result.txt': is a symlink" in hostile.error and SECRET not in hostile.error
    assert ordinary.exit_status == "ok", ordinary.error
    assert "before" in json.loads(ordinary.result_text)
    assert (tmp_path / "outside" / "secret.txt").read_text() == SECRET


def test_wire_ids_never_become_paths(tmp_path: Path) -> None:
    escape = tmp_path / "escape"
    escape.mkdir()
    planted = json.dumps([{"role": "user", "text": "PLANTED-HISTORY"}])
    (escape / "history.json").write_text(planted)
    capsule = chaos_capsule(tmp_path, lifecycle={"conversation": "threaded"})
    with serving(capsule, tmp_path / "state") as served:
        # contexts/<ctx>/history.json would be <tmp>/escape/history.json
        climbing = served.send("climb", contextId="../../../../escape")
        assert served.wait_state(climbing["id"], "completed")["contextId"] == "../../../../escape"
        again = served.send("climb again", contextId="../../../../escape")
        assert served.wait_state(again["id"], "completed")["status"]["response"] == "answer: climb again"
        # an id holding U+0000 is refused at the edge on every store (issue 21 item 4), naming the field
        nul = served.rpc("message/send", {"message": {"messageId": "m-nul", "role": "user", "parts": [{"text": "nul"}],
                                                      "contextId": "ctx\x00nul"}})
        assert nul["error"]["code"] == -32602 and "contextId" in nul["error"]["message"], nul
        # A2A 0.2: the client chooses the task id, which names out/result_<id>.txt.
        chosen = served.rpc("tasks/send", {"id": "../../../../escape/pwn", "sessionId": "../../../../escape",
                                           "message": {"role": "user", "parts": [{"type": "text", "text": "v02"}]}})
        assert chosen["result"]["status"]["state"] == "completed", chosen
        ordinary = served.send("ordinary", contextId="ctx_plain")
        assert served.wait_state(ordinary["id"], "completed")["status"]["response"] == "answer: ordinary"

        assert sorted(p.name for p in escape.iterdir()) == ["history.json"]
        assert (escape / "history.json").read_text() == planted
        stored = sorted(p.name for p in (served.workdir / "contexts").iterdir())
        assert "ctx_plain" in stored and len(stored) == 2 and all(n == "ctx_plain" or n.startswith("_") for n in stored)
        histories = [(served.workdir / "contexts" / n / "history.json").read_text() for n in stored]
        assert not any("PLANTED-HISTORY" in text for text in histories)
        assert any("climb again" in text and "climb" in text for text in histories)  # the history still threads
        results = sorted(p.name for p in (served.workdir / "out").iterdir() if p.name.startswith("result_"))
        assert len(results) == 4 and all("/" not in n and "\x00" not in n for n in results)
    assert not (tmp_path / "pwn.txt").exists() and not (tmp_path / "escape" / "pwn.txt").exists()


def test_an_artifact_name_that_climbs_out_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    capsule = tmp_path / "capsule"
    capsule.mkdir()
    manifest = {
        "name": "climber", "version": "1.0.0",
        "artifacts": [{"name": "../../../../escaped", "runtime": "tool",
                       "source": str(FIXTURES / "plant-link"), "local_source": True}],
        "inference": {"endpoint": "http://127.0.0.1:9", "model": "m"},
    }
    (capsule / "murmur.yaml").write_text(yaml.safe_dump(manifest))
    validate = subprocess.run([sys.executable, "-m", "murmurd", "validate", str(capsule)],
                              capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert validate.returncode != 0
    assert "E-ART-006" in validate.stdout + validate.stderr and "artifacts[0].name" in validate.stdout + validate.stderr
    run = subprocess.run([sys.executable, "-m", "murmurd", "run", str(capsule), "--task", "hi"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert run.returncode != 0 and "E-ART-006" in run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["capsule"]
    assert sorted(p.name for p in capsule.iterdir()) == ["murmur.yaml"]


# --------------------------------------------------------------------------- the refusals' error paths


def _answering_capsule(tmp_path: Path, **extra) -> Path:
    responses = [{"stop_reason": "end_turn", "content": [{"type": "text", "text": "word " * 50}]}]
    return driver_capsule(tmp_path, "scripted-driver", {"responses": responses}, **extra)


@pytest.mark.anyio
async def test_an_unwritable_result_or_task_file_fails_that_task_only(tmp_path: Path, host) -> None:
    outside = _outside(tmp_path)
    staged = stage(_answering_capsule(tmp_path), host, tmp_path)
    root = staged.workdir.root
    session = Session(staged, host)
    await session.open()
    (root / "task.md").mkdir()  # a directory where task.md belongs
    no_task = await session.run_task(TaskSpec("tsk_" + "1" * 32, "one"))
    (root / "task.md").rmdir()
    shutil.rmtree(root / "out")
    os.symlink("../../../outside", root / "out")
    no_result = await session.run_task(TaskSpec("tsk_" + "2" * 32, "two"))
    os.unlink(root / "out")
    fine = await session.run_task(TaskSpec("tsk_" + "3" * 32, "three"))
    await session.close()
    assert no_task.exit_status == "failed" and no_task.error.startswith("cannot write task.md:")
    assert no_result.exit_status == "failed"
    assert no_result.error == "cannot write out/result.txt: 'out': is a symlink; murmurd follows no symlink inside the workdir"
    assert fine.exit_status == "ok", fine.error
    assert (root / "out" / "result.txt").read_text().startswith("word")
    _assert_untouched(outside)


@pytest.mark.anyio
async def test_a_script_capsule_with_a_symlinked_out_dir_fails_clearly(tmp_path, host, artifacts) -> None:
    outside = _outside(tmp_path)
    staged = stage(capsule_dir(tmp_path, {"name": "script", "version": "1.0.0"}, artifacts.fixture("pull-capsule")),
                   host, tmp_path)
    os.symlink("../../../outside", staged.workdir.root / "out")  # before murmurd makes `out/`
    session = Session(staged, host)
    await session.open()
    outcome = await session.run_task(TaskSpec("tsk_" + "1" * 32, "{}"))
    await session.close()
    assert outcome.exit_status == "failed" and outcome.error.startswith("cannot clear out/result.txt: 'out': is a symlink")
    _assert_untouched(outside)


@pytest.mark.anyio
async def test_a_planted_bootstrap_log_costs_the_note_not_the_task(tmp_path: Path, host) -> None:
    outside = _outside(tmp_path)
    staged = stage(_answering_capsule(tmp_path, context={"max_tokens": 100}), host, tmp_path)
    (staged.workdir.root / "logs").mkdir(exist_ok=True)  # made with the first log, or by the guest
    os.symlink("../../../../outside/tool.log", staged.workdir.root / "logs" / "bootstrap.log")
    session = Session(staged, host)
    await session.open()
    outcome = await session.run_task(TaskSpec("tsk_" + "1" * 32, "talk"))
    await session.close()
    assert outcome.exit_status == "ok", outcome.error
    _assert_untouched(outside)


def test_a_symlinked_log_dir_or_preopen_fails_the_call(tmp_path: Path, host, artifacts) -> None:
    from murmurd.host import CallGrant, HostError, ToolInput

    outside = _outside(tmp_path)
    root = tmp_path / "workdir"
    root.mkdir()
    os.symlink("../outside", root / "logs")
    os.symlink("../outside", root / "data")
    echo = host.load(artifacts.example("echo"), name="echo")
    with pytest.raises(HostError, match="echo: its log is refused: 'logs': is a symlink"):
        host.call_tool_sync(echo, ToolInput(data="{}"), grant=CallGrant(root=root, log_path=root / "logs" / "t.log"))
    with pytest.raises(HostError, match="echo: its filesystem grant is refused: 'data': is a symlink"):
        host.call_tool_sync(echo, ToolInput(data="{}"), grant=CallGrant(root=root, preopen=root / "data"))
    assert sorted(p.name for p in outside.iterdir()) == ["result.txt", "secret.txt", "task.md", "tool.log"]


def test_unreadable_history_or_context_dir_fails_that_task_only(tmp_path: Path) -> None:
    outside = _outside(tmp_path)
    capsule = chaos_capsule(tmp_path, lifecycle={"conversation": "threaded"})
    with serving(capsule, tmp_path / "state") as served:
        contexts = served.workdir / "contexts"
        (contexts / "ctx_planted").mkdir(parents=True)  # `contexts/` is made with the first history
        os.symlink("../../../../../outside/secret.txt", contexts / "ctx_planted" / "history.json")
        planted = served.send("read it", contextId="ctx_planted")
        failed = served.wait_state(planted["id"], "failed")
        assert "ctx_planted" in failed["status"]["message"]
        assert "'contexts/ctx_planted/history.json': is a symlink" in failed["status"]["message"]
        assert SECRET not in json.dumps(failed)
        (served.workdir / "out" / "result_chosen-1.txt").mkdir(parents=True)  # where the task's result must go
        chosen = served.rpc("tasks/send", {"id": "chosen-1", "sessionId": "ctx_fresh",
                                           "message": {"role": "user", "parts": [{"type": "text", "text": "w"}]}})
        assert chosen["result"]["status"]["state"] == "failed"
        message = chosen["result"]["status"]["message"]["parts"][0]["text"]
        assert message.startswith("cannot record the conversation: ") and "result_chosen-1.txt" in message
        ordinary = served.send("ordinary", contextId="ctx_plain")
        assert served.wait_state(ordinary["id"], "completed")["status"]["response"] == "answer: ordinary"
    _assert_untouched(outside)


@pytest.mark.parametrize("planted", ["file", "fifo"])
def test_a_log_dir_that_is_not_a_directory_fails_the_call_before_the_guest_runs(
        tmp_path: Path, host, artifacts, planted: str) -> None:
    """The log's directory is made with the first byte logged; what stands in its place is
    refused before the call, as a symlink is, and never opened (a FIFO would block an open)."""
    from murmurd.host import CallGrant, HostError, ToolInput

    root = tmp_path / "workdir"
    root.mkdir()
    if planted == "file":
        (root / "logs").write_text("not a directory")
    else:
        os.mkfifo(root / "logs")
    plant = host.load(artifacts.fixture("plant-link"), name="plant-link")
    marker = [["ran", "anywhere"]]  # the guest's one effect, had it run: a link named `ran`
    with pytest.raises(HostError, match="plant-link: its log is refused: 'logs': is not a directory"):
        host.call_tool_sync(plant, ToolInput(data=json.dumps(marker)),
                            grant=CallGrant(root=root, preopen=root, log_path=root / "logs" / "tool-plant-link.log"))
    assert sorted(p.name for p in root.iterdir()) == ["logs"]


def test_a_guest_finds_no_scratch_output_file_to_swap(tmp_path: Path, host, artifacts) -> None:
    """wasmtime's stdout/stderr files have no name (reached as /proc/self/fd/<n>): a guest
    globbing the log directory, where they used to be named, finds nothing to swap."""
    from murmurd.host import CallGrant, ToolInput

    outside = _outside(tmp_path)
    root = tmp_path / "workdir"
    (root / "logs").mkdir(parents=True)
    plant = host.load(artifacts.fixture("plant-link"), name="plant-link")
    swap = [["logs/.*", "../../outside/secret.txt"], ["logs/*", "../../outside/secret.txt"]]
    grant = CallGrant(root=root, preopen=root, log_path=root / "logs" / "tool-plant-link.log")
    result = host.call_tool_sync(plant, ToolInput(data=json.dumps(swap)), grant=grant)
    assert result.data == "planted "  # nothing matched
    assert os.listdir(root / "logs") == []  # the guest wrote nothing, so no log either
    _assert_untouched(outside)


@pytest.mark.parametrize(("planted", "message"), [
    (".murmur", "cannot launch"),  # where the session's bookkeeping would go
    ("out", "cannot launch"),
    ("checkpoints", "cannot launch"),
])
def test_a_reused_workdir_holding_a_symlink_is_refused_at_launch(tmp_path: Path, planted: str, message: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    workdir = tmp_path / "workdir"
    (workdir / "logs").mkdir(parents=True)
    os.symlink(outside / "target", workdir / planted)
    capsule = _answering_capsule(tmp_path, observability={"otel_endpoint": "http://127.0.0.1:9"})
    run = subprocess.run([sys.executable, "-m", "murmurd", "run", str(capsule), "--task", "hi", "--workdir", str(workdir)],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert run.returncode == 1 and message in run.stderr
    assert f"'{planted}': is a symlink; murmurd follows no symlink inside the workdir" in run.stderr
    assert list(outside.iterdir()) == []
