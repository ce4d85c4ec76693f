"""Keeping the disk (issue 24 item 3): `murmurd run` no longer copies compiled components into its
workdir, keeps the newest `--keep-sessions N` session directories, and `murmurd gc` removes old
ones by trace's selectors, never a session a live `serve` or `run` still holds, never following
a symlink. Real CLI processes, a real daemon, real directories."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from a2akit import ROOT, serving
from murmurd import ids
from murmurd.staging.session_hold import SessionHold
from test_serve_operator import hello_copy


def murmurd(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "murmurd", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout)


def sessions(workdir: Path) -> list[str]:
    return sorted(p.name for p in workdir.iterdir() if p.name.startswith("ses_"))


def fake_sessions(workdir: Path, count: int) -> list[str]:
    """`count` session directories with a trace each, oldest first (UUIDv7 ids sort by time)."""
    names = []
    for _ in range(count):
        name = ids.new_session_id()
        (workdir / name / "out").mkdir(parents=True)
        (workdir / name / "trace.jsonl").write_text("{}\n")
        names.append(name)
    return names


def test_run_copies_no_component_and_keeps_the_newest_sessions(tmp_path: Path) -> None:
    capsule = hello_copy(tmp_path)
    for n in range(3):
        proc = murmurd("run", str(capsule), "--task", f"hello {n}", "--keep-sessions", "2", "--json")
        assert proc.returncode == 0, proc.stderr
    workdir = capsule / "workdir"
    kept = sessions(workdir)
    assert len(kept) == 2 and json.loads(proc.stdout)["session_id"] == kept[-1]
    latest = workdir / kept[-1]
    assert not list(latest.rglob("*.wasm"))  # the components run from the compile cache
    assert (latest / "tools" / "echo" / "murmur.yaml").is_file()
    assert (latest / "tools" / "greeting" / "skill.md").is_file()  # a skill's text is read from here
    size = sum(p.stat().st_size for p in latest.rglob("*") if p.is_file())
    assert size < 1_000_000, size  # was 18-53 MB per run with the components copied


def test_run_keeps_twenty_sessions_by_default_and_zero_keeps_all(tmp_path: Path) -> None:
    capsule = hello_copy(tmp_path)
    workdir = capsule / "workdir"
    workdir.mkdir()
    old = fake_sessions(workdir, 21)
    proc = murmurd("run", str(capsule), "--task", "hi", "--keep-sessions", "0")
    assert proc.returncode == 0, proc.stderr
    assert len(sessions(workdir)) == 22
    proc = murmurd("run", str(capsule), "--task", "hi")
    assert proc.returncode == 0, proc.stderr
    left = sessions(workdir)
    assert len(left) == 20 and not set(old[:3]) & set(left)
    assert "--keep-sessions N" in murmurd("run", "--help").stdout


def test_gc_selectors_and_policies(tmp_path: Path) -> None:
    workdir = tmp_path / "workdir"
    names = fake_sessions(workdir, 6)
    nothing = murmurd("gc", "--workdir", str(workdir))
    assert nothing.returncode == 0 and sessions(workdir) == names  # no selector: nothing goes
    dry = murmurd("gc", "--workdir", str(workdir), "--keep-last", "2", "--dry-run", "--json")
    report = json.loads(dry.stdout)
    assert report["removed"] == names[:4] and report["dry_run"] and sessions(workdir) == names
    by_id = murmurd("gc", "--workdir", str(workdir), names[0], names[1][-6:], "@1")
    assert by_id.returncode == 0, by_id.stderr
    assert sessions(workdir) == names[2:5]
    assert f"removed {names[0]}" in by_id.stdout and "removed 3 session(s)" in by_id.stdout
    recent = murmurd("gc", "--workdir", str(workdir), "--older-than", "1d")
    assert recent.returncode == 0 and sessions(workdir) == names[2:5]  # all made just now
    assert murmurd("gc", "--workdir", str(workdir), "--keep-last", "0").returncode == 0
    assert sessions(workdir) == []
    bad = murmurd("gc", "--workdir", str(workdir), "--older-than", "soon")
    assert bad.returncode == 1 and "want <N>m, <N>h or <N>d" in bad.stderr
    missing = murmurd("gc", "--workdir", str(workdir), "ses_nope")
    assert missing.returncode == 1 and "error[E-TRC-002]" in missing.stderr


def test_gc_never_removes_a_held_session_nor_follows_a_symlink(tmp_path: Path) -> None:
    workdir = tmp_path / "workdir"
    held_name, plain_name = fake_sessions(workdir, 2)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep me")
    os.symlink(outside, workdir / plain_name / "link")  # a guest-planted symlink inside a session
    os.symlink(outside, workdir / ("ses_" + "0" * 32))  # a ses_ entry that is a symlink
    hold = SessionHold(workdir / held_name)
    assert hold.held
    try:
        proc = murmurd("gc", "--workdir", str(workdir), "--keep-last", "0", "--json")
        report = json.loads(proc.stdout)
        assert report["removed"] == [plain_name] and report["in_use"] == [held_name]
        assert (workdir / held_name).is_dir()
    finally:
        hold.release()
    assert (outside / "precious.txt").read_text() == "keep me"
    assert (workdir / ("ses_" + "0" * 32)).is_symlink()
    assert murmurd("gc", "--workdir", str(workdir), "--keep-last", "0").returncode == 0
    assert sessions(workdir) == ["ses_" + "0" * 32]  # the symlink is no session directory


def test_gc_leaves_a_running_daemons_sessions_alone(tmp_path: Path) -> None:
    capsule = hello_copy(tmp_path)
    proc = murmurd("run", str(capsule), "--task", "before serving")
    assert proc.returncode == 0, proc.stderr
    (ran,) = sessions(capsule / "workdir")
    with serving(capsule, tmp_path / "state") as served:
        task = served.send("hello")
        served.wait_state(task["id"], "completed", timeout=120)
        live = set(sessions(capsule / "workdir")) - {ran}
        assert served.session_id in live and len(live) == 2  # the daemon's own and the context's
        report = json.loads(murmurd("gc", "--workdir", str(capsule / "workdir"), "--keep-last", "0", "--json").stdout)
        assert report["removed"] == [ran] and set(report["in_use"]) == live
        assert set(sessions(capsule / "workdir")) == live
        again = served.send("still serving")
        assert served.wait_state(again["id"], "completed", timeout=120)["status"]["state"] == "completed"
        assert served.stop() == 0
    report = json.loads(murmurd("gc", "--workdir", str(capsule / "workdir"), "--keep-last", "0", "--json").stdout)
    assert report["in_use"] == [] and sessions(capsule / "workdir") == []
