"""murmur's default hooks, bundled by name (issue 28, item 2), each through a real session: the
components built from murmurd/bundled/ and run in wasmtime, the model scripted (the scripted driver)
or a loopback provider stand-in recording what the model was sent."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from bundledkit import bundled, with_rules
from driverkit_session import driver_capsule as provider_capsule, run as run_provider, stage as stage_provider
from hookkit import Recorder, end_turn, hook_log, hooked_capsule, run_session, tool_call
from loopkit import stage, trace_events
from murmurd.manifest.writing import dump_yaml
from murmurd.staging.bundled import find_bundled
from murmurd.staging.registry import FileRegistry
from murmurd.staging.stage import stage_capsule
from standins import chat_standin, chat_stream
from otlpkit import JsonCollector

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


# -- murmur-hook-diff-summary ------------------------------------------------------------------

DIFF_SUMMARY, EDITOR = "murmur-hook-diff-summary", "murmur-tool-editor"


def _editor_calls(*calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    """One answer making several tool calls."""
    return {"stop_reason": "tool_call", "content": [
        {"type": "tool_call", "id": f"c{i}", "name": name, "input": tool_input}
        for i, (name, tool_input) in enumerate(calls)]}


def _diff_capsule(tmp_path: Path, responses: list[dict[str, Any]]) -> Path:
    return hooked_capsule(tmp_path, [bundled(EDITOR), bundled(DIFF_SUMMARY, "hook",
                                                                capabilities={"filesystem": {"scope": "."}})],
                          responses)


async def test_diff_summary_emits_the_turns_diff_after_editor_calls(tmp_path: Path, host) -> None:
    responses = [
        _editor_calls(("echo", {"text": "first"}), (EDITOR, {"op": "patch", "path": "notes.txt", "old": "beta",
                                                             "new": "BETA"}),
                      (EDITOR, {"op": "write", "path": "./src/new.py", "content": "print(1)\n"}),
                      (EDITOR, {"op": "read", "path": "notes.txt"})),
        _editor_calls((EDITOR, {"op": "patch", "path": "notes.txt", "old": "gamma", "new": "GAMMA"})),
        end_turn("edited"),
    ]
    capsule = with_rules(_diff_capsule(tmp_path, responses), [{"when": "once more", "response": end_turn("no")}])
    staged = stage(capsule, host, tmp_path)
    (staged.workdir.root / "notes.txt").write_text("alpha\nbeta\ngamma\n")
    events = Recorder()
    first, second = await run_session(staged, host, "edit the notes", "once more", events=events)
    assert first.ok and second.ok, (first.error, second.error)
    assert (staged.workdir.root / "notes.txt").read_text() == "alpha\nBETA\nGAMMA\n"
    (name, edited), (_, idle) = events.artifacts
    assert name == DIFF_SUMMARY and edited["session_id"] == staged.session_id
    notes, created = edited["files"]  # first-touch order; the read is no write
    assert notes == {
        "path": "notes.txt", "language": "text",
        "diff": "--- a/notes.txt\n+++ b/notes.txt\n@@ -1,3 +1,3 @@\n alpha\n-beta\n-gamma\n+BETA\n+GAMMA\n",
        "hunks": [{"old_start": 1, "old_count": 3, "new_start": 1, "new_count": 3}],
        "added_lines": 2, "removed_lines": 2, "truncated": False, "total_changed_lines": 4}  # since the first touch
    assert created["path"] == "src/new.py" and created["language"] == "python"
    assert created["diff"].endswith("@@ -0,0 +1 @@\n+print(1)\n") and created["added_lines"] == 1
    assert idle == {"session_id": staged.session_id, "files": []}  # always emitted, snapshots cleared
    assert [e for e in trace_events(staged) if e["event_type"] == "hook_dispatch_error"] == []


def test_diff_summary_finds_the_write_in_every_published_form() -> None:
    import sys

    sys.path.insert(0, str(find_bundled(DIFF_SUMMARY).directory))
    try:
        from editor_writes import write_paths
    finally:
        sys.path.pop(0)
    write = {"operation": "write_file", "path": "./a.rs"}
    assert write_paths(json.dumps([{"type": "tool_call", "name": EDITOR, "input": write}]), None, EDITOR) == ["a.rs"]
    for output in [json.dumps({"type": "tool_use", "input": write}), json.dumps({"data": json.dumps(write)}),
                   json.dumps({"data": write}), json.dumps(json.dumps([write]))]:
        assert write_paths(output, "[]", EDITOR) == ["a.rs"], output
    assert write_paths(json.dumps(write), "[]", "echo") == []  # the first call is not the editor's
    assert write_paths(json.dumps({"operation": "read_file", "path": "a.rs"}), None, EDITOR) == []
    assert write_paths(json.dumps({"operation": "replace_in_file", "path": "b"}), None, EDITOR) == ["b"]


def test_diff_summary_entries_for_binary_large_long_and_deleted_files() -> None:
    import sys

    sys.path.insert(0, str(find_bundled(DIFF_SUMMARY).directory))
    try:
        from diffs import file_entry
    finally:
        sys.path.pop(0)
    assert file_entry("x.bin", b"a\0b", b"a") == {"path": "x.bin", "language": "text", "binary": True}
    assert file_entry("x.txt", b"\xff\xfe", b"a")["binary"] is True
    big = file_entry("Makefile", b"a" * (512 * 1024 + 1), b"b")
    assert (big["language"], big["diff"], big["truncated"], big["total_changed_lines"]) == ("makefile", None, True, None)
    long = file_entry("l.yml", None, "".join(f"{i}\n" for i in range(400)).encode())
    assert (long["language"], long["added_lines"], long["truncated"], long["total_changed_lines"]) == ("yaml", 300, True, 400)
    gone = file_entry("g.go", b"x\ny\n", None)
    assert (gone["removed_lines"], gone["added_lines"], gone["hunks"]) == (
        2, 0, [{"old_start": 1, "old_count": 2, "new_start": 0, "new_count": 0}])
    assert file_entry("n.ts", None, None)["diff"] == "" and file_entry("s.md", b"same", b"same")["hunks"] == []


# -- murmur-hook-regression-verifier -----------------------------------------------------------

VERIFIER = "murmur-hook-regression-verifier"
CALC = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
TESTS = ("from calc import add, sub\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
         "def test_sub():\n    assert sub(5, 3) == 2\n")
# -B: no bytecode cache. A .pyc is invalidated by its source's mtime in whole seconds and its
# size, and the two edits below keep calc.py's size; made within one second, the last run would
# import the previous edit's stale bytecode (and fail as if the fix had not been made).
PYTEST = {"command": "-B -m pytest -p no:cacheprovider test_calc.py"}


def _loaded_library_dir(stem: str) -> str | None:
    """The directory of a shared library this process has mapped (found as the loader found it)."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        path = line.split()[-1]
        if Path(path).name.startswith(f"{stem}.so"):
            return str(Path(path).parent)
    return None


