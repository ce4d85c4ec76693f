"""Shell commands end with their task, through a real `murmurd serve`: tasks/cancel, SIGTERM
and SIGKILL of the daemon each leave no process of the command's group behind."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

import pytest
import yaml

from a2akit import Served, script_capsule, serving
from conftest import EXAMPLES
from murmurd.containment.host import probe_host
from prockit import alive, read_pid, wait_gone

# The shell (pid in shell.pid) and a background `sleep` (pid in sleep.pid): only a kill of
# the whole process group reaches the second.
GROUP_SCRIPT = "sleep 300 & echo $! > sleep.pid; echo $$ > shell.pid; wait"


@pytest.fixture(autouse=True)
def _built(artifacts) -> None:
    artifacts.example("scripted-driver")


def _model_shell_capsule(root: Path, script: str = GROUP_SCRIPT) -> Path:
    """A capsule whose model calls the `sh` tool with `script` (GROUP_SCRIPT), then ends its turn."""
    directory = root / "sleeper"
    directory.mkdir()
    responses = [
        {"stop_reason": "tool_call", "content": [
            {"type": "tool_call", "id": "call_1", "name": "sh", "input": {"command": script}}]},
        {"stop_reason": "end_turn", "content": [{"type": "text", "text": "slept"}]},
    ]
    manifest = {
        "name": "sleeper", "version": "1.0.0",
        "artifacts": [{"name": "scripted-driver", "runtime": "driver", "source": str(EXAMPLES / "scripted-driver"),
                       "local_source": True}],
        "inference": {"endpoint": "http://127.0.0.1:9", "model": "m",
                      "driver": {"artifact": "scripted-driver", "config": {"responses": responses}}},
        "capabilities": {"shell": {"allow": ["sh", "sleep", "setsid"]}},
        "lifecycle": {"after_task": "sleep"},
    }
    (directory / "murmur.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    return directory


def _running_group(served: Served) -> tuple[str, list[int]]:
    """Start the sleeping task; its id and the pids of its shell group once both run."""
    task = served.send("sleep please")
    pids = [read_pid(served.workdir / "shell.pid"), read_pid(served.workdir / "sleep.pid")]
    assert all(alive(pid) for pid in pids)
    assert served.get(task["id"])["status"]["state"] == "working"
    return task["id"], pids


def test_cancel_kills_a_model_shell_commands_process_group(tmp_path: Path) -> None:
    with serving(_model_shell_capsule(tmp_path), tmp_path / "state") as served:
        task_id, pids = _running_group(served)
        canceled = served.rpc("tasks/cancel", {"id": task_id})["result"]
        assert canceled["status"]["state"] == "canceled"
        assert wait_gone(pids, timeout=10) < 10
        assert served.proc.poll() is None  # the daemon lives on


def test_cancel_kills_a_component_shell_import_process_group(tmp_path: Path, artifacts) -> None:
    capsule = script_capsule(tmp_path, "script", artifacts.fixture("pull-capsule"),
                             capabilities={"shell": {"allow": ["sh", "sleep", "setsid"]}})
    with serving(capsule, tmp_path / "state") as served:
        task = served.send(json.dumps({"shell": ["sh", ["-c", GROUP_SCRIPT]]}))
        pids = [read_pid(served.workdir / "shell.pid"), read_pid(served.workdir / "sleep.pid")]
        assert all(alive(pid) for pid in pids)
        served.rpc("tasks/cancel", {"id": task["id"]})
        assert wait_gone(pids, timeout=10) < 10
        assert served.wait_state(task["id"], "canceled", timeout=30)["status"]["state"] == "canceled"


def test_a_component_call_deadline_kills_its_shell_process_group(tmp_path: Path, artifacts) -> None:
    capsule = script_capsule(tmp_path, "script", artifacts.fixture("pull-capsule"),
                             capabilities={"shell": {"allow": ["sh", "sleep", "setsid"]}, "limits": {"deadline_seconds": 3}})
    with serving(capsule, tmp_path / "state") as served:
        task = served.send(json.dumps({"shell": ["sh", ["-c", GROUP_SCRIPT]]}))
        pids = [read_pid(served.workdir / "shell.pid"), read_pid(served.workdir / "sleep.pid")]
        failed = served.wait_state(task["id"], "failed", timeout=60)
        assert "deadline" in json.dumps(failed["status"])
        wait_gone(pids, timeout=10)


def test_sigterm_ends_the_daemon_and_its_shell_well_before_the_shell_timeout(tmp_path: Path) -> None:
    with serving(_model_shell_capsule(tmp_path), tmp_path / "state") as served:
        _task_id, pids = _running_group(served)
        started = time.monotonic()
        assert served.stop(signal.SIGTERM, timeout=120) == 0
        # The default 10 s grace, then the cancel: far from the 300 s shell timeout.
        assert time.monotonic() - started < 60
        wait_gone(pids, timeout=10)


def test_a_sigkilled_daemon_leaves_no_orphan(tmp_path: Path) -> None:
    with serving(_model_shell_capsule(tmp_path), tmp_path / "state") as served:
        _task_id, pids = _running_group(served)
        served.proc.kill()
        served.proc.wait(timeout=10)
        wait_gone(pids, timeout=15)


@pytest.mark.skipif(probe_host().pids_root is None, reason="no pids cgroup here: a command that leaves its group "
                    "with setsid is beyond reach (W-SEC-010)")
def test_a_sigkilled_daemon_leaves_no_orphan_that_left_the_process_group(tmp_path: Path) -> None:
    """`setsid` takes a process out of the command's group, so the watchdog's group kill misses
    it; it is still in the command's pids cgroup, which the watchdog empties too."""
    script = "setsid sleep 300 & echo $! > sleep.pid; echo $$ > shell.pid; wait"
    with serving(_model_shell_capsule(tmp_path, script), tmp_path / "state") as served:
        _task_id, pids = _running_group(served)
        assert Path(f"/proc/{pids[1]}/stat").read_text().split(")")[1].split()[3] != str(pids[0])  # its own group
        served.proc.kill()
        served.proc.wait(timeout=10)
        try:
            wait_gone(pids, timeout=15)
        finally:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
