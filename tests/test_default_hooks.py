"""murmur's default hooks, bundled by name (issue 28, item 2), each through a real session: the
components built from murmurd/bundled/ and run in wasmtime, the model scripted (the scripted driver)
or a loopback provider stand-in recording what the model was sent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from bundledkit import bundled
from driverkit_session import driver_capsule as provider_capsule, run as run_provider, stage as stage_provider
from hookkit import end_turn, hook_log, hooked_capsule, run_session, tool_call
from loopkit import stage, trace_events
from murmurd.manifest.writing import dump_yaml
from murmurd.staging.bundled import find_bundled
from standins import chat_standin, chat_stream

pytestmark = pytest.mark.anyio

SHELL_DESC = "murmur-hook-shell-desc"


def _edit(capsule: Path, **changes: Any) -> Path:
    """Merge `changes` into the capsule's manifest (lists of artifacts are extended)."""
    path = capsule / "murmur.yaml"
    manifest = yaml.safe_load(path.read_text())
    for key, value in changes.items():
        if key == "artifacts":
            manifest["artifacts"] += value
        elif isinstance(value, dict):
            manifest.setdefault(key, {}).update(value)
        else:
            manifest[key] = value
    path.write_text(dump_yaml(manifest))
    return capsule


# -- murmur-hook-shell-desc --------------------------------------------------------------------


def test_shell_desc_declares_the_published_contract() -> None:
    manifest = find_bundled(SHELL_DESC).manifest
    assert (manifest.version, manifest.binding, manifest.execution_mode, manifest.commit_policy) == (
        "0.2.0", "on-stage", "blocking", "write-manifests")


async def test_shell_desc_manifests_reach_the_models_tool_list(tmp_path: Path, host) -> None:
    with chat_standin() as api:
        api.replies = [chat_stream(text="Nothing to run.")]
        capsule = _edit(provider_capsule(tmp_path, "murmur-driver-openai", api.url, {}),
                        artifacts=[bundled(SHELL_DESC, "hook")],
                        capabilities={"shell": {"allow": ["git", "grep", "printf"]}})
        staged = stage_provider(capsule, host, tmp_path)
        (outcome,), _ = await run_provider(staged, host, "what can you run?")
    assert outcome.exit_status == "ok", outcome.error
    assert api.problems == []
    offered = {t["function"]["name"]: t["function"] for t in api.requests[0].body["tools"]}
    assert "log --oneline" in offered["git"]["description"] and "--no-pager" in offered["git"]["description"]
    assert "--include=" in offered["grep"]["description"]
    assert offered["printf"]["description"].startswith("Run the allowlisted binary `printf`")  # no profile
    assert offered["git"]["parameters"]["required"] == ["command"]  # the runtime's schema, always
    written = yaml.safe_load((staged.workdir.root / "tools" / "git" / "murmur.yaml").read_text())
    assert written["description"] == offered["git"]["description"] and written["runtime"] == "shell"
    assert not [line for line in hook_log(staged.workdir.root, SHELL_DESC) if "refused" in line]


async def test_shell_desc_without_a_profiled_binary_changes_nothing(tmp_path: Path, host) -> None:
    capsule = hooked_capsule(tmp_path, [bundled(SHELL_DESC, "hook")], [end_turn("ok")],
                              capabilities={"shell": {"allow": ["printf"]}})
    staged = stage(capsule, host, tmp_path)
    written = yaml.safe_load((staged.workdir.root / "tools" / "printf" / "murmur.yaml").read_text())
    assert written["version"] == "native" and staged.shell_descriptions == {}
    assert hook_log(staged.workdir.root, SHELL_DESC) == []  # an empty write-manifests is no fault
