"""Manifests read as upstream murmur writes them (issue 12 item 2): defaults, places and warnings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loopkit import capsule_dir, driver_capsule, run_tasks, stage, trace_events
from murmurd.containment.host import probe_host
from murmurd.containment.plan import plan_containment
from murmurd.manifest.checks.unknown import UPSTREAM_UNIMPLEMENTED
from murmurd.manifest.validate import validate_manifest
from murmurd.staging.stage import StagingError

pytestmark = pytest.mark.anyio

DRIVER = {"name": "drv", "runtime": "driver", "source": "drv", "local_source": True}


def check(raw: dict[str, Any], tmp_path: Path):
    return validate_manifest({"name": "up", "version": "0.1.0", **raw}, tmp_path, {})


def codes_at(report) -> list[tuple[str, str]]:
    return [(d.code, d.path) for d in report.diagnostics]


def test_a_skill_source_without_local_source_is_local(tmp_path: Path) -> None:
    model, report = check({"artifacts": [{"name": "notes", "runtime": "skill", "source": "skills/notes"}]}, tmp_path)
    assert report.ok and model is not None
    assert model.artifacts[0].is_local and model.artifacts[0].local_source is None


@pytest.mark.parametrize("runtime", ["tool", "driver", "hook", "wasm"])
def test_a_non_skill_source_without_local_source_is_an_error(tmp_path: Path, runtime: str) -> None:
    model, report = check({"artifacts": [{"name": "t", "runtime": runtime, "source": "t"}]}, tmp_path)
    assert model is None
    (error,) = report.errors
    assert (error.code, error.path) == ("E-ART-007", "artifacts[0].local_source")
    assert f"artifact 't' declares 'source:' but does not declare 'local_source: true' (runtime: {runtime})" \
        in error.message


def test_an_explicit_local_source_false_on_a_skill_wins(tmp_path: Path) -> None:
    _, report = check({"artifacts": [{"name": "n", "runtime": "skill", "source": "n", "local_source": False}]},
                      tmp_path)
    assert codes_at(report) == [("E-ART-007", "artifacts[0].local_source")]


def test_a_skill_without_source_still_comes_from_the_registry(tmp_path: Path) -> None:
    model, _ = check({"artifacts": [{"name": "n", "runtime": "skill"}]}, tmp_path)
    assert model is not None and not model.artifacts[0].is_local


async def test_a_skill_written_as_upstream_writes_it_stages_and_runs(tmp_path: Path, host) -> None:
    skill = tmp_path / "skills" / "tidy"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("# Tidy\nKeep it tidy.\n")
    responses = [
        {"stop_reason": "tool_call", "content": [{"type": "tool_call", "id": "c1", "name": "tidy", "input": {}}]},
        {"stop_reason": "end_turn", "content": [{"type": "text", "text": "tidied"}]},
    ]
    directory = driver_capsule(tmp_path, "scripted-driver", {"responses": responses},
                               extra_artifacts=[{"name": "tidy", "runtime": "skill", "source": str(skill)}])
    staged = stage(directory, host, tmp_path)
    (outcome,) = await run_tasks(staged, host, "tidy")
    assert outcome.exit_status == "ok", outcome.error
    tool = next(m for m in outcome.messages if m.role == "tool")
    assert tool.text == "# Tidy\nKeep it tidy.\n"
    assert not (directory / "murmur.lock").exists()  # a local source is never pinned


def test_the_top_level_network_port_is_read(tmp_path: Path) -> None:
    model, report = check({"network": {"internal_port": 8123}}, tmp_path)
    assert report.ok and model is not None and model.internal_port == 8123
    model, _ = check({"capabilities": {"network": {"internal_port": 8124}}}, tmp_path)
    assert model is not None and model.internal_port == 8124
    model, _ = check({}, tmp_path)
    assert model is not None and model.internal_port is None


@pytest.mark.parametrize(("raw", "code", "path"), [
    ({"network": {"internal_port": 70000}}, "E-CAP-008", "network.internal_port"),
    ({"network": {"internal_port": 8000}, "capabilities": {"network": {"internal_port": 8001}}},
     "E-CAP-009", "network.internal_port"),
    ({"network": {"internal_port": "80"}}, "E-MAN-003", "network.internal_port"),
])
def test_a_bad_top_level_port_is_an_error(tmp_path: Path, raw, code, path) -> None:
    model, report = check(raw, tmp_path)
    assert model is None and (code, path) in codes_at(report)


def test_an_inference_block_without_a_driver_is_a_validate_error(tmp_path: Path) -> None:
    model, report = check({"inference": {"endpoint": "https://api.example.com", "model": "m"}}, tmp_path)
    assert model is None
    assert codes_at(report) == [("E-INF-010", "inference.driver.artifact")]


def test_launch_refuses_it_before_any_workdir_exists(tmp_path: Path, host) -> None:
    directory = capsule_dir(tmp_path, {"name": "nodriver", "version": "1.0.0", "inference": {"model": "m"}})
    with pytest.raises(StagingError) as raised:
        stage(directory, host, tmp_path)
    assert "E-INF-010" in str(raised.value)
    assert not (directory / "workdir").exists()


def test_provider_artifact_is_the_older_spelling_of_driver_artifact(tmp_path: Path) -> None:
    model, report = check({"artifacts": [DRIVER], "inference": {"provider": {"artifact": "drv"}}}, tmp_path)
    assert report.ok, report.to_text()
    assert model is not None and model.inference is not None and model.inference.driver is not None
    assert model.inference.driver.artifact == "drv"
    _, report = check({"artifacts": [DRIVER], "inference": {"provider": {"artifact": "ghost"}}}, tmp_path)
    assert codes_at(report) == [("E-INF-008", "inference.provider.artifact")]
    # driver.artifact wins when both are set
    model, report = check({"artifacts": [DRIVER], "inference": {"driver": {"artifact": "drv"},
                                                                "provider": {"artifact": "ghost"}}}, tmp_path)
    assert report.ok and model is not None and model.inference.driver.artifact == "drv"  # type: ignore[union-attr]


def test_transport_process_takes_a_command_model_and_max_turns(tmp_path: Path) -> None:
    model, report = check({"inference": {"transport": "process", "command": "claude",
                                         "model": "claude-haiku-4-5-20251001", "max_turns": 3}}, tmp_path)
    assert report.ok and codes_at(report) == [("W-INF-001", "inference.transport")], report.to_text()
    grant = report.warnings[0].message  # validate says what the CLI runs with
    assert "spawns 'claude' in the session workdir under the process transport's containment profile" in grant
    if plan_containment(probe_host(), "auto").netns:  # the provider must be named in network.allow to be reached
        assert "only way out is the egress relay" in grant
        assert "its configured provider https://api.anthropic.com is not in network.allow" in grant
    _, report = check({"inference": {"transport": "process", "command": "claude"},
                       "capabilities": {"network": {"allow": ["https://api.anthropic.com"]}}}, tmp_path)
    granted = report.warnings[0].message
    assert "not in network.allow" not in granted
    assert "provider origin(s) https://api.anthropic.com (capabilities.network.allow)" in granted or "not confined" in granted
    assert grant.endswith("over MCP it reaches: <no tools>")
    assert model is not None and model.inference is not None
    assert (model.inference.transport, model.inference.command, model.inference.model, model.inference.max_turns) == \
        ("process", "claude", "claude-haiku-4-5-20251001", 3)


def test_transport_process_refuses_the_http_fields_each_by_name(tmp_path: Path) -> None:
    inference = {"transport": "process", "command": "codex", "driver": {"artifact": "drv"},
                 "endpoint": "https://api.example.com", "api_key": "sk-live-secret", "max_tokens": 100}
    model, report = check({"artifacts": [DRIVER], "inference": inference}, tmp_path)
    assert model is None
    assert [(d.code, d.path) for d in report.errors] == [
        ("E-INF-011", "inference.driver.artifact"), ("E-INF-011", "inference.endpoint"),
                                ("E-INF-011", "inference.api_key"), ("E-INF-011", "inference.max_tokens")]
    assert all("is not valid with transport: process" in d.message for d in report.errors)
    assert "sk-live-secret" not in report.to_text()
    # blank endpoint and api_key are no error (upstream: "a non-blank" one is)
    _, blank = check({"inference": {"transport": "process", "command": "claude", "endpoint": " ", "api_key": ""}},
                     tmp_path)
    assert blank.ok, blank.to_text()
    _, tooled = check({"artifacts": [{"name": "echo", "runtime": "tool", "source": "echo", "local_source": True}],
                       "capabilities": {"shell": {"allow": ["rm"]}},
                       "inference": {"transport": "process", "command": "claude"}}, tmp_path)
    assert tooled.warnings[-1].message.endswith("over MCP it reaches: echo, rm")


def test_transport_process_needs_a_command_and_a_known_transport(tmp_path: Path) -> None:
    model, report = check({"inference": {"transport": "process"}}, tmp_path)
    assert model is None and [(d.code, d.path) for d in report.errors] == [("E-MAN-001", "inference.command")]
    model, report = check({"inference": {"transport": "grpc", "driver": {"artifact": "drv"}}, "artifacts": [DRIVER]},
                          tmp_path)
    assert model is None and [d.path for d in report.errors] == ["inference.transport"]


@pytest.mark.parametrize(("floor", "env"), [("sealed", {"MURMURD_SHELL_CONFINEMENT": "none"}),
                                           ("scoped", {"MURMURD_SHELL_CONFINEMENT": "none"})])
def test_a_containment_floor_murmurd_cannot_meet_is_refused(tmp_path: Path, floor: str, env: dict) -> None:
    model, report = validate_manifest({"name": "up", "version": "0.1.0", "capabilities": {"containment": floor}},
                                      tmp_path, env)
    assert model is None and codes_at(report) == [("E-CAP-003", "capabilities.containment")]


def test_an_advisory_floor_is_met(tmp_path: Path) -> None:
    model, report = check({"capabilities": {"containment": "advisory"}}, tmp_path)
    assert report.ok and not report.diagnostics and model is not None


@pytest.mark.parametrize(("entry", "ok"), [
    ({"name": "persona", "runtime": "skill", "source": "p"}, True),
    ({"name": "persona", "runtime": "skill", "source": "p", "prompt_payload": False}, False),
    ({"name": "persona", "runtime": "tool", "source": "p", "local_source": True}, False),
    ({"name": "persona", "runtime": "tool", "source": "p", "local_source": True, "prompt_payload": True}, True),
])
def test_prompt_payload_gates_system_prompt_artifact(tmp_path: Path, entry, ok) -> None:
    _, report = check({"artifacts": [DRIVER, entry],
                       "inference": {"driver": {"artifact": "drv"}, "system_prompt_artifact": "persona"}}, tmp_path)
    assert report.ok is ok
    if not ok:
        assert codes_at(report) == [("E-INF-012", "inference.system_prompt_artifact")]


UPSTREAM_FIELDS = {
    "mur_version": {"mur_version": "0.2.0"},
    "artifacts[0].capabilities.resources": {"artifacts": [
        {"name": "t", "source": "t", "local_source": True, "capabilities": {"resources": {"cpu_seconds": 5}}}]},
    "capabilities.spawn": {"capabilities": {"spawn": {"allow": ["node"]}}},
    "capabilities.shell.staged_runtime": {"capabilities": {"shell": {
        "allow": ["node"], "staged_runtime": [{"binary": "node", "source_path": "/opt/node", "pin": "v1"}]}}},
    "artifacts[0].capabilities.containment": {"artifacts": [
        {"name": "t", "source": "t", "local_source": True, "capabilities": {"containment": "scoped"}}]},
}


@pytest.mark.parametrize("path", list(UPSTREAM_FIELDS))
def test_every_upstream_field_murmurd_ignores_is_a_named_warning(tmp_path: Path, path: str) -> None:
    model, report = check(UPSTREAM_FIELDS[path], tmp_path)
    assert report.ok and model is not None, report.to_text()
    (warned,) = [d for d in report.warnings if not d.code.startswith("W-SEC-")]  # W-SEC: shell containment
    assert (warned.code, warned.path) == ("W-MAN-002", path) and "murmurd ignores it" in warned.message


def test_the_warning_table_names_what_each_field_does(tmp_path: Path) -> None:
    assert all(meaning and not meaning.endswith(".") for meaning in UPSTREAM_UNIMPLEMENTED.values())


async def test_warnings_are_repeated_at_launch_and_in_the_bootstrap_log(tmp_path: Path, host) -> None:
    directory = driver_capsule(tmp_path, "scripted-driver", {"responses": []}, mur_version="0.2.0")
    said: list[str] = []
    from murmurd.staging.registry import FileRegistry
    from murmurd.staging.stage import stage_capsule
    staged = stage_capsule(directory, host=host, registry=FileRegistry(tmp_path / "r"), progress=said.append)
    assert any("W-MAN-002" in line and "mur_version" in line for line in said)
    log = (staged.workdir.root / "logs" / "bootstrap.log").read_text()
    assert "warning W-MAN-002 mur_version:" in log


def test_the_rlimit_resources_are_read_and_not_warned(tmp_path: Path) -> None:
    resources = {"max_open_files": 64, "max_file_size_bytes": 4096, "cpu_seconds": 5, "memory_bytes": 1 << 30,
                 "max_processes": 64, "cgroup_pids_max": 64, "cgroup_memory_bytes": 1 << 30, "cgroup_cpu_percent": 50,
                 "cgroup_io_bytes_per_sec": 1 << 20, "workdir_max_bytes": 1 << 30}
    model, report = check({"capabilities": {"resources": resources}}, tmp_path)
    assert report.ok and not report.diagnostics and model is not None
    assert model.capabilities.resources is not None and model.capabilities.resources.cpu_seconds == 5


@pytest.mark.parametrize("value", [0, -1])
def test_a_resource_limit_of_zero_is_an_error(tmp_path: Path, value: int) -> None:
    model, report = check({"capabilities": {"resources": {"cpu_seconds": value}}}, tmp_path)
    assert model is None and ("E-MAN-006", "capabilities.resources.cpu_seconds") in codes_at(report)


async def test_shell_children_run_under_the_declared_limits(tmp_path: Path, host) -> None:
    responses = [
        {"stop_reason": "tool_call", "content": [
            {"type": "tool_call", "id": "c1", "name": "sh", "input": {"command": "ulimit -n; ulimit -t; ulimit -c"}}]},
        {"stop_reason": "tool_call", "content": [
            {"type": "tool_call", "id": "c2", "name": "sh", "input": {"command": "while :; do :; done"}}]},
        {"stop_reason": "tool_call", "content": [
            {"type": "tool_call", "id": "c3", "name": "dd", "input": {"command": "if=/dev/zero of=big bs=1000 count=8"}}]},
        {"stop_reason": "end_turn", "content": [{"type": "text", "text": "done"}]},
    ]
    directory = driver_capsule(tmp_path, "scripted-driver", {"responses": responses}, capabilities={
        "shell": {"allow": ["sh", "dd"]},
        "resources": {"max_open_files": 64, "cpu_seconds": 1, "max_file_size_bytes": 4096}})
    staged = stage(directory, host, tmp_path)
    (outcome,) = await run_tasks(staged, host, "limits")
    tools = [m.text for m in outcome.messages if m.role == "tool"]
    assert "64\n1\n0\n" in tools[0]
    shells = [e for e in trace_events(staged) if e["event_type"] == "shell"]
    assert "resource_limit" not in shells[0]
    assert shells[1]["resource_limit"] == "cpu_seconds" and shells[1]["exit_code"] == 128 + 24
    assert shells[2]["resource_limit"] == "max_file_size_bytes"
    assert (staged.workdir.root / "big").stat().st_size <= 4096


def test_a_version_on_a_local_source_is_a_warning(tmp_path: Path) -> None:
    model, report = check({"artifacts": [{"name": "n", "runtime": "skill", "source": "n", "version": "1.2.0"}]},
                          tmp_path)
    assert report.ok and model is not None
    assert codes_at(report) == [("W-ART-001", "artifacts[0].version")]
    _, report = check({"artifacts": [{"name": "n", "runtime": "skill", "version": "1.2.0"}]}, tmp_path)
    assert codes_at(report) == []  # a registry artifact's version is its pin
