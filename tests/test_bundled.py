"""Bundled artifacts resolved by name (issue 13, item 1): `murmurd list`, staging and running a
capsule that names one, `murmurd install` pinning it, and every refusal around them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bundledkit import bundled
from hookkit import Recorder, end_turn, hooked_capsule, run_session, tool_call
from loopkit import stage
from murmurd.staging.artifacts import ResolveError
from murmurd.staging.bundled import bundled_artifacts, bundled_output, find_bundled, resolve_bundled
from murmurd.staging.install import install_pins
from murmurd.staging.registry import FileRegistry
from murmurd.staging.stage import StagingError

ROOT = Path(__file__).resolve().parent.parent
EDITOR = "murmur-tool-editor"
BUNDLED = {"murmur-tool-editor": "tool", "murmur-tool-request-input": "tool", "murmur-tool-fetch": "tool",
           "murmur-hook-debug": "hook", "murmur-hook-compact": "hook", "murmur-hook-memory-jsonl": "hook",
           "murmur-hook-eval": "hook", "murmur-hook-shell-desc": "hook",
           "murmur-hook-diff-summary": "hook", "murmur-hook-regression-verifier": "hook",
           "murmur-hook-grafana": "hook"}


def _murmurd(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "murmurd", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def _editor_capsule(tmp_path: Path, **entry: object) -> Path:
    responses = [tool_call("c1", EDITOR, {"op": "write", "path": "notes.txt", "content": "alpha\nbeta\n"}),
                 end_turn("written")]
    return hooked_capsule(tmp_path, [bundled(EDITOR, **entry)], responses)


def test_list_shows_every_bundled_artifact_with_version_runtime_and_description() -> None:
    proc = _murmurd("list")
    assert proc.returncode == 0, proc.stderr
    header, *body = proc.stdout.splitlines()
    assert header.split() == ["NAME", "VERSION", "RUNTIME", "DESCRIPTION"]
    lines = {line.split()[0]: line.split(maxsplit=3) for line in body}
    for name, runtime in BUNDLED.items():
        assert lines[name][1:3] == [find_bundled(name).manifest.version, runtime], proc.stdout
        assert lines[name][3].strip()  # the description
    rows = json.loads(_murmurd("list", "--json").stdout)
    assert {r["name"]: r["runtime"] for r in rows if r["name"] in BUNDLED} == BUNDLED


def _bundled_dir(root: Path, name: str, manifest: str, app: str = "") -> Path:
    (root / name).mkdir(parents=True)
    (root / name / "murmur.yaml").write_text(manifest)
    (root / name / "app.py").write_text(app)
    return root / name


def test_a_broken_bundled_directory_is_a_clear_error_that_spares_the_others(tmp_path: Path) -> None:
    _bundled_dir(tmp_path, "murmur-x", "name: murmur-y\nversion: 0.1.0\nruntime: tool\n")
    _bundled_dir(tmp_path, "murmur-z", "name: [not, a, name]\n")
    _bundled_dir(tmp_path, "murmur-ok", "name: murmur-ok\nversion: 0.2.0\nruntime: hook\n")
    with pytest.raises(ResolveError, match="murmur-x: its manifest names it 'murmur-y'"):
        bundled_artifacts(tmp_path)
    with pytest.raises(ResolveError, match="bundled artifact murmur-z: .*murmur.yaml"):
        find_bundled("murmur-z", tmp_path)
    assert find_bundled("murmur-ok", tmp_path).manifest.version == "0.2.0"
    assert find_bundled("../murmur-ok", tmp_path / "murmur-x") is None  # a name never becomes a path
    assert find_bundled("anything", tmp_path / "absent") is None


def test_a_bundled_artifact_that_does_not_build_is_refused_naming_it(tmp_path: Path) -> None:
    directory = _bundled_dir(tmp_path, "murmur-broken", "name: murmur-broken\nversion: 0.1.0\nruntime: tool\n",
                             "this is not python(\n")
    with pytest.raises(ResolveError, match=r"bundled artifact murmur-broken: .*app\.py: build failed"):
        resolve_bundled(find_bundled("murmur-broken", tmp_path), None)
    assert not list(directory.glob("*.wasm"))


def test_a_cold_install_builds_the_bundled_artifact_once_with_a_progress_line(tmp_path: Path) -> None:
    capsule = hooked_capsule(tmp_path, [bundled("murmur-tool-request-input")], [end_turn()])
    env = {**os.environ, "MURMUR_CACHE_DIR": str(tmp_path / "cold-cache")}

    def install() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "murmurd", "install", str(capsule), "--registry",
                               str(tmp_path / "empty")], cwd=ROOT, capture_output=True, text=True, timeout=300,
                              env=env)

    cold = install()
    assert cold.returncode == 0, cold.stderr
    assert "building murmur-tool-request-input against guest/tool" in cold.stderr
    assert "built murmur-tool-request-input in" in cold.stderr
    warm = install()
    assert warm.returncode == 0 and "built murmur-tool-request-input (cached)" in warm.stderr
    assert "building" not in warm.stderr


def test_validate_accepts_a_manifest_naming_a_bundled_artifact(tmp_path: Path) -> None:
    proc = _murmurd("validate", str(_editor_capsule(tmp_path)), "--no-env-file")
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.anyio
async def test_a_bundled_tool_named_without_a_source_stages_and_runs(tmp_path: Path, host, artifacts) -> None:
    staged = stage(_editor_capsule(tmp_path), host, tmp_path)
    artifact = staged.artifacts[EDITOR].resolved
    assert artifact.origin.startswith("bundled:murmurd") and artifact.payload == bundled_output(find_bundled(EDITOR))
    assert not list(find_bundled(EDITOR).directory.glob("*.wasm"))  # built into the cache, never the package
    lock = yaml.safe_load((staged.manifest_dir / "murmur.lock").read_text())
    assert {"name": EDITOR, "resolved_version": "0.2.0", "sha256": {"wasm": artifact.sha256}} in lock["artifacts"]
    events = Recorder()
    (outcome,) = await run_session(staged, host, "go", events=events)
    assert outcome.ok, outcome.error
    assert events.tool_results == [(EDITOR, "wrote 11 bytes to notes.txt")]
    assert (staged.workdir.root / "notes.txt").read_text() == "alpha\nbeta\n"


def test_a_version_other_than_the_bundled_one_is_refused_naming_both(tmp_path: Path, host) -> None:
    with pytest.raises(StagingError, match=r"version 9\.9\.9 asked for, but murmurd .* bundles murmur-tool-editor 0\.2\.0"):
        stage(_editor_capsule(tmp_path, version="9.9.9"), host, tmp_path)


def test_a_name_neither_in_the_registry_nor_bundled_is_refused(tmp_path: Path, host) -> None:
    capsule = hooked_capsule(tmp_path, [bundled("murmur-tool-nonesuch")], [end_turn()])
    with pytest.raises(StagingError, match="not in registry .* and murmurd bundles no artifact of that name"):
        stage(capsule, host, tmp_path)


def test_the_registry_wins_over_a_bundled_artifact_of_the_same_name(tmp_path: Path, host, artifacts) -> None:
    source = tmp_path / "src" / EDITOR
    source.mkdir(parents=True)
    echo = ROOT / "examples" / "echo"
    (source / "app.py").write_text((echo / "app.py").read_text())
    (source / "murmur.yaml").write_text((echo / "murmur.yaml").read_text().replace("name: echo", f"name: {EDITOR}")
                                        .replace("0.1.0", "2.0.0"))
    artifacts.wasm(source)
    registry = FileRegistry(tmp_path / "registry")
    registry.publish(source)
    from murmurd.staging.stage import stage_capsule
    staged = stage_capsule(_editor_capsule(tmp_path), host=host, registry=registry)
    assert staged.artifacts[EDITOR].resolved.version == "2.0.0"
    assert staged.artifacts[EDITOR].resolved.origin.startswith("registry:")


def test_install_pins_a_bundled_artifact_and_launch_refuses_a_tampered_pin(tmp_path: Path, host) -> None:
    capsule = _editor_capsule(tmp_path)
    proc = _murmurd("install", str(capsule), "--registry", str(tmp_path / "empty-registry"))
    assert proc.returncode == 0, proc.stderr
    assert f"{EDITOR} 0.2.0" in proc.stdout.splitlines()
    lock_path = capsule / "murmur.lock"
    lock = yaml.safe_load(lock_path.read_text())
    (pin,) = [p for p in lock["artifacts"] if p["name"] == EDITOR]
    assert pin["sha256"]["wasm"] == stage(capsule, host, tmp_path).artifacts[EDITOR].resolved.sha256

    pin["sha256"]["wasm"] = "0" * 64
    lock_path.write_text(yaml.safe_dump(lock))
    with pytest.raises(StagingError, match="disagrees with the murmur.lock pin"):
        stage(capsule, host, tmp_path)
    pin["sha256"]["wasm"], pin["resolved_version"] = "1" * 64, "0.0.1"
    lock_path.write_text(yaml.safe_dump(lock))
    with pytest.raises(StagingError, match="version 0.2.0 disagrees with the murmur.lock pin 0.0.1"):
        stage(capsule, host, tmp_path)


def test_install_of_an_unknown_name_fails_and_writes_no_lock(tmp_path: Path) -> None:
    capsule = hooked_capsule(tmp_path, [bundled("murmur-tool-nonesuch")], [end_turn()])
    with pytest.raises(Exception, match="murmurd bundles no artifact of that name"):
        install_pins(capsule, FileRegistry(tmp_path / "empty"))
    assert not (capsule / "murmur.lock").exists()