def _contained_pytest() -> tuple[dict[str, Any], dict[str, str]]:
    """The shell grant and host PATH under which `python3` is this interpreter, pytest importable:
    the tests' own pytest really runs in the capsule's contained shell."""
    import sys
    import zlib  # noqa: F401 - maps libz, which the stdlib's binascii needs

    import _pytest

    bindir = Path(sys.executable).parent
    if not (bindir / "python3").exists():
        pytest.skip(f"no python3 beside {sys.executable}")
    dirs = {sys.prefix, str(Path(sys.base_prefix) / "lib"), str(Path(_pytest.__file__).parents[1])}
    libz = _loaded_library_dir("libz")
    if libz is not None:
        dirs.add(libz)
    runtime = [{"binary": "python3", "dirs": [{"path": d, "list_dir": True} for d in sorted(dirs)]}]
    return ({"shell": {"allow": ["python3"], "interpreter_runtime": runtime}},
            {"PATH": f"{bindir}{os.pathsep}/usr/bin{os.pathsep}/bin"})


async def test_regression_verifier_reopens_a_task_whose_edit_broke_a_passing_test(tmp_path: Path, host) -> None:
    responses = [
        tool_call("t0", "python3", PYTEST),  # the baseline: both pass
        tool_call("e1", EDITOR, {"op": "patch", "path": "calc.py", "old": "a - b", "new": "a + b"}),
        tool_call("t1", "python3", PYTEST),  # test_sub fails now
        end_turn("done"),  # -> reopened with the verdict's reason
        tool_call("e2", EDITOR, {"op": "patch", "path": "calc.py", "old": "sub(a, b):\n    return a + b",
                                 "new": "sub(a, b):\n    return a - b"}),
        tool_call("t2", "python3", PYTEST),
        end_turn("fixed"),
    ]
    capabilities, env = _contained_pytest()
    hooks = [bundled(EDITOR), bundled(VERIFIER, "hook", capabilities={"filesystem": {"scope": "."}})]
    capsule = hooked_capsule(tmp_path, hooks, responses, capabilities=capabilities)
    staged = stage_capsule(capsule, host=host, registry=FileRegistry(tmp_path / "no-registry"), env=env)
    (staged.workdir.root / "calc.py").write_text(CALC)
    (staged.workdir.root / "test_calc.py").write_text(TESTS)
    (outcome,) = await run_session(staged, host, "make add faster")
    assert outcome.ok and outcome.result_text == "fixed", outcome.error
    assert (staged.workdir.root / "calc.py").read_text() == CALC
    trace = trace_events(staged)
    runs = [e for e in trace if e["event_type"] == "shell"]
    assert [r["exit_code"] for r in runs] == [0, 1, 0], "pytest did not run in the contained shell"
    (reopened,) = [e for e in trace if e["event_type"] == "task_reopened"]
    assert reopened["hook_name"] == VERIFIER and "test_calc.py::test_sub" in reopened["reason"]
    assert "failed fix" in reopened["reason"]
    feedback = next(m for m in outcome.messages if m.source_id == f"hook:{VERIFIER}")
    assert feedback.role == "user" and "test_calc.py::test_sub" in feedback.text
    first, second = [json.loads(line) for line in (staged.workdir.root / "regression-verifier.jsonl").read_text()
                     .splitlines()]
    command = "python3 " + PYTEST["command"]
    assert first == {
        "record_type": "regression_verdict", "task_id": outcome.task_id, "task_exit_status": "ok",
        "decision": "reopen", "reopen": True, "collection_failure": False,
        "regressions": ["test_calc.py::test_sub"], "newly_passing": [],
        "commands": [{"command": command, "baseline_passed": 2, "current_passed": 1,
                      "regressions": ["test_calc.py::test_sub"], "lost_passing": 1, "collection_failure": False,
                      "newly_passing": []}]}
    assert (second["decision"], second["reopen"], second["regressions"]) == ("clean", False, [])
    assert second["commands"][0]["baseline_passed"] == 2 and second["commands"][0]["current_passed"] == 2


