"""Capsule manifest validation: one table row per rule, plus collection, warnings and secrecy."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from murmurd.manifest.capsule import CapsuleManifest
from murmurd.manifest.diagnostics import CODES, Diagnostic, Report
from murmurd.manifest.validate import load_capsule, validate_manifest

MINIMAL: dict[str, Any] = {"name": "demo", "version": "0.1.0"}
DELETE = object()
SECRET = "sk-live-9f8e7d6c5b4a-do-not-print"


def merged(fragment: dict[str, Any], base: dict[str, Any] | None = None) -> dict[str, Any]:
    """`fragment` deep-merged onto `base` (MINIMAL); mappings merge, anything else replaces."""
    out = dict(MINIMAL if base is None else base)
    for key, value in fragment.items():
        if value is DELETE:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(value, out[key])
        else:
            out[key] = value
    return out


@pytest.fixture
def manifest_dir(tmp_path: Path) -> Path:
    (tmp_path / "prompt.md").write_text("You are a careful agent.\n", encoding="utf-8")
    return tmp_path


def validate(fragment: dict[str, Any], manifest_dir: Path, env: dict[str, str] | None = None):
    return validate_manifest(with_driver(merged(fragment)), manifest_dir, env or {})


def with_driver(raw: dict[str, Any]) -> dict[str, Any]:
    """An inference block needs a driver (E-INF-010): rows about other inference fields get one."""
    inference = raw.get("inference")
    if isinstance(inference, dict) and not {"driver", "provider", "transport"} & set(inference):
        raw = {**raw, "inference": {**inference, "driver": {"artifact": "drv"}},
               "artifacts": [*raw.get("artifacts", []), _driver("drv")]}
    return raw


def _driver(name: str = "anthropic", runtime: str = "driver") -> dict[str, Any]:
    return {"name": name, "version": "1.0.0", "runtime": runtime}


# (fragment, expected code, field path the diagnostic names)
INVALID: dict[str, tuple[dict[str, Any], str, str]] = {
    # identity
    "missing-name": ({"name": DELETE}, "E-MAN-001", "name"),
    "missing-version": ({"version": DELETE}, "E-MAN-001", "version"),
    "empty-name": ({"name": ""}, "E-MAN-001", "name"),
    "version-read-as-number": ({"version": 1.0}, "E-MAN-009", "version"),
    "artifact-missing-name": ({"artifacts": [{"version": "1.0.0"}]}, "E-MAN-001", "artifacts[0].name"),
    # artifacts
    "unknown-runtime": ({"artifacts": [{"name": "x", "runtime": "magic"}]}, "E-ART-001", "artifacts[0].runtime"),
    "capsule-is-not-an-artifact-runtime": (
        {"artifacts": [{"name": "x", "runtime": "capsule"}]}, "E-ART-001", "artifacts[0].runtime"),
    "duplicate-artifact": (
        {"artifacts": [{"name": "x"}, {"name": "y"}, {"name": "x", "runtime": "hook"}]},
        "E-ART-002", "artifacts[2].name"),
    "skill-with-capabilities": (
        {"artifacts": [{"name": "s", "runtime": "skill", "capabilities": {"env": {"allow": ["HOME"]}}}]},
        "E-ART-003", "artifacts[0].capabilities"),
    "on-overflow-on-tool": (
        {"artifacts": [{"name": "t", "on_overflow": "drop"}]}, "E-ART-004", "artifacts[0].on_overflow"),
    "on-overflow-on-driver": (
        {"artifacts": [{"name": "d", "runtime": "driver", "on_overflow": "block"}]},
        "E-ART-004", "artifacts[0].on_overflow"),
    "artifact-name-climbs-out": (
        {"artifacts": [{"name": "../../../escape"}]}, "E-ART-006", "artifacts[0].name"),
    "artifact-name-is-a-path": ({"artifacts": [{"name": "tools/x"}]}, "E-ART-006", "artifacts[0].name"),
    "artifact-name-dot-dot": ({"artifacts": [{"name": ".."}]}, "E-ART-006", "artifacts[0].name"),
    "artifact-name-hidden": ({"artifacts": [{"name": ".hidden"}]}, "E-ART-006", "artifacts[0].name"),
    "artifact-name-nul": ({"artifacts": [{"name": "a\x00b"}]}, "E-ART-006", "artifacts[0].name"),
    "artifact-name-space": ({"artifacts": [{"name": "two words"}]}, "E-ART-006", "artifacts[0].name"),
    "artifact-name-dot": ({"artifacts": [{"name": "web.fetch"}]}, "E-ART-006", "artifacts[0].name"),
    "artifact-name-too-long": ({"artifacts": [{"name": "x" * 65}]}, "E-ART-006", "artifacts[0].name"),
    "on-overflow-unknown-value": (
        {"artifacts": [{"name": "h", "runtime": "hook", "on_overflow": "spill"}]},
        "E-MAN-007", "artifacts[0].on_overflow"),
    # inference.endpoint
    "endpoint-http-remote": ({"inference": {"endpoint": "http://api.example.com"}}, "E-INF-002", "inference.endpoint"),
    "endpoint-http-private-ip": ({"inference": {"endpoint": "http://10.0.0.7:8080"}}, "E-INF-002", "inference.endpoint"),
    "endpoint-http-localhost-lookalike": (
        {"inference": {"endpoint": "http://localhost.example.com"}}, "E-INF-002", "inference.endpoint"),
    "endpoint-schemeless": ({"inference": {"endpoint": "api.example.com"}}, "E-INF-001", "inference.endpoint"),
    "endpoint-schemeless-host-port": ({"inference": {"endpoint": "localhost:8080"}}, "E-INF-001", "inference.endpoint"),
    "endpoint-other-scheme": ({"inference": {"endpoint": "ftp://api.example.com"}}, "E-INF-003", "inference.endpoint"),
    "endpoint-no-host": ({"inference": {"endpoint": "https://"}}, "E-INF-003", "inference.endpoint"),
    # inference.api_key
    "api-key-unset": ({"inference": {"api_key": "${MURMUR_TEST_UNSET_KEY}"}}, "E-INF-004", "inference.api_key"),
    "api-key-bad-reference": ({"inference": {"api_key": "${lower_case}"}}, "E-INF-005", "inference.api_key"),
    # system prompt sources
    "prompt-inline-and-file": (
        {"inference": {"system_prompt": "hi", "system_prompt_file": "prompt.md"}},
        "E-INF-006", "inference.system_prompt_file"),
    "prompt-inline-and-artifact": (
        {"inference": {"system_prompt": "hi", "system_prompt_artifact": "persona"}},
        "E-INF-006", "inference.system_prompt_artifact"),
    "compaction-prompt-two-sources": (
        {"inference": {"compaction": {"system_prompt": "s", "system_prompt_file": "prompt.md"}}},
        "E-INF-006", "inference.compaction.system_prompt_file"),
    "prompt-file-missing": ({"inference": {"system_prompt_file": "nope.md"}}, "E-INF-007", "inference.system_prompt_file"),
    "prompt-file-is-a-directory": ({"inference": {"system_prompt_file": "."}}, "E-INF-007", "inference.system_prompt_file"),
    "compaction-prompt-file-missing": (
        {"inference": {"compaction": {"system_prompt_file": "nope.md"}}},
        "E-INF-007", "inference.compaction.system_prompt_file"),
    # inference.driver
    "driver-undeclared": ({"inference": {"driver": {"artifact": "anthropic"}}}, "E-INF-008", "inference.driver.artifact"),
    "driver-declared-as-tool": (
        {"artifacts": [_driver(runtime="tool")], "inference": {"driver": {"artifact": "anthropic"}}},
        "E-INF-008", "inference.driver.artifact"),
    "driver-block-without-artifact": ({"inference": {"driver": {"config": {}}}}, "E-MAN-001", "inference.driver.artifact"),
    # compaction threshold and other ranges
    "threshold-zero": ({"inference": {"compaction": {"threshold": 0}}}, "E-INF-009", "inference.compaction.threshold"),
    "threshold-above-one": ({"inference": {"compaction": {"threshold": 1.5}}}, "E-INF-009", "inference.compaction.threshold"),
    "threshold-negative": ({"inference": {"compaction": {"threshold": -0.1}}}, "E-INF-009", "inference.compaction.threshold"),
    "max-turns-zero": ({"inference": {"max_turns": 0}}, "E-MAN-006", "inference.max_turns"),
    "max-task-reopens-negative": ({"inference": {"max_task_reopens": -1}}, "E-MAN-006", "inference.max_task_reopens"),
    "seed-budget-above-one": ({"context": {"max_tokens": 1000, "seed_budget": 1.5}}, "E-MAN-006", "context.seed_budget"),
    "queue-depth-zero": ({"lifecycle": {"queue_depth": 0}}, "E-MAN-006", "lifecycle.queue_depth"),
    "max-concurrent-tasks-zero": ({"lifecycle": {"max_concurrent_tasks": 0}}, "E-MAN-006",
                                  "lifecycle.max_concurrent_tasks"),
    # capabilities.network
    "network-url-with-path": (
        {"capabilities": {"network": {"allow": ["https://api.example.com/v1"]}}},
        "E-CAP-001", "capabilities.network.allow[0]"),
    "network-url-with-query": (
        {"capabilities": {"network": {"allow": ["ok.example.com", "https://api.example.com?x=1"]}}},
        "E-CAP-001", "capabilities.network.allow[1]"),
    "network-fragment": ({"capabilities": {"network": {"allow": ["api.example.com#top"]}}},
                         "E-CAP-001", "capabilities.network.allow[0]"),
    "network-bare-with-path": ({"capabilities": {"network": {"allow": ["api.example.com/v1"]}}},
                               "E-CAP-001", "capabilities.network.allow[0]"),
    "network-other-scheme": ({"capabilities": {"network": {"allow": ["ftp://files.example.com"]}}},
                             "E-CAP-001", "capabilities.network.allow[0]"),
    "network-bad-port": ({"capabilities": {"network": {"allow": ["api.example.com:99999"]}}},
                         "E-CAP-001", "capabilities.network.allow[0]"),
    "network-bad-host": ({"capabilities": {"network": {"allow": ["not a host"]}}},
                         "E-CAP-001", "capabilities.network.allow[0]"),
    "network-per-artifact": (
        {"artifacts": [{"name": "t", "capabilities": {"network": {"allow": ["https://x.example.com/p"]}}}]},
        "E-CAP-001", "artifacts[0].capabilities.network.allow[0]"),
    "internal-port-out-of-range": ({"capabilities": {"network": {"internal_port": 70000}}},
                                   "E-CAP-008", "capabilities.network.internal_port"),
    # capabilities.filesystem
    "scope-absolute": ({"capabilities": {"filesystem": {"scope": "/etc"}}}, "E-CAP-002", "capabilities.filesystem.scope"),
    "scope-home": ({"capabilities": {"filesystem": {"scope": "~/data"}}}, "E-CAP-002", "capabilities.filesystem.scope"),
    "scope-dotdot": ({"capabilities": {"filesystem": {"scope": "data/../../etc"}}},
                     "E-CAP-002", "capabilities.filesystem.scope"),
    "scope-per-artifact": (
        {"artifacts": [{"name": "h", "runtime": "hook", "capabilities": {"filesystem": {"scope": ".."}}}]},
        "E-CAP-002", "artifacts[0].capabilities.filesystem.scope"),
    # capabilities.shell
    "shell-path": ({"capabilities": {"shell": {"allow": ["git", "/usr/bin/python3"]}}},
                   "E-CAP-013", "capabilities.shell.allow[1]"),
    "shell-relative-path": ({"capabilities": {"shell": {"allow": ["./run.sh"]}}}, "E-CAP-013", "capabilities.shell.allow[0]"),
    "shell-with-arguments": ({"capabilities": {"shell": {"allow": ["git status"]}}},
                             "E-CAP-013", "capabilities.shell.allow[0]"),
    "shell-glob": ({"capabilities": {"shell": {"allow": ["py*"]}}}, "E-CAP-013", "capabilities.shell.allow[0]"),
    "shell-empty-allow": ({"capabilities": {"shell": {"allow": []}}}, "E-CAP-014", "capabilities.shell.allow"),
    "shell-block-without-allow": ({"capabilities": {"shell": {"strip_env": ["AWS_*"]}}},
                                  "E-CAP-014", "capabilities.shell.allow"),
    "shell-null-block": ({"capabilities": {"shell": None}}, "E-CAP-014", "capabilities.shell.allow"),
    # capabilities.limits
    "limit-zero": ({"capabilities": {"limits": {"memory_bytes": 0}}}, "E-CAP-007", "capabilities.limits.memory_bytes"),
    "limit-negative": ({"capabilities": {"limits": {"instances": -5}}}, "E-CAP-007", "capabilities.limits.instances"),
    "limit-per-artifact": (
        {"artifacts": [{"name": "t", "capabilities": {"limits": {"deadline_seconds": 0}}}]},
        "E-CAP-007", "artifacts[0].capabilities.limits.deadline_seconds"),
    # enums and types
    "unknown-task-acceptance": ({"lifecycle": {"task_acceptance": "many"}}, "E-MAN-007", "lifecycle.task_acceptance"),
    "unknown-conversation": ({"lifecycle": {"conversation": "forked"}}, "E-MAN-007", "lifecycle.conversation"),
    "unknown-transport": ({"inference": {"transport": "grpc"}}, "E-MAN-007", "inference.transport"),
    "type-int": ({"inference": {"max_turns": "ten"}}, "E-MAN-003", "inference.max_turns"),
    "type-bool-is-not-int": ({"inference": {"max_tokens": True}}, "E-MAN-003", "inference.max_tokens"),
    "type-list": ({"capabilities": {"network": {"allow": "api.example.com"}}}, "E-MAN-003", "capabilities.network.allow"),
    "type-mapping": ({"inference": "claude"}, "E-MAN-003", "inference"),
    "type-artifact-entry": ({"artifacts": ["just-a-name"]}, "E-MAN-003", "artifacts[0]"),
    "type-bool": ({"trace": {"include_tool_output": "yes"}}, "E-MAN-003", "trace.include_tool_output"),
    # network.cors_origins (murmurd extension)
    "cors-wildcard": ({"network": {"cors_origins": ["*"]}}, "E-CAP-011", "network.cors_origins[0]"),
    "cors-with-path": ({"network": {"cors_origins": ["https://ok.example", "https://app.example/console"]}},
                       "E-CAP-011", "network.cors_origins[1]"),
    "cors-no-scheme": ({"network": {"cors_origins": ["localhost:5173"]}}, "E-CAP-011", "network.cors_origins[0]"),
    "cors-bad-port": ({"network": {"cors_origins": ["http://localhost:99999"]}}, "E-CAP-011", "network.cors_origins[0]"),
    "cors-not-a-list": ({"network": {"cors_origins": "http://localhost:5173"}}, "E-MAN-003", "network.cors_origins"),
    # observability
    "otel-not-a-url": ({"observability": {"otel_endpoint": "collector:4318"}}, "E-MAN-008", "observability.otel_endpoint"),
}


@pytest.mark.parametrize(("fragment", "code", "path"), list(INVALID.values()), ids=list(INVALID))
def test_rule(fragment: dict[str, Any], code: str, path: str, manifest_dir: Path) -> None:
    model, report = validate(fragment, manifest_dir)
    assert model is None
    assert not report.ok
    hits = [d for d in report.errors if d.code == code]
    assert hits, f"expected {code}, got:\n{report.to_text()}"
    assert any(d.path == path and path in d.message for d in hits), report.to_text()


def test_every_rule_diagnostic_names_path_value_and_rule(manifest_dir: Path) -> None:
    _, report = validate(INVALID["endpoint-http-remote"][0], manifest_dir)
    (diag,) = report.errors
    assert diag.value == "'http://api.example.com'"
    assert diag.message == (
        "inference.endpoint: plain http:// is allowed only to a loopback host "
        "(localhost, 127.0.0.0/8, ::1); use https:// (got 'http://api.example.com')"
    )


VALID: dict[str, dict[str, Any]] = {
    "minimal": {},
    "https-endpoint": {"inference": {"endpoint": "https://api.anthropic.com"}},
    "http-localhost": {"inference": {"endpoint": "http://localhost:11434"}},
    "http-127-slash-8": {"inference": {"endpoint": "http://127.0.0.2:8080/v1"}},
    "http-ipv6-loopback": {"inference": {"endpoint": "http://[::1]:8080"}},
    "literal-api-key": {"inference": {"api_key": "sk-literal"}},
    "network-forms": {"capabilities": {"network": {"allow": [
        "https://api.example.com", "http://api.example.com:8080", "https://api.example.com/",
        "api.example.com", "api.example.com:443", "10.1.2.3", "[::1]:9000"]}}},
    "shell-bare-names": {"capabilities": {"shell": {"allow": ["git", "python3", "g++", "npm"]}}},
    "scope-relative": {"capabilities": {"filesystem": {"scope": "data/in"}}},
    "reopens-zero": {"inference": {"max_task_reopens": 0}},
    "threshold-one": {"inference": {"compaction": {"threshold": 1}}},
    "declared-driver": {"artifacts": [_driver()], "inference": {"driver": {"artifact": "anthropic"}}},
    "wasm-spelling": {"artifacts": [{"name": "old", "runtime": "wasm"}]},
    "hook-on-overflow": {"artifacts": [{"name": "h", "runtime": "hook", "on_overflow": "block"}]},
    "skill-without-capabilities": {"artifacts": [{"name": "s", "runtime": "skill"}]},
    "artifact-names": {"artifacts": [{"name": n} for n in ("write-file", "web_fetch", "Tool2", "7zip", "x" * 64)]},
    "prompt-file": {"inference": {"system_prompt_file": "prompt.md"}},
    "otel": {"observability": {"otel_endpoint": "http://collector:4318"}},
    "cors-origins": {"network": {"cors_origins": ["http://localhost:5173", "https://ops.example.com",
                                                  "http://[::1]:8080", "http://127.0.0.1:3000"]}},
}


@pytest.mark.parametrize("fragment", list(VALID.values()), ids=list(VALID))
def test_valid(fragment: dict[str, Any], manifest_dir: Path) -> None:
    model, report = validate(fragment, manifest_dir)
    assert report.ok, report.to_text()
    assert isinstance(model, CapsuleManifest)
    assert [w for w in report.warnings if not w.code.startswith("W-SEC-")] == []  # W-SEC: the host's containment


def test_all_errors_are_collected(manifest_dir: Path) -> None:
    raw = merged({
        "version": DELETE,
        "artifacts": [{"name": "t", "runtime": "magic"}, {"name": "t"}],
        "capabilities": {
            "network": {"allow": ["https://x.example.com/path"]},
            "filesystem": {"scope": "/abs"},
            "shell": {"allow": []},
            "limits": {"table_elements": -1},
        },
        "inference": {
            "endpoint": "http://remote.example.com",
            "api_key": "${MURMUR_TEST_UNSET_KEY}",
            "system_prompt_file": "missing.md",
            "driver": {"artifact": "ghost"},
            "compaction": {"threshold": 2},
            "max_turns": "many",
        },
        "lifecycle": {"after_task": "linger"},
    })
    model, report = validate_manifest(raw, manifest_dir, {})
    assert model is None
    assert sorted(report.codes()) == sorted([
        "E-MAN-001", "E-ART-001", "E-ART-002", "E-CAP-001", "E-CAP-002", "E-CAP-014", "E-CAP-007",
        "E-INF-002", "E-INF-004", "E-INF-007", "E-INF-008", "E-INF-009", "E-MAN-003", "E-MAN-007",
    ])
    # A field a rule already reported is not reported again by the type pass.
    paths = [d.path for d in report.diagnostics]
    assert len(paths) == len(set(paths))


def test_unknown_keys_are_warnings_with_their_path(manifest_dir: Path) -> None:
    model, report = validate({
        "descripton": "typo",
        "artifacts": [{"name": "t", "sha": "abc"}, _driver("d")],
        "capabilities": {"netwrk": {}, "limits": {"fuel": 10}},
        "inference": {"temperature": 0.2, "driver": {"artifact": "d", "config": {"anything": 1}}},
        "lifecycle": {"retries": 3},
    }, manifest_dir)
    assert report.ok, report.to_text()  # warnings never stop a capsule
    assert model is not None
    assert all(d.code == "W-MAN-001" and d.severity == "warning" for d in report.warnings)
    assert sorted(d.path for d in report.warnings) == sorted([
        "descripton", "artifacts[0].sha", "capabilities.netwrk", "capabilities.limits.fuel",
        "inference.temperature", "lifecycle.retries",
    ])
    netwrk = next(d for d in report.warnings if d.path == "capabilities.netwrk")
    assert "did you mean 'network'" in netwrk.message
    # driver.config is free-form: its keys are the driver's business, not unknown keys.
    assert model.inference is not None and model.inference.driver is not None
    assert model.inference.driver.config == {"anything": 1}


def test_unknown_keys_are_reported_alongside_errors(manifest_dir: Path) -> None:
    _, report = validate({"name": DELETE, "extra": 1}, manifest_dir)
    assert [d.code for d in report.errors] == ["E-MAN-001"]
    assert [d.path for d in report.warnings] == ["extra"]


def test_credential_shaped_env_allow_is_a_warning(manifest_dir: Path) -> None:
    model, report = validate({"capabilities": {"env": {"allow": ["LANG", "OPENAI_API_KEY"]}}}, manifest_dir)
    assert model is not None
    assert [(d.code, d.path) for d in report.warnings] == [("W-CAP-001", "capabilities.env.allow[1]")]


def test_a_concurrency_bound_without_queue_is_a_warning(manifest_dir: Path) -> None:
    model, report = validate({"lifecycle": {"max_concurrent_tasks": 8}}, manifest_dir)
    assert model is not None and model.lifecycle.max_concurrent_tasks == 8
    assert [(d.code, d.path) for d in report.warnings] == [("W-LIF-001", "lifecycle.max_concurrent_tasks")]
    _, queued = validate({"lifecycle": {"task_acceptance": "queue", "max_concurrent_tasks": 8}}, manifest_dir)
    assert queued.warnings == []


class TestSecret:
    ENV = {"MURMUR_TEST_KEY": SECRET}

    def test_resolved_into_the_model_and_masked(self, manifest_dir: Path) -> None:
        model, report = validate({"inference": {"api_key": "${MURMUR_TEST_KEY}"}}, manifest_dir, self.ENV)
        assert model is not None and model.inference is not None and model.inference.api_key is not None
        assert model.inference.api_key.get_secret_value() == SECRET
        for text in (repr(model), str(model), model.model_dump_json(), repr(model.inference),
                     report.to_text(), report.to_json()):
            assert SECRET not in text

    def test_never_in_a_failing_report(self, manifest_dir: Path) -> None:
        fragment = {"inference": {"api_key": "${MURMUR_TEST_KEY}", "endpoint": "http://remote.example.com",
                                  "max_turns": "x"}, "version": DELETE}
        model, report = validate(fragment, manifest_dir, self.ENV)
        assert model is None and len(report.errors) == 3
        assert SECRET not in report.to_text() and SECRET not in report.to_json()

    @pytest.mark.parametrize("inference", [
        {"api_key": ["sk-literal-in-a-list-do-not-print"]},
        ["api_key", "sk-literal-in-a-list-do-not-print"],
        {"api_key": {"value": "sk-literal-in-a-list-do-not-print"}},
    ])
    def test_literal_key_in_a_malformed_block_is_not_echoed(self, inference: Any, manifest_dir: Path) -> None:
        _, report = validate({"inference": inference}, manifest_dir)
        assert not report.ok
        assert "sk-literal-in-a-list" not in report.to_text()
        assert "sk-literal-in-a-list" not in report.to_json()

    def test_unset_variable_names_the_reference_only(self, manifest_dir: Path) -> None:
        _, report = validate({"inference": {"api_key": "${MURMUR_TEST_UNSET_KEY}"}}, manifest_dir)
        (diag,) = report.errors
        assert diag.value == "'${MURMUR_TEST_UNSET_KEY}'"
        assert "MURMUR_TEST_UNSET_KEY" in diag.message

    def test_empty_variable_counts_as_unset(self, manifest_dir: Path) -> None:
        _, report = validate({"inference": {"api_key": "${MURMUR_TEST_KEY}"}}, manifest_dir, {"MURMUR_TEST_KEY": ""})
        assert report.codes() == ["E-INF-004"]


def test_defaults_are_filled(manifest_dir: Path) -> None:
    model, _ = validate({"inference": {"model": "claude"}, "artifacts": [{"name": "h", "runtime": "hook"}]},
                        manifest_dir)
    assert model is not None and model.inference is not None
    assert model.capabilities.limits.memory_bytes == 512 * 1024 * 1024
    assert model.capabilities.limits.table_elements == 100_000
    assert model.capabilities.limits.instances == 1000
    assert model.capabilities.shell is None
    assert (model.inference.transport, model.inference.max_turns, model.inference.max_tokens) == ("http", 10, 8192)
    assert model.inference.max_task_reopens == 1 and model.inference.max_session_tokens is None
    assert model.inference.compaction.threshold == 0.98
    assert model.inference.compaction.dump_summaries is False
    assert (model.lifecycle.task_acceptance, model.lifecycle.after_task) == ("single", "exit")
    assert (model.lifecycle.queue_depth, model.lifecycle.conversation) == (1, "stateless")
    assert model.lifecycle.input_timeout_secs is None
    assert model.trace.include_tool_output is False
    assert model.context is None
    assert model.artifacts[0].capabilities is None and model.artifacts[0].on_overflow is None
    assert model.deadline_seconds_for() == 600
    assert model.deadline_seconds_for(model.artifacts[0]) == 30


def test_deadline_overrides(manifest_dir: Path) -> None:
    model, _ = validate({
        "capabilities": {"limits": {"deadline_seconds": 120}},
        "artifacts": [{"name": "h", "runtime": "hook", "capabilities": {"limits": {"deadline_seconds": 5}}},
                      {"name": "h2", "runtime": "hook"}, {"name": "t"}],
    }, manifest_dir)
    assert model is not None
    hook, plain_hook, tool = model.artifacts
    assert model.deadline_seconds_for() == 120
    assert model.deadline_seconds_for(hook) == 5
    assert model.deadline_seconds_for(plain_hook) == 30
    assert model.deadline_seconds_for(tool) == 120


def test_prompt_file_is_read_into_the_model(manifest_dir: Path) -> None:
    (manifest_dir / "compact.md").write_text("Summarize.", encoding="utf-8")
    model, _ = validate({"inference": {"system_prompt_file": "prompt.md",
                                       "compaction": {"system_prompt_file": "compact.md"}}}, manifest_dir)
    assert model is not None and model.inference is not None
    assert model.inference.system_prompt == "You are a careful agent.\n"
    assert model.inference.system_prompt_file == "prompt.md"
    assert model.inference.compaction.system_prompt == "Summarize."


class TestLoadCapsule:
    def test_reads_murmur_yaml(self, manifest_dir: Path) -> None:
        (manifest_dir / "murmur.yaml").write_text(
            "name: demo\nversion: '1.0'\nartifacts: [{name: drv, runtime: driver}]\n"
            "inference:\n  system_prompt_file: prompt.md\n  driver: {artifact: drv}\n", encoding="utf-8")
        model, report = load_capsule(manifest_dir, env={})
        assert report.ok and model is not None
        assert report.source == str(manifest_dir / "murmur.yaml")

    def test_missing_file_is_a_diagnostic(self, tmp_path: Path) -> None:
        model, report = load_capsule(tmp_path, env={})
        assert model is None and report.codes() == ["E-IO-001"]

    def test_yaml_error_is_a_diagnostic(self, tmp_path: Path) -> None:
        (tmp_path / "murmur.yaml").write_text("name: demo\nversion: [1.0\n", encoding="utf-8")
        model, report = load_capsule(tmp_path, env={})
        assert model is None and report.codes() == ["E-MAN-002"]
        assert "line" in report.errors[0].message

    @pytest.mark.parametrize("text", ["", "- a\n- b\n", "just a string\n"])
    def test_top_level_must_be_a_mapping(self, tmp_path: Path, text: str) -> None:
        (tmp_path / "murmur.yaml").write_text(text, encoding="utf-8")
        model, report = load_capsule(tmp_path, env={})
        assert model is None and report.codes() == ["E-MAN-003"]

    def test_unquoted_version_gets_a_hint(self, tmp_path: Path) -> None:
        (tmp_path / "murmur.yaml").write_text("name: demo\nversion: 1.10\n", encoding="utf-8")
        _, report = load_capsule(tmp_path, env={})
        assert report.codes() == ["E-MAN-009"]
        assert "quote it" in report.errors[0].message


class TestReport:
    def test_json_and_text(self, manifest_dir: Path) -> None:
        _, report = validate({"version": DELETE, "bogus": 1}, manifest_dir)
        data = json.loads(report.to_json())
        assert data["ok"] is False and data["errors"] == 1 and data["warnings"] == 1
        assert set(data["diagnostics"][0]) == {"code", "severity", "path", "value", "message"}
        text = report.to_text()
        assert text.splitlines()[0].startswith("error E-MAN-001 version:")
        assert text.splitlines()[-1] == "invalid: 1 error, 1 warning"

    def test_ok_report(self) -> None:
        assert Report().ok and Report().to_text() == "ok: 0 errors, 0 warnings"

    def test_codes_must_be_registered(self) -> None:
        with pytest.raises(ValueError):
            Diagnostic("E-NOPE-001", "error", "x", None, "x")
        with pytest.raises(ValueError):
            Diagnostic("W-MAN-001", "error", "x", None, "x")

    def test_code_table_is_consistent(self) -> None:
        for code, info in CODES.items():
            assert code[0] == {"error": "E", "warning": "W"}[info.severity]
            assert info.summary


def test_yaml_the_runtime_writes_has_no_alias_its_reader_would_refuse() -> None:
    from murmurd.manifest.reading import YamlRefused, load_yaml
    from murmurd.manifest.writing import dump_yaml

    shared = {"stop_reason": "end_turn", "content": [{"type": "text", "text": "é"}]}
    data = {"responses": [shared, shared], "again": shared["content"]}
    with pytest.raises(YamlRefused, match=r"holds a YAML alias \(\*id00\d\) at line \d+"):
        load_yaml(yaml.safe_dump(data))  # what PyYAML writes by default
    assert "*" not in dump_yaml(data) and load_yaml(dump_yaml(data)) == data
