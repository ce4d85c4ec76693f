"""Native tools (issue 28 item 1) and the session's identity in every guest and child (item 3),
through real sessions: a native tool written in Python runs as a contained subprocess of the
real shell path; the model's calls come from the scripted driver."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from conftest import FIXTURES
from loopkit import driver_capsule, local, run_tasks, stage, trace_events
from murmurd.containment.host import probe_host
from murmurd.containment.plan import plan_containment
from murmurd.manifest.writing import dump_yaml
from murmurd.staging.registry import FileRegistry
from murmurd.staging.stage import StagedCapsule, stage_capsule

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parent.parent
HERE = plan_containment(probe_host(), "auto")
SECRETS = {
    "GITHUB_TOKEN": "ghp_" + "a" * 36,
    "OPENAI_API_KEY": "sk-test-native-tool-secret",
    "DATABASE_URL": "postgres://user:hunter2@db.example/prod",
    "AWS_SECRET_ACCESS_KEY": "abcdEFGHijklMNOPqrstUVWXyz0123456789abcd",
}
DEBIAN_PATH = "/usr/bin:/bin"
IDENTITY = ("MURMUR_CAPSULE_NAME", "MURMUR_CAPSULE_VERSION", "MURMUR_SESSION_ID",
            "MURMUR_INFERENCE_TRANSPORT", "MURMUR_INFERENCE_DRIVER")

TOOL_SOURCE = '''#!/usr/bin/env python3
"""A native murmur tool in Python: one JSON request on stdin, one JSON result on stdout."""
import json
import os
import sys
import time

request = json.loads(sys.stdin.read())
args = json.loads(request["data"])
mode = args.get("mode")
if mode == "sleep":
    time.sleep(600)
if mode == "crash":
    raise RuntimeError("the native tool fell over")
if mode == "garbage":
    print("this is not json at all")
    sys.exit(0)
if mode == "two":
    print(json.dumps({"status": "passed"}))
    print(json.dumps({"status": "passed"}))
    sys.exit(0)
if mode == "fail":
    print(json.dumps({"status": "failed", "summary": "nothing matched", "data": None}))
    sys.exit(0)
with open(request["log_path"], "a") as log:  # the protocol's log: opened as upstream's tools open it
    log.write("pynative: " + str(mode) + "\\n")
report = {"echo": args, "request": request, "cwd": os.getcwd(), "argv0": sys.argv[0], "env": dict(os.environ)}
print(json.dumps({"status": "passed", "summary": "ok", "data": report,
                  "metadata": {"state_effect": "read", "resource_id": "native:" + str(args.get("mode"))}}))
'''


def native_tool(root: Path, name: str) -> Path:
    """An artifact directory as upstream's python-native guide lays it out (bin/<name>, 755)."""
    directory = root / name
    (directory / "bin").mkdir(parents=True)
    (directory / "murmur.yaml").write_text(dump_yaml({
        "name": name, "version": "0.1.0", "runtime": "tool", "implementation": "native",
        "description": "A native Python test tool.", "requires_files": [f"bin/{name}"],
        "input_schema": {"type": "object", "properties": {"mode": {"type": "string"}}},
    }))
    exe = directory / "bin" / name
    exe.write_text(TOOL_SOURCE)
    exe.chmod(0o755)
    return directory


