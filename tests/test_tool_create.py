"""murmur-tool-create, bundled by name (issue 28 item 2), through a real session: the WASM tool
scaffolds `tools/<name>/` in the workdir; `murmurd build` then packs the native scaffold (once
it is executable) and compiles the WASM one and the hook one, which loads as a hook and answers
every lifecycle event; bad requests are refused with nothing written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from bundledkit import bundled
from hookkit import Recorder, end_turn, hooked_capsule, run_session, tool_call
from loopkit import stage, trace_events
from murmurd.contract import Role
from murmurd.host import HOOK_LIMITS, CallGrant, SessionContext
from murmurd.host.hook_values import HANDLERS, HookOutput
from murmurd.manifest.artifact import load_artifact_manifest
from murmurd.manifest.hooks import check_hook_contract
from test_hook_host import EVENTS

ROOT = Path(__file__).resolve().parent.parent
TOOL = "murmur-tool-create"


def build(directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "murmurd", "build", str(directory)], capture_output=True, text=True,
                          timeout=1200, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.anyio
async def test_create_scaffolds_tools_that_murmurd_build_accepts(tmp_path: Path, host) -> None:
    requests = [
        {"type": "tool", "name": "word-count"},
        {"data": json.dumps({"type": "tool", "name": "shouter", "runtime": "wasm"})},
        {"type": "tool", "name": "word-count"},
        {"type": "tool", "name": "../escape"},
        {"type": "hook", "name": "a-hook"},
        {"type": "tool", "name": "odd", "runtime": "python"},
        {"type": "tool"},
    ]
    responses = [tool_call(f"c{i}", TOOL, r) for i, r in enumerate(requests)] + [end_turn()]
    staged = stage(hooked_capsule(tmp_path, [bundled(TOOL, version="0.1.0")], responses), host, tmp_path)
    assert staged.artifacts[TOOL].resolved.origin.startswith("bundled:")
    events = Recorder()
    (outcome,) = await run_session(staged, host, "scaffold two tools", events=events)
    assert outcome.ok, outcome.error
    texts = [text for _n, text in events.tool_results]
    statuses = [e["status"] for e in trace_events(staged) if e["event_type"] == "tool_call"]
    assert statuses == ["ok", "ok", "error", "error", "error", "error", "error"], texts
    assert json.loads(texts[0]) == {"path": "tools/word-count"}
    assert json.loads(texts[1]) == {"path": "tools/shouter"}
    assert "scaffold failed: tools/word-count already exists; remove it before scaffolding" in texts[2]
    assert "scaffold failed: name '../escape' must be lowercase letters" in texts[3]
    assert "unknown scaffold type 'hook'" in texts[4]
    assert "unknown runtime 'python' (native, wasm or hook)" in texts[5]
    assert "scaffold failed: name is required" in texts[6]

    tools = staged.workdir.root / "tools"
    assert not (tools / "odd").exists() and not (tools / "a-hook").exists()
    assert not (tools.parent / "escape").exists()
    native, wasm = tools / "word-count", tools / "shouter"
    assert sorted(p.relative_to(native).as_posix() for p in native.rglob("*") if p.is_file()) == \
        ["README.md", "bin/run", "murmur.yaml"]
    manifest = load_artifact_manifest(native / "murmur.yaml")
    assert (manifest.name, manifest.version, manifest.runtime, manifest.is_native) == ("word-count", "0.1.0", "tool", True)
    assert manifest.input_schema == {"type": "object", "properties": {}}

    # a WASM tool cannot set file modes: build names the fix, then packs the scaffold as it is
    refused = build(native)
    assert refused.returncode == 1 and "is not executable (chmod 755 it)" in refused.stderr
    (native / "bin" / "run").chmod(0o755)
    packed = build(native)
    assert packed.returncode == 0, packed.stderr
    archive = packed.stdout.split()[1]
    with zipfile.ZipFile(archive) as opened:
        assert sorted(opened.namelist()) == ["bin/run", "murmur.yaml"]
    stub = subprocess.run([str(native / "bin" / "run")], input='{"data": "{}", "log_path": null}',
                          capture_output=True, text=True, timeout=60)
    assert stub.returncode == 0 and json.loads(stub.stdout)["status"] == "passed"

    wasm_manifest = load_artifact_manifest(wasm / "murmur.yaml")
    assert wasm_manifest.runtime == "tool" and not wasm_manifest.is_native
    compiled = build(wasm)
    assert compiled.returncode == 0, compiled.stderr
    component, packed_wasm = compiled.stdout.split()
    assert Path(component) == wasm / "shouter.wasm"
    with zipfile.ZipFile(packed_wasm) as opened:
        assert sorted(opened.namelist()) == ["murmur.yaml", "shouter.wasm"]


@pytest.mark.anyio
async def test_a_hook_scaffold_builds_loads_as_a_hook_and_answers_every_event(tmp_path: Path, host) -> None:
    """Upstream scaffolds hooks too; its stub leaves out two handlers. This one has all nine: the
    host's contract check at load names any missing one, and each answers `none`."""
    request = {"type": "tool", "name": "event-sink", "runtime": "hook"}
    responses = [tool_call("c0", TOOL, request), end_turn()]
    staged = stage(hooked_capsule(tmp_path, [bundled(TOOL, version="0.1.0")], responses), host, tmp_path)
    events = Recorder()
    (outcome,) = await run_session(staged, host, "scaffold a hook", events=events)
    assert outcome.ok, outcome.error
    (text,) = [text for _n, text in events.tool_results]
    assert json.loads(text) == {"path": "tools/event-sink"}

    scaffold = staged.workdir.root / "tools" / "event-sink"
    assert sorted(p.name for p in scaffold.iterdir()) == ["README.md", "app.py", "murmur.yaml"]
    manifest = load_artifact_manifest(scaffold / "murmur.yaml")
    assert (manifest.name, manifest.runtime, manifest.binding, manifest.commit_policy) == \
        ("event-sink", "hook", None, "none")
    assert check_hook_contract(manifest) == []
    assert "runtime: hook" in (scaffold / "README.md").read_text()

    compiled = build(scaffold)
    assert compiled.returncode == 0, compiled.stderr
    component, packed = compiled.stdout.split()
    with zipfile.ZipFile(packed) as opened:
        assert sorted(opened.namelist()) == ["event-sink.wasm", "murmur.yaml"]
    loaded = host.load(Path(component), expected=Role.HOOK)
    grant = CallGrant(log_path=tmp_path / "logs" / "hook-event-sink.log", root=tmp_path, limits=HOOK_LIMITS)
    hook = host.hook_instance(loaded, grant=grant, session=SessionContext(), name="event-sink")
    try:
        assert hook.handlers == frozenset(HANDLERS)
        assert [hook.call_sync(handler, EVENTS[handler]) for handler in HANDLERS] == [HookOutput("none")] * len(HANDLERS)
    finally:
        hook.close()
