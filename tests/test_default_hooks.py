"""murmur's default hooks, bundled by name (issue 28, item 2), each through a real session: the
components built from murmurd/bundled/ and run in wasmtime, the model scripted (the scripted driver)
or a loopback provider stand-in recording what the model was sent."""

from __future__ import annotations

import json
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