def test_regression_verifier_reads_each_runners_output_and_judges_as_published() -> None:
    import sys

    directory = find_bundled(VERIFIER).directory
    sys.path[:0] = [str(directory), str(directory.parent / "_nativekit")]  # the guest's python_path
    try:
        from testruns import Run, parse_run
        from verdict import Observations, reason
    finally:
        del sys.path[:2]
    cargo = ("running 3 tests\n---- tests::beta stdout ----\nthread 'tests::beta' panicked at src/lib.rs:1:1:\n"
             "boom\n\nfailures:\n    tests::beta\n\ntest result: FAILED. 2 passed; 1 failed; 0 ignored\n")
    assert parse_run(cargo) == Run(2, ("tests::beta",))
    go = ("=== RUN   TestA\n--- PASS: TestA (0.00s)\n=== RUN   TestB\n--- FAIL: TestB (0.00s)\n"
          "    b_test.go:9: want 2, got 3\nFAIL\nFAIL\texample.com/m\t0.01s\n")
    assert parse_run(go) == Run(1, ("TestB",))
    panic = "panic: boom\n\ngoroutine 7 [running]:\nexample.com/m.TestC(0xc0)\n\t/src/c_test.go:12 +0x1d\n"
    assert parse_run(panic) == Run(0, ("TestC",))
    jest = ("FAIL src/a.test.js\n  \u25cf adds\n\n    expect(received).toBe(expected)\n\n"
            "Tests:       1 failed, 4 passed, 5 total\n")
    assert parse_run(jest) == Run(4, ("adds",))
    assert parse_run("3 passed in 0.01s\n") is None  # pytest -q with nothing failing: no format
    seen = Observations()
    seen.shell("pytest", "=== test session starts ===\n=== 644 passed in 1.0s ===", "")
    seen.tool("murmur-tool-create")
    seen.shell("pytest", "=== test session starts ===\nERROR collecting\n=== 1 error in 0.1s ===", "")
    seen.shell("ls -la", cargo, "")  # not a test command
    verdict = seen.verdict()
    assert verdict.reopen and verdict.collection_failure and len(verdict.commands) == 1
    assert "COLLECTION FAILURE" in reason(verdict) and "644 of 644" in reason(verdict)
    later = Observations()
    later.tool("murmur-tool-editor")
    later.shell("go test ./...", go, "")  # first seen after the edit: no baseline, no verdict
    assert later.verdict().commands == [] and not later.verdict().reopen


