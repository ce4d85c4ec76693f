"""The real-model quick start (issue 13, item 5): the README's manifest and `examples/coding-capsule`
validate as shipped, and the bundled parts the example names (editor, compaction hook, shell
allowlist) run together through a real session with the driver swapped for the scripted one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import EXAMPLES
from hookkit import Recorder, end_turn, run_session, tool_call
from loopkit import local
from murmurd.staging.registry import FileRegistry
from murmurd.staging.stage import stage_capsule
from murmurd.manifest.writing import dump_yaml

ROOT = Path(__file__).resolve().parent.parent
CODING = EXAMPLES / "coding-capsule"


def _validate(capsule: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    return subprocess.run([sys.executable, "-m", "murmurd", "validate", str(capsule), "--no-env-file"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, env={**clean, **env})


def test_the_coding_capsule_validates_with_its_key_and_names_the_missing_key_without_it() -> None:
    ok = _validate(CODING, {"ANTHROPIC_API_KEY": "sk-ant-test"})
    assert ok.returncode == 0, ok.stdout + ok.stderr
    missing = _validate(CODING, {})
    assert missing.returncode == 1 and "ANTHROPIC_API_KEY" in missing.stdout + missing.stderr


def test_the_readme_quick_start_manifest_validates_and_reads_its_key_from_dotenv(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quick start with a real model", 1)[1]
    manifest = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert "name: murmur-driver-anthropic" in manifest and "${ANTHROPIC_API_KEY}" in manifest
    capsule = tmp_path / "my-agent"
    capsule.mkdir()
    (capsule / "murmur.yaml").write_text(manifest)
    assert _validate(capsule, {}).returncode == 1  # no key anywhere
    (capsule / ".env").write_text("ANTHROPIC_API_KEY=sk-ant-from-dotenv\n")
    clean = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    proc = subprocess.run([sys.executable, "-m", "murmurd", "validate", str(capsule)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env=clean)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "sk-ant-from-dotenv" not in proc.stdout + proc.stderr


def _scripted_copy(tmp_path: Path, responses: list[dict]) -> Path:
    """The example with the driver swapped for the scripted one; everything else as shipped."""
    manifest = yaml.safe_load((CODING / "murmur.yaml").read_text())
    manifest["artifacts"][0] = local("scripted-driver", "driver", EXAMPLES / "scripted-driver")
    manifest["capabilities"]["network"]["allow"] = []
    # Under `scoped` python3 reads only its closure and its interpreter_runtime grant: Debian's
    # interpreter (found first on the staging PATH below), its standard library granted.
    stdlib = "/usr/lib/" + os.path.basename(os.path.realpath("/usr/bin/python3"))
    manifest["capabilities"]["shell"]["interpreter_runtime"] = [
        {"binary": "python3", "dirs": [{"path": stdlib, "list_dir": True}]}]
    inference = manifest["inference"]
    inference.update(endpoint="http://127.0.0.1:9", model="scripted", api_key=None,
                     driver={"artifact": "scripted-driver", "config": {"responses": responses}})
    capsule = tmp_path / "coding-capsule"
    capsule.mkdir()
    (capsule / "murmur.yaml").write_text(dump_yaml(manifest))
    (capsule / "system-prompt.md").write_text((CODING / "system-prompt.md").read_text())
    return capsule


@pytest.mark.anyio
async def test_the_coding_capsule_edits_and_checks_with_its_bundled_tools(tmp_path: Path, host, artifacts) -> None:
    artifacts.example("scripted-driver")
    responses = [
        tool_call("c1", "murmur-tool-editor", {"operation": "write_file", "path": "calc.py",
                                                "content": "def add(a, b):\n    return a - b\n"}),
        tool_call("c2", "murmur-tool-editor", {"operation": "replace_in_file", "path": "calc.py",
                                                "old_string": "a - b", "new_string": "a + b"}),
        tool_call("c3", "python3", {"command": "-c \"import calc; print(calc.add(2, 3))\""}),
        end_turn("fixed add"),
    ]
    staged = stage_capsule(_scripted_copy(tmp_path, responses), host=host,
                           registry=FileRegistry(tmp_path / "no-registry"), env={**os.environ, "PATH": "/usr/bin:/bin"})
    assert {a.resolved.origin.split(":")[0] for a in staged.artifacts.values() if a.kind != "driver"} == {"bundled"}
    events = Recorder()
    (outcome,) = await run_session(staged, host, "fix add", events=events)
    assert outcome.ok, outcome.error
    assert [text for _name, text in events.tool_results][:2] == ["32 bytes written", '{"count":1}']
    assert "Exit code: 0\nStdout:\n5\n" in events.tool_results[2][1]  # the patched file, run by the shell


def test_the_readme_quick_start_runs_its_bundled_driver_named_by_name_against_a_stand_in(tmp_path: Path) -> None:
    """The manifest as murmur's tutorials write it: the driver named, no source, resolved to the
    bundled one and built; only the endpoint (and its network grant) point at a loopback stand-in
    of the Messages API, and the key comes from `.env`."""
    from standins import anthropic_standin, anthropic_stream

    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quick start with a real model", 1)[1]
    manifest = yaml.safe_load(section.split("```yaml\n", 1)[1].split("```", 1)[0])
    with anthropic_standin() as api:
        api.replies = [anthropic_stream([{"type": "text", "text": "A component is a portable module."}],
                                        "end_turn", {"input_tokens": 9})]
        manifest["inference"]["endpoint"] = api.url
        manifest["capabilities"]["network"]["allow"] = [api.url.rstrip("/")]
        capsule = tmp_path / "my-agent"
        capsule.mkdir()
        (capsule / "murmur.yaml").write_text(dump_yaml(manifest))
        (capsule / ".env").write_text("ANTHROPIC_API_KEY=sk-ant-from-dotenv\n")
        clean = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
        env = {**clean, "MURMUR_REGISTRY": str(tmp_path / "empty-registry")}
        proc = subprocess.run([sys.executable, "-m", "murmurd", "run", str(capsule), "--task", "What is a component?"],
                              cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "A component is a portable module." in proc.stdout
    assert api.problems == [] and api.requests[0].headers["x-api-key"] == "sk-ant-from-dotenv"
    assert api.requests[0].body["model"] == manifest["inference"]["model"]
