"""Aggregate bounds on shell commands (issue 22 item 4): the memory, cpu and io cgroups of each
command, and the workdir's size bound (`E-RUN-013`). Real commands, real cgroups, real sessions."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from loopkit import driver_capsule, run_tasks, trace_events
from murmurd.containment import resources
from murmurd.containment.resources import CommandScope, ResourceBounds
from murmurd.session.workdir_guard import CHECK_SECONDS, WorkdirGuard, disk_use_past
from murmurd.staging.registry import FileRegistry
from murmurd.staging.stage import StagedCapsule, stage_capsule

pytestmark = pytest.mark.anyio

DELEGATED = resources.probe()
MIB = 1024 * 1024
needs_memory = pytest.mark.skipif(not DELEGATED.has("memory"), reason=str(DELEGATED.missing.get("memory")))


def calls(*commands: tuple[str, str]) -> dict[str, Any]:
    responses = [{"stop_reason": "tool_call", "content": [
        {"type": "tool_call", "id": f"c{i}", "name": binary, "input": {"command": command}}]}
        for i, (binary, command) in enumerate(commands)]
    return {"responses": [*responses, {"stop_reason": "end_turn", "content": [{"type": "text", "text": "done"}]}]}


def staged_capsule(tmp_path: Path, host, commands: list[tuple[str, str]], capabilities: dict[str, Any]) -> StagedCapsule:
    directory = driver_capsule(tmp_path, "scripted-driver", calls(*commands), capabilities=capabilities)
    return stage_capsule(directory, host=host, registry=FileRegistry(tmp_path / "no-registry"), env=os.environ)


def stdout_of(text: str) -> str:
    return text.split("Stdout:\n", 1)[1].split("\nStderr:", 1)[0]


def shell_events(staged: StagedCapsule) -> list[dict[str, Any]]:
    return [e for e in trace_events(staged) if e["event_type"] == "shell"]


@needs_memory
async def test_memory_max_kills_a_balloon_and_names_the_limit(tmp_path: Path, host) -> None:
    # bash holds a command substitution's whole output: 400 MiB of it, under a 64 MiB cgroup. The
    # address-space rlimit is set far above, so only the memory controller can stop it.
    balloon = "x=$(head -c 400000000 /dev/zero | tr '\\0' a); echo survived ${#x}"
    small = "x=$(head -c 1000000 /dev/zero | tr '\\0' a); echo survived ${#x}"
    staged = staged_capsule(tmp_path, host, [("bash", balloon), ("bash", small)], {
        "shell": {"allow": ["bash", "head", "tr"]},
        "resources": {"cgroup_memory_bytes": 64 * MIB, "memory_bytes": 16 * 1024 * MIB}})
    (outcome,) = await run_tasks(staged, host, "inflate")
    assert outcome.exit_status == "ok", outcome.error
    texts = [m.text for m in outcome.messages if m.role == "tool"]
    killed, fine = shell_events(staged)
    assert killed["exit_code"] == 128 + 9 and killed["resource_limit"] == "cgroup_memory_bytes"
    assert "survived" not in stdout_of(texts[0])
    assert fine["exit_code"] == 0 and stdout_of(texts[1]) == "survived 1000000" and "resource_limit" not in fine


def test_each_delegated_controller_gets_the_declared_bound(tmp_path: Path) -> None:
    if not DELEGATED.roots:
        pytest.skip(f"no controller is delegated here: {DELEGATED.missing}")
    scope = CommandScope.create(DELEGATED, ResourceBounds(96 * MIB, 50, 8 * MIB), tmp_path)
    try:
        groups = {name: (directory, version) for name, (directory, version) in scope.groups.items()}
        assert scope.procs_files and all(Path(p).exists() for p in scope.procs_files)
        if "memory" in groups:
            directory, version = groups["memory"]
            limit = (directory / ("memory.max" if version == 2 else "memory.limit_in_bytes")).read_text().strip()
            assert int(limit) == 96 * MIB
        if "cpu" in groups:
            directory, version = groups["cpu"]
            if version == 2:
                assert (directory / "cpu.max").read_text().split() == ["50000", "100000"]
            else:
                assert (directory / "cpu.cfs_quota_us").read_text().strip() == "50000"
                assert (directory / "cpu.cfs_period_us").read_text().strip() == "100000"
        if "io" in groups and scope.io_device is not None:
            directory, version = groups["io"]
            if version == 2:
                assert f"{scope.io_device} rbps={8 * MIB} wbps={8 * MIB}" in (directory / "io.max").read_text()
            else:
                assert (directory / "blkio.throttle.write_bps_device").read_text().split() == [
                    scope.io_device, str(8 * MIB)]
        made = list(scope.made)
    finally:
        scope.remove()
    assert made and not any(directory.exists() for directory in made)  # nothing outlives the command


def test_the_walk_counts_disk_use_once_per_inode_and_never_follows_a_link(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(os.urandom(256 * 1024))
    os.link(tmp_path / "a", tmp_path / "hard")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "up").symlink_to(tmp_path)  # a loop, were links followed
    (tmp_path / "sparse").touch()
    os.truncate(tmp_path / "sparse", 1 << 40)  # 1 TiB apparent, no blocks
    used = disk_use_past(tmp_path, 1 << 50)
    assert 256 * 1024 <= used < 2 * 256 * 1024
    guard = WorkdirGuard(tmp_path, 64 * 1024)
    assert guard.check() and "E-RUN-013" in (guard.breach or "")


async def test_a_workdir_grown_past_its_bound_ends_the_session_with_e_run_013(tmp_path: Path, host) -> None:
    staged = staged_capsule(tmp_path, host, [("dd", "if=/dev/zero of=fill bs=1M count=4"), ("sh", "echo never")], {
        "shell": {"allow": ["dd", "sh"]}, "resources": {"workdir_max_bytes": 2 * MIB}})
    try:
        (outcome,) = await run_tasks(staged, host, "fill the disk")
        assert outcome.exit_status == "failed" and "E-RUN-013" in (outcome.error or "")
        assert "workdir_max_bytes" in outcome.error
        assert [e.get("binary") for e in shell_events(staged)] == []  # the session ended inside the first call
        end = [e for e in trace_events(staged) if e["event_type"] == "task_end"]
        assert end and "E-RUN-013" in str(end[-1])
    finally:
        (staged.workdir.root / "fill").unlink(missing_ok=True)


async def test_a_command_still_growing_the_workdir_is_stopped_by_the_periodic_walk(tmp_path: Path, host) -> None:
    # Past the bound at once, then it would sleep for its whole 300 s timeout: the walk every 10 s
    # (upstream's period) finds the breach and kills it.
    started = time.monotonic()
    staged = staged_capsule(tmp_path, host, [("sh", "dd if=/dev/zero of=fill bs=1M count=4 2>/dev/null; exec sleep 300")],
                            {"shell": {"allow": ["sh", "dd", "sleep"]}, "resources": {"workdir_max_bytes": 2 * MIB}})
    try:
        (outcome,) = await run_tasks(staged, host, "fill and wait")
        assert outcome.exit_status == "failed" and "E-RUN-013" in (outcome.error or "")
        elapsed = time.monotonic() - started
        assert CHECK_SECONDS <= elapsed < 200  # the periodic walk ended it, far below the command's own timeout
    finally:
        (staged.workdir.root / "fill").unlink(missing_ok=True)


async def test_a_workdir_grown_between_commands_is_found_by_the_sessions_own_walk(tmp_path: Path, host) -> None:
    from murmurd.session.session import Session, TaskSpec

    staged = staged_capsule(tmp_path, host, [("sh", "echo never")], {
        "shell": {"allow": ["sh"]}, "resources": {"workdir_max_bytes": 2 * MIB}})
    session = Session(staged, host)
    await session.open()
    try:
        # What a component writing files does: the workdir grows while no shell command runs.
        (staged.workdir.root / "written-by-a-tool").write_bytes(os.urandom(4 * MIB))
        guard = session._runner.policy.workdir_guard
        assert guard is not None
        deadline = time.monotonic() + 120
        while guard.breach is None and time.monotonic() < deadline:
            await anyio.sleep(0.1)
        assert guard.breach is not None and "E-RUN-013" in guard.breach
        outcome = await session.run_task(TaskSpec("tsk_" + "0" * 32, "go"))
        assert outcome.exit_status == "failed" and "E-RUN-013" in (outcome.error or "")
        assert shell_events(staged) == []  # the command never ran
    finally:
        await session.close()
        (staged.workdir.root / "written-by-a-tool").unlink(missing_ok=True)
