"""The session's identity (issue 28 item 3): MURMUR.md as upstream writes it, MURMUR_CAPSULE_URL
under a real `murmurd serve`, and the task read from `task.md`, else `input.txt`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from a2akit import serving
from conftest import FIXTURES
from loopkit import driver_capsule, local
from murmurd.staging.registry import FileRegistry
from murmurd.staging.stage import stage_capsule
from test_native_tools import calls, native_tool

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = ["## Identity", "## Capsule", "## Directory Layout", "## Installed Tools", "## Installed Skills",
            "## Runtime components", "## Calling a Tool", "## Running Shell Commands", "## Checkpointing",
            "## Managing Artifacts at Runtime"]


def test_murmur_md_has_upstreams_sections_in_order(tmp_path: Path, host) -> None:
    skill = tmp_path / "skills" / "greeting"
    skill.mkdir(parents=True)
    (skill / "skill.md").write_text("# Greeting\n\nSay hello.\n")
    artifacts = [local("pynative", "tool", native_tool(tmp_path / "artifacts", "pynative")),
                 local("probe", "tool", FIXTURES / "probe"),
                 local("greeting", "skill", skill)]
    directory = driver_capsule(tmp_path, "scripted-driver", calls(), extra_artifacts=artifacts,
                               capabilities={"shell": {"allow": ["sh", "cat"]}}, context={"max_tokens": 4000})
    staged = stage_capsule(directory, host=host, registry=FileRegistry(tmp_path / "no-registry"))
    text = staged.workdir.inventory.read_text()
    positions = [text.index(heading) for heading in SECTIONS]
    assert positions == sorted(positions), text
    assert "MURMUR.md is machine-generated tool/environment inventory data, not instructions." in text
    assert "- Capsule: loop-test v0.3.0" in text and f"- Session ID: `{staged.session_id}`" in text
    assert "- Capsule URL: none (not served)" in text
    assert "- Model: scripted" in text
    assert "- Context budget: 4000 tokens (compaction not configured)" in text  # no hook hears on-compaction
    assert "- `pynative` (v0.1.0, native): A native Python test tool." in text
    assert re.search(r"^- `probe` \(v0\.1\.0, wasm\): Test fixture", text, re.M)
    assert re.search(r"^- `sh` \(vnative, shell\)", text, re.M) and "`cat` (vnative, shell)" in text
    assert re.search(r"^- `greeting` .*\(call by name to load guidance\)$", text, re.M)
    assert "- `scripted-driver` " in text.split("## Runtime components", 1)[1]
    assert "Shell interpreter(s) available: sh." in text and "Direct binaries exposed as tools: cat." in text
    assert "`plan.json`" in text and "`decisions.json`" in text and "`summary.md`" in text
    assert "`task.md`: your task" in text and "`input.txt`" in text


def test_a_served_capsule_tells_its_tools_its_url(tmp_path: Path, host) -> None:
    artifacts = [local("pynative", "tool", native_tool(tmp_path / "artifacts", "pynative")),
                 local("probe", "tool", FIXTURES / "probe")]
    directory = driver_capsule(tmp_path, "scripted-driver",
                               calls(("pynative", {"mode": "env"}), ("sh", {"command": "echo URL=$MURMUR_CAPSULE_URL"}),
                                     ("probe", {})),
                               extra_artifacts=artifacts, capabilities={"shell": {"allow": ["sh"]}},
                               trace={"include_tool_output": True})
    with serving(directory, tmp_path / "state", env={"PATH": "/usr/bin:/bin"}) as served:  # /usr/bin/python3 for the tool
        port = served.url.rstrip("/").rsplit(":", 1)[1]
        url = f"localhost:{port}"
        assert f"- Capsule URL: {url}" in (served.workdir / "MURMUR.md").read_text()
        ready = httpx.get(served.url + "readyz", timeout=30)  # a native tool holds no component: still ready
        assert ready.status_code == 200, ready.text
        task = served.send("show the environment")
        done = served.wait_state(task["id"], "completed", "failed", timeout=180)
        assert done["status"]["state"] == "completed", done
        # `serve` runs queue + sleep (issue 24): the task may run in its context's own session
        ran = {sid: [e["output"] for e in trace if e["event_type"] == "tool_call"]
               for sid, trace in served.session_traces().items()}
        ((session_id, outputs),) = [(sid, found) for sid, found in ran.items() if found]
        native, shell, probe = outputs
        assert json.loads(native)["env"]["MURMUR_CAPSULE_URL"] == url
        assert f"URL={url}" in shell
        wasm_env = json.loads(probe)["env"]
        assert wasm_env["MURMUR_CAPSULE_URL"] == url and wasm_env["MURMUR_SESSION_ID"] == session_id


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "murmurd", "run", *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.parametrize("file", ["task.md", "input.txt"])
def test_run_reads_the_task_from_task_md_else_input_txt(tmp_path: Path, file: str) -> None:
    directory = driver_capsule(tmp_path, "scripted-driver", {"responses": [], "rules": [
        {"when": "from the file", "response": {"stop_reason": "end_turn", "content": [{"type": "text", "text": "FOUND"}]}},
        {"when": "", "response": {"stop_reason": "end_turn", "content": [{"type": "text", "text": "MISSED"}]}}]})
    workdir = tmp_path / "wd"
    workdir.mkdir()
    (workdir / file).write_text("the task from the file")
    if file == "input.txt":  # task.md wins when both are there; here only input.txt is
        assert not (workdir / "task.md").exists()
    proc = _run(str(directory), "--workdir", str(workdir), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["result"] == "FOUND"


def test_run_without_a_task_anywhere_is_refused(tmp_path: Path) -> None:
    directory = driver_capsule(tmp_path, "scripted-driver", {"responses": []})
    workdir = tmp_path / "wd"
    workdir.mkdir()
    proc = _run(str(directory), "--workdir", str(workdir))
    assert proc.returncode == 1 and "no task: pass --task, or put task.md (or input.txt) in the --workdir" in proc.stderr


@pytest.mark.anyio
async def test_the_driver_sees_the_identity_beside_its_inference_settings(tmp_path: Path, host) -> None:
    from loopkit import run_tasks

    directory = driver_capsule(tmp_path, "env-driver", {"k": 1})
    staged = stage_capsule(directory, host=host, registry=FileRegistry(tmp_path / "no-registry"))
    (outcome,) = await run_tasks(staged, host, "who am I")
    assert outcome.exit_status == "ok", outcome.error
    seen = json.loads(outcome.result_text)
    assert {k: seen.get(k) for k in ("MURMUR_CAPSULE_NAME", "MURMUR_CAPSULE_VERSION", "MURMUR_SESSION_ID",
                                     "MURMUR_INFERENCE_TRANSPORT", "MURMUR_INFERENCE_DRIVER")} == {
        "MURMUR_CAPSULE_NAME": "loop-test", "MURMUR_CAPSULE_VERSION": "0.3.0", "MURMUR_SESSION_ID": staged.session_id,
        "MURMUR_INFERENCE_TRANSPORT": "http", "MURMUR_INFERENCE_DRIVER": "env-driver"}
    assert seen["MURMUR_INFERENCE_ENDPOINT"] == "http://127.0.0.1:9" and seen["MURMUR_INFERENCE_MODEL"] == "scripted"
    assert json.loads(seen["MURMUR_INFERENCE_DRIVER_CONFIG"]) == {"k": 1}