def calls(*steps: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    responses = [{"stop_reason": "tool_call", "content": [
        {"type": "tool_call", "id": f"c{i}", "name": name, "input": tool_input}]}
        for i, (name, tool_input) in enumerate(steps)]
    return {"responses": [*responses, {"stop_reason": "end_turn", "content": [{"type": "text", "text": "done"}]}]}


def native_capsule(tmp_path: Path, host, steps: list[tuple[str, dict[str, Any]]], *, runtime: str = "tool",
                   env: dict[str, str] | None = None, **extra: Any) -> StagedCapsule:
    tools = tmp_path / "artifacts"
    artifacts = [
        local("pynative", runtime, native_tool(tools, "pynative")),
        local("pynative-slow", runtime, native_tool(tools, "pynative-slow"),
              capabilities={"limits": {"deadline_seconds": 2}}),
        *extra.pop("extra_artifacts", []),
    ]
    directory = driver_capsule(tmp_path, "scripted-driver", calls(*steps), extra_artifacts=artifacts, **extra)
    # Debian's tools on PATH (`#!/usr/bin/env python3` finds /usr/bin/python3, never a pyenv shim):
    # under `scoped` the tool may read its interpreter's closure and standard library only
    return stage_capsule(directory, host=host, registry=FileRegistry(tmp_path / "no-registry"),
                         env={**os.environ, **SECRETS, "PATH": DEBIAN_PATH, **(env or {})})


def tool_texts(outcome) -> list[str]:
    return [m.text for m in outcome.messages if m.role == "tool"]


async def test_a_python_native_tool_is_called_and_its_result_normalized(tmp_path: Path, host) -> None:
    staged = native_capsule(tmp_path, host, [("pynative", {"mode": "echo", "n": 1}), ("pynative", {"mode": "fail"})])
    shutil.rmtree(staged.workdir.root / "logs", ignore_errors=True)  # as a fresh context's: made when first needed
    (outcome,) = await run_tasks(staged, host, "call the native tool")
    assert outcome.exit_status == "ok", outcome.error
    echo, fail = tool_texts(outcome)
    report = json.loads(echo)
    assert report["echo"] == {"mode": "echo", "n": 1}
    # One JSON request: `data` the input as JSON text, `log_path` the tool's log in the workdir.
    assert json.loads(report["request"]["data"]) == {"mode": "echo", "n": 1}
    assert report["request"]["log_path"] == "logs/tool-pynative.log"
    # its directory is there when the tool runs: the tool opens the path it was given, nothing more
    assert (staged.workdir.root / "logs" / "tool-pynative.log").read_text() == "pynative: echo\n"
    assert report["cwd"] == str(staged.workdir.root) and report["argv0"].endswith("bin/pynative")
    assert fail == "nothing matched"  # a failed result: its summary, as an error result
    calls_traced = [e for e in trace_events(staged) if e["event_type"] == "tool_call"]
    assert [c["status"] for c in calls_traced] == ["ok", "error"]
    assert calls_traced[0]["state_effect"] == "read" and calls_traced[0]["resource_id"] == "native:echo"
    errors = [m for m in outcome.messages if m.role == "tool" and m.is_error]
    assert [m.text for m in errors] == ["nothing matched"]


async def test_timeout_crash_and_garbage_are_clear_error_results(tmp_path: Path, host) -> None:
    staged = native_capsule(tmp_path, host, [
        ("pynative-slow", {"mode": "sleep"}), ("pynative", {"mode": "crash"}),
        ("pynative", {"mode": "garbage"}), ("pynative", {"mode": "two"}), ("pynative", {"mode": "echo"}),
    ])
    (outcome,) = await run_tasks(staged, host, "break the native tool")
    assert outcome.exit_status == "ok", outcome.error  # each failure is the model's to handle
    slow, crash, garbage, two, echo = tool_texts(outcome)
    assert slow == "error: native tool pynative-slow timed out after 2 s; its process group was killed"
    assert crash.startswith("error: native tool pynative exited with code 1; stderr: Traceback")
    assert "RuntimeError: the native tool fell over" in crash
    assert garbage.startswith("error: native tool pynative: its output is not one JSON object")
    assert "'this is not json at all'" in garbage
    assert two.startswith("error: native tool pynative: its output is not one JSON object (Extra data")
    assert json.loads(echo)["echo"] == {"mode": "echo"}  # the session goes on
    statuses = [e["status"] for e in trace_events(staged) if e["event_type"] == "tool_call"]
    assert statuses == ["error", "error", "error", "error", "ok"]
    timed = [e for e in trace_events(staged) if e["event_type"] == "tool_call"][0]
    assert 1_900 <= timed["duration_ms"] < 60_000


def test_a_planted_log_directory_fails_the_call_before_the_tool_runs(tmp_path: Path, host) -> None:
    """The tool is handed `logs/tool-<name>.log` and opens it itself, so murmurd makes `logs/`
    first; a symlink a guest planted there is refused and the tool never starts. (Called
    directly: in a task the driver's own log is refused there first.)"""
    from murmurd.session.native import NativeToolError, call_native
    from murmurd.session.tools import shell_policy

    outside = tmp_path / "outside"
    outside.mkdir()
    staged = native_capsule(tmp_path, host, [("pynative", {"mode": "echo"})])
    shutil.rmtree(staged.workdir.root / "logs", ignore_errors=True)
    (staged.workdir.root / "logs").symlink_to(outside)
    with pytest.raises(NativeToolError) as refused:
        call_native(staged, shell_policy(staged), "pynative", json.dumps({"mode": "echo"}))
    assert str(refused.value) == ("native tool pynative: its log is refused: 'logs': is a symlink; murmurd follows"
                                  " no symlink inside the workdir")
    assert list(outside.iterdir()) == []  # nothing written through it, no log made there


async def test_the_native_environment_has_the_identity_and_no_credentials(tmp_path: Path, host) -> None:
    staged = native_capsule(tmp_path, host, [("pynative", {"mode": "env"}), ("sh", {"command": "env"}),
                                             ("probe", {})],
                            capabilities={"shell": {"allow": ["sh", "env"], "strip_env": ["NATIVE_STRIPPED*"]}},
                            env={"NATIVE_STRIPPED_X": "1", "LANG": "C.UTF-8"},
                            extra_artifacts=[local("probe", "tool", FIXTURES / "probe",
                                                   capabilities={"env": {"allow": ["MURMUR_SESSION_ID"]}})])
    (outcome,) = await run_tasks(staged, host, "show the environment")
    assert outcome.exit_status == "ok", outcome.error
    native_text, shell_text, probe_text = tool_texts(outcome)
    native_env = json.loads(native_text)["env"]
    shell_env = dict(line.split("=", 1) for line in shell_text.split("Stdout:\n", 1)[1].split("\nStderr:")[0].splitlines()
                     if "=" in line)
    wasm_env = json.loads(probe_text)["env"]
    expected = {"MURMUR_CAPSULE_NAME": "loop-test", "MURMUR_CAPSULE_VERSION": "0.3.0",
                "MURMUR_SESSION_ID": staged.session_id, "MURMUR_INFERENCE_TRANSPORT": "http",
                "MURMUR_INFERENCE_DRIVER": "scripted-driver"}
    for env in (native_env, shell_env, wasm_env):
        assert {k: env.get(k) for k in IDENTITY} == expected
        assert "MURMUR_CAPSULE_URL" not in env  # `run` binds no port
        assert "MURMUR_INFERENCE_API_KEY" not in env and "MURMUR_INFERENCE_ENDPOINT" not in env
    for env in (native_env, shell_env):  # the shell's environment rules, for both children
        assert not set(SECRETS) & set(env), set(SECRETS) & set(env)
        assert not any(value in json.dumps(env) for value in SECRETS.values())
        assert env["HOME"] == str(staged.workdir.root / ".capsule-home")
        assert "NATIVE_STRIPPED_X" not in env and env["LANG"] == "C.UTF-8" and env.get("PATH")
    # The same environment for both (what an interpreter's launcher adds to its own aside).
    added = {k for k in native_env if k.startswith(("PYENV", "_PYENV")) or k in ("LC_CTYPE", "PWD", "SHLVL", "_")}
    assert set(native_env) - added == set(shell_env) - {"PWD", "SHLVL", "_"}


@pytest.mark.skipif(not HERE.landlock, reason="no Landlock here")
async def test_under_landlock_a_native_tool_runs_but_cannot_write_outside_the_workdir(tmp_path: Path, host) -> None:
    outside = tmp_path / "outside.txt"
    source = TOOL_SOURCE.replace('mode = args.get("mode")', 'mode = args.get("mode")\n'
                                 'if mode == "write":\n'
                                 '    try:\n'
                                 '        open(args["path"], "w").write("x"); wrote = "yes"\n'
                                 '    except OSError as exc:\n'
                                 '        wrote = type(exc).__name__\n'
                                 '    print(json.dumps({"status": "passed", "data": wrote})); sys.exit(0)')
    staged = native_capsule(tmp_path, host, [("pynative", {"mode": "write", "path": str(outside)}),
                                             ("pynative", {"mode": "write", "path": "inside.txt"})])
    exe = Path(staged.artifacts["pynative"].resolved.payload)
    exe.write_text(source)
    (outcome,) = await run_tasks(staged, host, "write")
    assert tool_texts(outcome) == ["PermissionError", "yes"]
    assert not outside.exists() and (staged.workdir.root / "inside.txt").read_text() == "x"


async def test_runtime_native_in_the_capsule_manifest_and_dispatch_order(tmp_path: Path, host) -> None:
    # The python-native guide declares the artifact `runtime: native`; a native tool is dispatched
    # before a shell binary of the same name could be (staging refuses the clash outright).
    staged = native_capsule(tmp_path, host, [("pynative", {"mode": "echo"})], runtime="native")
    assert staged.artifacts["pynative"].resolved.native and staged.artifacts["pynative"].component is None
    (outcome,) = await run_tasks(staged, host, "call it")
    assert json.loads(tool_texts(outcome)[0])["echo"] == {"mode": "echo"}
    inventory = staged.workdir.inventory.read_text()
    assert "- `pynative` (v0.1.0, native): A native Python test tool." in inventory


def test_murmurd_build_packs_a_python_native_tool(tmp_path: Path) -> None:
    directory = native_tool(tmp_path, "pynative")
    proc = subprocess.run([sys.executable, "-m", "murmurd", "build", str(directory)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    built, archive = proc.stdout.split()
    assert Path(built) == directory / "bin" / "pynative"
    assert Path(archive).name.startswith("pynative-0.1.0-") and archive.endswith(".mur.zip")
    with zipfile.ZipFile(archive) as packed:
        assert packed.namelist() == ["murmur.yaml", "bin/pynative"]
        mode = packed.getinfo("bin/pynative").external_attr >> 16
        assert mode & stat.S_IXUSR
    # The registry's archive reader takes its executable (it refused native tools by name before).
    from murmurd.registry.archive import open_archive

    opened = open_archive(Path(archive).read_bytes())
    assert opened.payload() == ("bin/pynative", (directory / "bin" / "pynative").read_bytes())


def test_build_refuses_a_native_tool_that_is_not_executable(tmp_path: Path) -> None:
    directory = native_tool(tmp_path, "pynative")
    (directory / "bin" / "pynative").chmod(0o644)
    proc = subprocess.run([sys.executable, "-m", "murmurd", "build", str(directory)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 1 and "is not executable (chmod 755 it)" in proc.stderr


async def test_a_packed_native_tool_installs_and_runs_by_name(tmp_path: Path, host) -> None:
    directory = native_tool(tmp_path / "src", "pynative")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    built = subprocess.run([sys.executable, "-m", "murmurd", "build", str(directory)], capture_output=True, text=True,
                           timeout=120, cwd=ROOT, env=env)
    assert built.returncode == 0, built.stderr
    archive = built.stdout.split()[1]
    capsule = driver_capsule(tmp_path, "scripted-driver", calls(("pynative", {"mode": "echo"})),
                             extra_artifacts=[{"name": "pynative", "version": "0.1.0"}])
    installed = subprocess.run([sys.executable, "-m", "murmurd", "install", archive], capture_output=True, text=True,
                               timeout=120, cwd=capsule, env=env)
    assert installed.returncode == 0, installed.stderr
    staged = stage_capsule(capsule, host=host, registry=None, env={**os.environ, "PATH": DEBIAN_PATH})
    resolved = staged.artifacts["pynative"].resolved
    assert resolved.native and resolved.archived and resolved.payload.stat().st_mode & stat.S_IXUSR
    assert not resolved.payload.is_relative_to(staged.workdir.root)  # what runs is outside the workdir
    (outcome,) = await run_tasks(staged, host, "call it")
    assert outcome.exit_status == "ok", outcome.error
    assert json.loads(tool_texts(outcome)[0])["echo"] == {"mode": "echo"}


async def test_a_capsule_component_invokes_a_native_tool(tmp_path: Path, host, artifacts) -> None:
    # `murmur:tool-registry/invoke` reaches a native tool too (the invoke-capsule example calls `echo`).
    from loopkit import capsule_dir

    capsule = capsule_dir(tmp_path, {"name": "script", "version": "0.1.0",
                                     "artifacts": [local("echo", "tool", native_tool(tmp_path / "src", "echo"))]},
                          capsule_wasm=artifacts.example("invoke-capsule"))
    staged = stage_capsule(capsule, host=host, registry=FileRegistry(tmp_path / "no-registry"),
                           env={**os.environ, "PATH": DEBIAN_PATH})
    (outcome,) = await run_tasks(staged, host, "native, please")
    assert outcome.exit_status == "ok", outcome.error
    report = json.loads(staged.workdir.result.read_text())
    assert report["echo"] == {"text": "native, please"}
    assert report["env"]["MURMUR_SESSION_ID"] == staged.session_id


def test_a_native_scripts_read_paths_name_its_interpreter(tmp_path: Path) -> None:
    from murmurd.session.native import read_paths

    exe = native_tool(tmp_path, "pynative") / "bin" / "pynative"
    paths = read_paths(exe, DEBIAN_PATH)

    from murmurd.session.native import interpreter_runtime

    assert paths[0] == str(exe.resolve()) and paths[1] == os.path.realpath("/usr/bin/env")
    assert paths[2] == os.path.realpath(shutil.which("python3", path=DEBIAN_PATH))
    python = Path(paths[2])  # its standard library is derived from its path: <prefix>/lib/python3.N
    assert interpreter_runtime(paths[1:]) == ((str(python.parent.parent / "lib" / python.name), True),)
    binary = tmp_path / "elf"
    binary.write_bytes(b"\x7fELF\x02\x01")
    assert read_paths(binary, None) == [str(binary.resolve())]


def test_inert_blocks_on_a_native_tool_are_warned_at_staging(tmp_path: Path, host) -> None:
    said: list[str] = []
    artifacts = [local("pynative", "tool", native_tool(tmp_path / "src", "pynative"),
                       capabilities={"network": {"allow": ["https://example.com"]},
                                     "limits": {"deadline_seconds": 30, "memory_bytes": 1 << 20}})]
    directory = driver_capsule(tmp_path, "scripted-driver", calls(), extra_artifacts=artifacts)
    staged = stage_capsule(directory, host=host, registry=FileRegistry(tmp_path / "no-registry"), progress=said.append)
    warned = [d for d in staged.report.warnings if d.code == "W-SEC-008"]
    assert [d.path for d in warned] == ["artifacts[1].capabilities.network", "artifacts[1].capabilities.limits.memory_bytes"]
    assert any("W-SEC-008" in line and "is a native tool" in line for line in said)