# -- murmur-hook-grafana -----------------------------------------------------------------------

GRAFANA = "murmur-hook-grafana"




@pytest.fixture
def tempo():
    receiver = JsonCollector()
    yield receiver
    receiver.close()


def _fnv(data: bytes) -> int:
    h = 0xcbf29ce484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001b3) % 2**64
    return h


def _values(span: dict[str, Any]) -> dict[str, Any]:
    return {a["key"]: next(iter(a["value"].items())) for a in span["attributes"]}


def _grafana_capsule(tmp_path: Path, endpoint: str, allow: list[str]) -> Path:
    responses = [tool_call("c1", "echo", {"text": "hi"}), tool_call("c2", "printf", {"command": "'%s' there"}),
                 end_turn("done")]
    return hooked_capsule(tmp_path, [bundled(GRAFANA, "hook", capabilities={"network": {"allow": allow}})],
                          responses, capabilities={"shell": {"allow": ["printf"]}},
                          observability={"otel_endpoint": endpoint})


async def test_grafana_spans_reach_an_otlp_receiver(tmp_path: Path, host, tempo: JsonCollector) -> None:
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    staged = stage(_grafana_capsule(tmp_path, tempo.url + "/", [tempo.url]), host, tmp_path)
    assert staged.artifacts[GRAFANA].resolved.manifest.execution_mode == "async"
    (outcome,) = await run_session(staged, host, "go")
    assert outcome.ok, outcome.error
    assert tempo.arrived.wait(120), hook_log(staged.workdir.root, GRAFANA)
    ((path, body),) = tempo.exports
    assert path == "/v1/traces"
    json_format.Parse(json.dumps(body), ExportTraceServiceRequest())  # valid OTLP/JSON, field by field
    (resource_spans,) = body["resourceSpans"]
    assert {a["key"]: a["value"]["stringValue"] for a in resource_spans["resource"]["attributes"]} == {
        "service.name": "loop-test", "service.version": "0.3.0", "telemetry.sdk.name": GRAFANA}
    (scope,) = resource_spans["scopeSpans"]
    spans = scope["spans"]
    assert [s["name"] for s in spans] == [
        "capsule.session", "capsule.inference", "capsule.tool_call", "capsule.inference", "capsule.tool_call",
        "capsule.shell", "capsule.inference"]
    h1 = _fnv(staged.session_id.encode())
    trace_id = f"{h1:016x}{_fnv(h1.to_bytes(8, 'little')):016x}"
    root, *children = spans
    assert {s["traceId"] for s in spans} == {trace_id} and root["spanId"] == trace_id[:12] + "0000"
    assert "parentSpanId" not in root and {s["parentSpanId"] for s in children} == {root["spanId"]}
    assert [s["spanId"] for s in children] == [f"{trace_id[:12]}{n:04x}" for n in range(1, 7)]
    assert all(s["kind"] == 1 and s["status"] == {"code": 1} for s in spans)
    assert all(int(s["startTimeUnixNano"]) <= int(s["endTimeUnixNano"]) for s in spans)
    assert int(root["startTimeUnixNano"]) <= min(int(s["startTimeUnixNano"]) for s in children)
    session = _values(root)
    assert session["murmur.session_id"] == ("stringValue", staged.session_id)
    assert session["total_turns"] == ("intValue", "3") and session["exit_status"] == ("stringValue", "ok")
    assert session["model"] == ("stringValue", "scripted")
    first, echo = _values(children[0]), _values(children[1])
    assert first["decision"] == ("stringValue", "tool_call") and first["tool_name"] == ("stringValue", "echo")
    assert first["turn"] == ("intValue", "0") and json.loads(first["gen_ai.completion"][1])[0]["name"] == "echo"
    assert echo["tool_name"] == ("stringValue", "echo") and echo["status"] == ("stringValue", "ok")
    assert echo["input_bytes"] == ("stringValue", str(len(b'{"text": "hi"}')))
    shell = _values(children[4])
    assert shell["exit_code"] == ("intValue", "0") and shell["stdout"] == ("stringValue", "there")
    assert "stderr" not in shell
    assert [e for e in trace_events(staged) if e["event_type"] in ("hook_dispatch_error", "egress_denied")] == []


