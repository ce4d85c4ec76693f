"""`murmurd run` like `mur run` (issue 12 item 3): ids per run, flags, `.env`, as real subprocesses."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from a2akit import ROOT
from conftest import EXAMPLES, FIXTURES
from murmurd.containment.host import probe_host
from murmurd.containment.plan import plan_containment
from murmurd.dotenv import DotenvError, parse_dotenv, with_dotenv
from murmurd.session.cache_key import prompt_cache_key


@pytest.fixture(autouse=True)
def _built(artifacts) -> None:
    artifacts.fixture("recorder-driver")


def _murmurd(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "murmurd", *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env={**os.environ, **(env or {})})


def _capsule(root: Path, **inference: object) -> Path:
    directory = root / "rec"
    directory.mkdir(parents=True, exist_ok=True)
    manifest = {
        "name": "rec", "version": "0.1.0",
        "artifacts": [
            {"name": "recorder-driver", "runtime": "driver", "source": str(FIXTURES / "recorder-driver"),
             "local_source": True},
            {"name": "persona", "runtime": "skill", "source": str(EXAMPLES / "hello" / "skills" / "greeting")},
        ],
        "inference": {"endpoint": "http://127.0.0.1:9", "model": "m",
                      "driver": {"artifact": "recorder-driver", "config": {"steps": 1}}, **inference},
    }
    (directory / "murmur.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    return directory


def _json_run(capsule: Path, *args: str, env: dict[str, str] | None = None) -> dict:
    proc = _murmurd("run", str(capsule), "--task", "hi", "--json", *args, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, proc.stdout  # exactly one line: no streamed text beside it
    return json.loads(lines[0])


def _trace(summary: dict) -> list[dict]:
    return [json.loads(line) for line in (Path(summary["workdir"]) / "trace.jsonl").read_text().splitlines()]


def _session_start(summary: dict) -> dict:
    """The run's one attempt: its session_start comes right after task_start (upstream nesting)."""
    task_start, session_start = _trace(summary)[:2]
    assert (task_start["event_type"], session_start["event_type"]) == ("task_start", "session_start")
    return session_start


def test_each_run_mints_a_context_id_so_the_cache_key_differs(tmp_path: Path) -> None:
    capsule = _capsule(tmp_path)
    one, two = _json_run(capsule), _json_run(capsule)
    keys = [json.loads(run["result"])["prompt_cache_key"] for run in (one, two)]
    assert keys[0] != keys[1]
    for run, key in zip((one, two), keys):
        assert run["context_id"].startswith("ctx_") and len(run["context_id"]) == 36
        assert key == prompt_cache_key("rec", "0.1.0", run["context_id"])
        task_start = next(e for e in _trace(run) if e["event_type"] == "task_start")
        assert task_start["context_id"] == run["context_id"] and task_start["source"] == "task_md"
    assert one["session_id"] < two["session_id"]  # UUIDv7: later sessions sort later


def test_json_prints_one_summary_line(tmp_path: Path) -> None:
    summary = _json_run(_capsule(tmp_path))
    assert set(summary) == {"pid", "session_id", "name", "version", "workdir", "task_id", "context_id",
                            "exit_status", "result", "error"}
    assert (summary["name"], summary["version"], summary["exit_status"]) == ("rec", "0.1.0", "ok")
    assert Path(summary["workdir"]).name == summary["session_id"] and summary["task_id"].startswith("tsk_")


def test_json_launch_failure_leaves_stdout_empty(tmp_path: Path) -> None:
    (tmp_path / "murmur.yaml").write_text("name: broken\n")
    proc = _murmurd("run", str(tmp_path), "--task", "x", "--json")
    assert proc.returncode == 1 and proc.stdout == "" and "cannot launch" in proc.stderr


