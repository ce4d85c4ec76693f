"""The command line's edges as a new user meets them (issue 25, item 1): a capsule named by its
directory or its murmur.yaml, `validate` refusing what would certainly fail at launch (with
codes), `explain` reading `.env` as `run` does, every `serve` flag grouped and explained, one
prefix per message, and progress through every long step."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
from pathlib import Path

from conftest import EXAMPLES, ROOT
from murmurd.a2a.peers.client import render_frame
from murmurd.cli import build_parser
from murmurd.commands.serve_flags import GROUPS
from murmurd.host import ComponentHost
from murmurd.manifest.writing import dump_yaml
from murmurd.progress import Ticker


def murmurd(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run([sys.executable, "-m", "murmurd", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout, env={**os.environ, **(env or {})})


def capsule(root: Path, manifest: dict, name: str = "cap") -> Path:
    directory = root / name
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "murmur.yaml").write_text(dump_yaml(manifest))
    return directory


def real_model(**inference: object) -> dict:
    """The README's quick-start capsule, with `inference` fields replaced."""
    return {"name": "my-agent", "version": "0.1.0",
            "artifacts": [{"name": "murmur-driver-anthropic", "runtime": "driver"}],
            "capabilities": {"network": {"allow": ["https://api.anthropic.com"]}},
            "inference": {"endpoint": "https://api.anthropic.com", "model": "claude-sonnet-4-5",
                          "api_key": "${MY_AGENT_KEY}", "driver": {"artifact": "murmur-driver-anthropic"},
                          **inference}}


def diagnostics(proc: subprocess.CompletedProcess[str]) -> dict[str, dict]:
    return {d["code"]: d for d in json.loads(proc.stdout)["diagnostics"]}


# -- a directory or its murmur.yaml ----------------------------------------------------------

def test_every_capsule_command_takes_the_manifest_path_as_well_as_the_directory() -> None:
    for command in ("validate", "explain"):
        by_dir = murmurd(command, str(EXAMPLES / "hello"))
        by_file = murmurd(command, str(EXAMPLES / "hello" / "murmur.yaml"))
        assert by_dir.returncode == by_file.returncode == 0, by_file.stderr
        assert by_dir.stdout == by_file.stdout
    parser = build_parser()
    for command in ("run", "serve"):
        args = parser.parse_args([command, str(EXAMPLES / "hello" / "murmur.yaml"), *(
            ["--task", "x"] if command == "run" else [])])
        assert Path(args.capsule_dir) == EXAMPLES / "hello"


def test_another_file_is_refused_by_the_parser_naming_what_it_wanted(tmp_path: Path) -> None:
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    for command in (("run", str(other), "--task", "x"), ("serve", str(other)), ("validate", str(other))):
        proc = murmurd(*command)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert f"{other} is a file; give the capsule's directory or its murmur.yaml" in proc.stderr


# -- validate: what would certainly fail at launch ---------------------------------------------

def test_a_misspelt_bundled_name_is_an_error_with_the_closest_names(tmp_path: Path) -> None:
    manifest = real_model(driver={"artifact": "murmur-driver-antropic"})
    manifest["artifacts"] = [{"name": "murmur-driver-antropic", "runtime": "driver"}]
    proc = murmurd("validate", str(capsule(tmp_path, manifest)), "--json", env={"MY_AGENT_KEY": "k",
                                                                              "MURMUR_REGISTRY": str(tmp_path / "r")})
    assert proc.returncode == 1
    found = diagnostics(proc)["E-REG-001"]
    assert found["path"] == "artifacts[0].name"
    assert "did you mean 'murmur-driver-anthropic'" in found["message"]


def test_an_endpoint_outside_network_allow_is_an_error(tmp_path: Path) -> None:
    manifest = real_model()
    manifest["capabilities"] = {"network": {"allow": ["https://api.openai.com"]}}
    proc = murmurd("validate", str(capsule(tmp_path, manifest)), "--json", env={"MY_AGENT_KEY": "k"})
    assert proc.returncode == 1
    found = diagnostics(proc)["E-INF-013"]
    assert found["path"] == "inference.endpoint" and "not in capabilities.network.allow" in found["message"]


def test_no_model_for_a_bundled_driver_is_an_error(tmp_path: Path) -> None:
    manifest = real_model()
    del manifest["inference"]["model"]
    proc = murmurd("validate", str(capsule(tmp_path, manifest)), "--json", env={"MY_AGENT_KEY": "k"})
    assert proc.returncode == 1
    assert diagnostics(proc)["E-INF-015"]["path"] == "inference.model"


