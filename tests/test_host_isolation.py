"""Per-call isolation: environment, stdin, captured output, and the single preopened directory."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from murmurd.host import CallGrant, ComponentHost, ToolInput, ToolStatus


@pytest.fixture(scope="module", params=["in-process", "worker process"])
def host(request: pytest.FixtureRequest, host: ComponentHost, worker_host: ComponentHost) -> ComponentHost:
    """Every test here runs twice: calls in this process, and in a WASM worker process."""
    return host if request.param == "in-process" else worker_host


@pytest.fixture(scope="module")
def probe(host: ComponentHost, artifacts):
    return host.load(artifacts.fixture("probe"))


@pytest.fixture(scope="module")
def reader(host: ComponentHost, artifacts):
    return host.load(artifacts.fixture("read-file"))


def test_the_guest_sees_only_the_variables_the_caller_passes(host, probe, monkeypatch) -> None:
    monkeypatch.setenv("MURMURD_TEST_SECRET", "do-not-leak")
    result = host.call_tool_sync(probe, ToolInput(), grant=CallGrant(env={"ONLY": "this"}))
    report = json.loads(result.data)
    assert report["env"] == {"ONLY": "this"}
    assert "do-not-leak" not in result.data
    assert os.environ["MURMURD_TEST_SECRET"] == "do-not-leak"


def test_stdin_is_empty_and_output_goes_to_the_named_log(host, probe, tmp_path: Path) -> None:
    log = tmp_path / "logs" / "probe.log"
    result = host.call_tool_sync(probe, ToolInput(log_path="logs/probe.log"), grant=CallGrant(log_path=log))
    report = json.loads(result.data)
    assert report["stdin"] == ""
    assert report["log_path"] == "logs/probe.log"
    text = log.read_text()
    assert "probe says hello on stdout" in text
    assert "probe says hello on stderr" in text


def test_without_a_grant_no_directory_is_visible(host, probe) -> None:
    report = json.loads(host.call_tool_sync(probe, ToolInput()).data)
    assert isinstance(report["listing"], str) and "Error" in report["listing"]


def test_the_granted_directory_is_the_guests_dot(host, probe, tmp_path: Path) -> None:
    (tmp_path / "visible.txt").write_text("x")
    report = json.loads(host.call_tool_sync(probe, ToolInput(), grant=CallGrant(preopen=tmp_path)).data)
    assert report["listing"] == ["visible.txt"]


@pytest.mark.parametrize("escape", ["../secret.txt", "{outside}/secret.txt", "/etc/passwd", "sub/../../secret.txt"])
def test_reading_outside_the_preopened_directory_gets_a_wasi_error(host, reader, tmp_path: Path, escape: str) -> None:
    granted = tmp_path / "granted"
    (granted / "sub").mkdir(parents=True)
    (granted / "inside.txt").write_text("inside text")
    (tmp_path / "secret.txt").write_text("TOP SECRET")
    grant = CallGrant(preopen=granted)
    inside = host.call_tool_sync(reader, ToolInput(data="inside.txt"), grant=grant)
    assert inside.status is ToolStatus.PASSED and inside.data == "inside text"
    outside = host.call_tool_sync(reader, ToolInput(data=escape.format(outside=tmp_path)), grant=grant)
    assert outside.status is ToolStatus.ERROR
    assert "Error" in (outside.summary or "")
    assert "TOP SECRET" not in (outside.data or "") + (outside.summary or "")