def test_system_prompt_replaces_the_manifest_prompt_for_the_run(tmp_path: Path) -> None:
    capsule = _capsule(tmp_path, system_prompt_artifact="persona")
    summary = _json_run(capsule, "--system-prompt", "  Be brief.  ")
    record = json.loads(summary["result"])
    assert record["system"].endswith("Be brief.")
    assert "persona" in record["tools"]  # the bound artifact is released back for this run
    start = _session_start(summary)
    assert start["system_prompt_source"] == "cli"
    assert start["system_prompt_sha256"] == hashlib.sha256(b"Be brief.").hexdigest()


def test_without_the_flag_the_bound_artifact_is_the_prompt(tmp_path: Path) -> None:
    summary = _json_run(_capsule(tmp_path, system_prompt_artifact="persona"))
    record = json.loads(summary["result"])
    assert "persona" not in record["tools"]
    start = _session_start(summary)
    assert start["system_prompt_source"] == "manifest" and len(start["system_prompt_sha256"]) == 64


def test_a_blank_system_prompt_clears_it(tmp_path: Path) -> None:
    summary = _json_run(_capsule(tmp_path, system_prompt="Long manifest prompt."), "--system-prompt", "  ")
    assert "Long manifest prompt." not in json.loads(summary["result"])["system"]
    start = _session_start(summary)
    assert start["system_prompt_source"] == "cli" and start["system_prompt_sha256"] is None


def test_system_prompt_on_a_script_capsule_is_refused_before_staging(tmp_path: Path) -> None:
    (tmp_path / "murmur.yaml").write_text("name: script\nversion: '1.0'\n")
    proc = _murmurd("run", str(tmp_path), "--task", "x", "--system-prompt", "hi")
    assert proc.returncode == 1 and "E-IO-003" in proc.stderr and "inference" in proc.stderr
    assert not (tmp_path / "workdir").exists()


def test_verbose_names_the_session_workdir_manifest_driver_and_skills(tmp_path: Path) -> None:
    proc = _murmurd("run", str(_capsule(tmp_path)), "--task", "hi", "-v")
    assert proc.returncode == 0, proc.stderr
    for line in ("session: ses_", "workdir: ", "manifest: rec v0.1.0", "driver: recorder-driver (m)",
                 "skills: 1 installed", "status:  ok"):
        assert line in proc.stderr
    quiet = _murmurd("run", str(_capsule(tmp_path)), "--task", "hi")
    assert "session: ses_" in quiet.stderr and "manifest: rec" not in quiet.stderr