def test_no_inference_and_no_capsule_component_is_an_error(tmp_path: Path) -> None:
    directory = capsule(tmp_path, {"name": "idle", "version": "0.1.0"})
    proc = murmurd("validate", str(directory), "--json")
    assert proc.returncode == 1
    assert "nothing would run a task" in diagnostics(proc)["E-INF-014"]["message"]
    (directory / "capsule.wasm").write_bytes(b"\0asm")  # a script capsule: capsule.wasm runs itself
    assert murmurd("validate", str(directory)).returncode == 0


def test_the_readme_quick_start_capsule_validates_clean(tmp_path: Path) -> None:
    proc = murmurd("validate", str(capsule(tmp_path, real_model())), env={"MY_AGENT_KEY": "k"})
    assert proc.returncode == 0, proc.stdout


# -- explain reads .env ------------------------------------------------------------------------

def test_explain_reads_the_env_file_beside_the_manifest_as_run_does(tmp_path: Path) -> None:
    import os

    env = {k: v for k, v in os.environ.items() if k != "MY_AGENT_KEY"}
    directory = capsule(tmp_path, real_model())
    (directory / ".env").write_text("MY_AGENT_KEY=sk-from-dotenv\n")
    run = subprocess.run([sys.executable, "-m", "murmurd", "explain", str(directory)], capture_output=True,
                         text=True, cwd=ROOT, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("my-agent 0.1.0\n")
    assert "sk-from-dotenv" not in run.stdout
    skipped = subprocess.run([sys.executable, "-m", "murmurd", "explain", str(directory), "--no-env-file"],
                             capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert skipped.returncode == 1 and "E-INF-004" in skipped.stderr


# -- serve --help ------------------------------------------------------------------------------

def _serve_parser() -> argparse.ArgumentParser:
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return commands.choices["serve"]


def test_every_serve_flag_has_help_and_sits_in_its_group() -> None:
    serve = _serve_parser()
    titles = [g.title for g in serve._action_groups]
    assert titles[-len(GROUPS):] == list(GROUPS)
    for action in serve._actions:
        assert action.help, f"{action.option_strings or action.dest} has no help text"
    grouped = {a.dest for g in serve._action_groups if g.title in GROUPS for a in g._group_actions}
    for dest in ("host", "port", "credentials", "task_acceptance", "after_task", "max_connections", "store",
                 "replica_lease"):
        assert dest in grouped
    shown = murmurd("serve", "--help").stdout
    for title in GROUPS:
        assert f"\n{title}:\n" in shown
    assert "--task-acceptance" in shown and "which A2A tasks are accepted" in " ".join(shown.split())


# -- one prefix per message --------------------------------------------------------------------

def test_a_rejected_status_reads_rejected_once() -> None:
    from httpx_sse import ServerSentEvent

    frame = {"id": "tsk_1", "status": {"state": "rejected", "message": "rejected: the task queue is full (queue_depth 1)"},
             "final": True}
    rendered = render_frame(ServerSentEvent(event="status", data=json.dumps(frame)))
    assert rendered.text == "[tsk_1] rejected: the task queue is full (queue_depth 1)\n"


def test_a_manifest_warning_at_launch_has_one_prefix(tmp_path: Path) -> None:
    manifest = {"name": "warned", "version": "0.1.0", "surprise": 1}
    proc = murmurd("run", str(capsule(tmp_path, manifest)), "--task", "x")
    assert "warning W-MAN-001 surprise" in proc.stderr
    assert "warning: warning" not in proc.stderr


# -- progress ----------------------------------------------------------------------------------

def test_a_ticker_reports_start_ticks_and_end() -> None:
    lines: list[str] = []
    ticked = threading.Event()

    def progress(line: str) -> None:
        lines.append(line)
        if ": " in line and line.endswith("s"):
            ticked.set()

    with Ticker(progress, "compiling x", "compiled x", every=0.05, first="compiling x (first use)"):
        assert ticked.wait(60)
    assert lines[0] == "compiling x (first use)"
    assert any(line.startswith("compiling x: ") for line in lines[1:-1])
    assert lines[-1].startswith("compiled x in ")


def test_a_cold_compile_says_when_it_started_and_ended(tmp_path: Path, artifacts) -> None:
    wasm = artifacts.example("echo")
    lines: list[str] = []
    host = ComponentHost(cache_dir=tmp_path / "cache")
    try:
        host.load(wasm, progress=lines.append)
        host.load(wasm, progress=lines.append)  # cached now: silent
    finally:
        host.close()
    assert lines[0] == "compiling echo (first use on this machine; cached afterwards)"
    assert lines[-1].startswith("compiled echo in ") and len([l for l in lines if l.startswith("compiled")]) == 1
