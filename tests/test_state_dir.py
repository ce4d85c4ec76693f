"""The state directory: one daemon at a time, and a broken one is named, never a traceback."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from a2akit import ROOT, chaos_capsule, serving, start
from murmurd.a2a.core.state_dir import StateDirError, StateDirLock


@pytest.fixture(autouse=True)
def _built(artifacts) -> None:
    for name in ("chaos-driver", "ask"):
        artifacts.fixture(name)
    artifacts.example("echo")


def _serve_once(capsule: Path, state_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "murmurd", "serve", str(capsule), "--state-dir", str(state_dir)],
        capture_output=True, text=True, timeout=90, cwd=ROOT,
    )


def test_a_second_daemon_on_the_same_state_dir_refuses_and_names_the_holder(tmp_path: Path) -> None:
    capsule = chaos_capsule(tmp_path, deadline=600)
    state = tmp_path / "state"
    with serving(capsule, state) as first:
        running = first.send("mode:hang")
        first.wait_state(running["id"], "working")
        second = _serve_once(capsule, state)
        assert second.returncode == 1
        assert f"state directory {state} is in use by another murmurd" in second.stderr
        assert f"pid {first.proc.pid}" in second.stderr and first.url in second.stderr
        assert "Traceback" not in second.stderr
        assert first.get(running["id"])["status"]["state"] == "working"  # untouched by the second
        first.rpc("tasks/cancel", {"id": running["id"]})


def test_the_lock_dies_with_a_killed_daemon(tmp_path: Path) -> None:
    capsule = chaos_capsule(tmp_path)
    state = tmp_path / "state"
    first = start(capsule, state)
    first.stop(signal.SIGKILL)
    with serving(capsule, state) as second:
        task = second.send("after the crash")
        assert second.wait_state(task["id"], "completed")["status"]["response"] == "answer: after the crash"


def test_a_state_dir_that_is_a_file_is_refused_with_what_to_do(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.write_text("not a directory")
    proc = _serve_once(chaos_capsule(tmp_path), state)
    assert proc.returncode == 1
    assert f"state directory {state} exists and is not a directory; move it aside" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert state.read_text() == "not a directory"


def test_a_corrupt_task_store_is_refused_with_how_to_recover(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    store = state / "tasks.sqlite3"
    garbage = b"this is not a database" * 200
    store.write_bytes(garbage)
    proc = _serve_once(chaos_capsule(tmp_path), state)
    assert proc.returncode == 1
    assert f"task store {store} is unusable" in proc.stderr
    assert f"mv {store} {store}.broken" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert store.read_bytes() == garbage  # nothing was overwritten


def test_a_damaged_record_of_an_interrupted_task_is_named(tmp_path: Path) -> None:
    capsule = chaos_capsule(tmp_path)
    state = tmp_path / "state"
    with serving(capsule, state) as first:
        task = first.send("kept")
        first.wait_state(task["id"], "completed")
    db = sqlite3.connect(state / "tasks.sqlite3")
    db.execute("UPDATE tasks SET state = 'working', record = '{broken' WHERE id = ?", (task["id"],))
    db.commit()
    db.close()
    proc = _serve_once(capsule, state)
    assert proc.returncode == 1
    assert f"the record of task '{task['id']}' is damaged" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_lock_is_exclusive_within_one_process_too(tmp_path: Path) -> None:
    held = StateDirLock.acquire(tmp_path / "state")
    try:
        with pytest.raises(StateDirError, match="is in use by another murmurd"):
            StateDirLock.acquire(tmp_path / "state")
    finally:
        held.release()
    StateDirLock.acquire(tmp_path / "state").release()