def test_the_project_env_file_is_loaded_unless_no_env_file(tmp_path: Path) -> None:
    capsule = _capsule(tmp_path, api_key="${MURMURD_TEST_DOTENV_KEY}")
    (capsule / ".env").write_text("# the key\n\nMURMURD_TEST_DOTENV_KEY = 'sk-from-dotenv'\n")
    env = {k: v for k, v in os.environ.items() if k != "MURMURD_TEST_DOTENV_KEY"}
    loaded = subprocess.run([sys.executable, "-m", "murmurd", "run", str(capsule), "--task", "x"],
                            capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert loaded.returncode == 0, loaded.stderr
    skipped = subprocess.run([sys.executable, "-m", "murmurd", "run", str(capsule), "--task", "x", "--no-env-file"],
                             capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert skipped.returncode == 1 and "E-INF-004" in skipped.stderr


def test_a_malformed_env_file_stops_the_run_naming_the_line(tmp_path: Path) -> None:
    capsule = _capsule(tmp_path)
    (capsule / ".env").write_text("GOOD=1\nthis line has no equals\n")
    proc = _murmurd("run", str(capsule), "--task", "x")
    assert proc.returncode == 1 and "E-IO-003: invalid .env entry at line 2" in proc.stderr
    assert not (capsule / "workdir").exists()


def test_dotenv_rules() -> None:
    assert parse_dotenv('A=1\n B = "two words" \n#C=3\nD=\'q\'\nE=x=y\nF="unbalanced\'\n') == {
        "A": "1", "B": "two words", "D": "q", "E": "x=y", "F": "\"unbalanced'"}
    with pytest.raises(DotenvError, match="line 1"):
        parse_dotenv("=value\n")


def test_dotenv_never_overrides_and_walks_up_to_the_project(tmp_path: Path) -> None:
    (tmp_path / "murmur.yaml").write_text("name: p\n")
    (tmp_path / ".env").write_text("SET=from-file\nNEW=from-file\n")
    nested = tmp_path / "sub" / "dir"
    nested.mkdir(parents=True)
    assert with_dotenv(nested, {"SET": "from-env"}) == {"SET": "from-env", "NEW": "from-file"}
    assert with_dotenv(tmp_path / "nowhere-without-a-manifest", {}) in ({}, {"SET": "from-file", "NEW": "from-file"})


def test_workdir_is_the_accessible_dir_and_bookkeeping_goes_under_dot_murmur(tmp_path: Path) -> None:
    target = tmp_path / "here"
    summary = _json_run(_capsule(tmp_path), "--workdir", str(target))
    books = target / ".murmur" / summary["session_id"]
    assert summary["workdir"] == str(target.resolve())
    assert (target / "task.md").read_text() == "hi"
    # upstream's layout: `.capsule-home` with a shell, `checkpoints/` when the capsule makes it
    assert not (target / ".capsule-home").exists() and not (target / "checkpoints").exists()
    for name in ("trace.jsonl", "MURMUR.md", "out/result.txt", "tools/recorder-driver/murmur.yaml"):
        assert (books / name).is_file(), name
        assert not (target / name).exists(), name
    # a second run into the same directory keeps its own bookkeeping
    again = _json_run(_capsule(tmp_path), "--workdir", str(target))
    assert sorted(p.name for p in (target / ".murmur").iterdir()) == sorted([summary["session_id"], again["session_id"]])


def test_an_env_that_is_not_a_regular_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "murmur.yaml").write_text("name: p\n")
    (tmp_path / ".env").mkdir()
    with pytest.raises(DotenvError, match="E-IO-003"):
        with_dotenv(tmp_path, {})


def test_explain_scope_reports_grants_without_staging(tmp_path: Path) -> None:
    capsule = _capsule(tmp_path)
    proc = _murmurd("run", str(capsule), "--task", "x", "--explain-scope", "--json")
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stdout.splitlines()
    grants = json.loads(line)
    assert grants["declared_containment"] == "advisory" and grants["floor_met"] is True
    here = plan_containment(probe_host(), "auto")  # what this host achieves (docs/containment.md)
    assert grants["enforcement_tier"] == here.mechanism and grants["shell_allow"] == []
    assert not (capsule / "workdir").exists()
    human = _murmurd("run", str(capsule), "--task", "x", "--explain-scope", "--containment", "sealed")
    assert human.returncode == 0
    for line in ("Containment", "  declared:  sealed", "  floor met: no", f"  mechanism: {here.mechanism}",
                 "Effective grants",
                 "  shell allow:         <none>", "would refuse to launch here"):
        assert line in human.stdout
    assert not (capsule / "workdir").exists()


@pytest.mark.parametrize("command", ["run", "serve"])
def test_a_containment_floor_murmurd_cannot_meet_refuses_the_launch(tmp_path: Path, command: str) -> None:
    capsule = _capsule(tmp_path)
    extra = ["--task", "x"] if command == "run" else ["--state-dir", str(tmp_path / "state")]
    proc = _murmurd(command, str(capsule), *extra, "--containment", "sealed")
    assert proc.returncode == 1 and "E-CAP-003: containment floor not met" in proc.stderr
    assert not (capsule / "workdir").exists()
    advisory = _murmurd("run", str(capsule), "--task", "x", "--containment", "advisory")
    assert advisory.returncode == 0, advisory.stderr