def test_grafana_dates_no_child_span_before_its_session(monkeypatch: pytest.MonkeyPatch) -> None:
    """An inference span is dated back 1 ms from its end; a session younger than that still holds
    it: the child's start is clamped to the root's, never before it, never after its own end."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("grafana_spans", find_bundled(GRAFANA).directory / "spans.py")
    spans = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "grafana_spans", spans)  # its dataclasses look their module up
    spec.loader.exec_module(spans)
    trace = spans.Trace("http://tempo", "c", "1", "s", "m", start_ns=5_000_000)
    trace.add("capsule.inference", 4_500_000, 5_200_000, [], True)
    trace.add("capsule.tool_call", 5_100_000, 5_300_000, [], True)
    trace.add("capsule.shell", 6_000_000, 5_900_000, [], True)
    assert [(s.start_ns, s.end_ns) for s in trace.spans] == [
        (5_000_000, 5_200_000), (5_100_000, 5_300_000), (5_900_000, 5_900_000)]


async def test_grafana_without_its_own_grant_exports_nothing_and_says_why(tmp_path: Path, host, tempo: JsonCollector) -> None:
    staged = stage(_grafana_capsule(tmp_path, tempo.url, []), host, tmp_path)
    (outcome,) = await run_session(staged, host, "go")
    assert outcome.ok, outcome.error
    assert tempo.exports == []
    trace = trace_events(staged)
    assert {(e["hook_name"], e["arm"]) for e in trace if e["event_type"] == "hook_dispatch_error"} == {
        (GRAFANA, "error")}
    assert any("OTLP export" in line and "HTTP-request-denied" in line
               for line in hook_log(staged.workdir.root, GRAFANA))


async def test_grafana_without_an_endpoint_stays_quiet_for_the_session(tmp_path: Path, host) -> None:
    capsule = hooked_capsule(tmp_path, [bundled(GRAFANA, "hook")], [end_turn("done")])
    staged = stage(capsule, host, tmp_path)
    (outcome,) = await run_session(staged, host, "go")
    assert outcome.ok
    assert any("MURMUR_OTEL_ENDPOINT is not set" in line for line in hook_log(staged.workdir.root, GRAFANA))
    assert [e for e in trace_events(staged) if e["event_type"] == "hook_dispatch_error"] == []


# -- all of them, by their published names and versions ----------------------------------------

PUBLISHED = {"murmur-hook-debug": "0.3.0", "murmur-hook-diff-summary": "0.3.0", "murmur-hook-grafana": "0.3.0",
             "murmur-hook-regression-verifier": "0.2.0", "murmur-hook-shell-desc": "0.2.0"}


async def test_a_capsule_naming_the_published_versions_stages_them_bundled(tmp_path: Path, host) -> None:
    entries = [bundled(name, "hook", version=version) for name, version in PUBLISHED.items()]
    staged = stage(hooked_capsule(tmp_path, entries, [end_turn("ok")]), host, tmp_path)
    for name, version in PUBLISHED.items():
        resolved = staged.artifacts[name].resolved
        assert (resolved.version, resolved.origin.startswith("bundled:")) == (version, True), name
    (outcome,) = await run_session(staged, host, "go")
    assert outcome.ok, outcome.error
