"""The bundled editor is the published murmur-tool-editor 0.2.0 (issue 28, item 2): a capsule
naming it at that version resolves, the model is shown the published schema, and `read_file`,
`write_file`, `replace_in_file` and `find_in_files` answer as published (fields, read cache,
errors, `state_effect`) through a real session; murmurd's earlier `op` form still works."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bundledkit import bundled
from hookkit import Recorder, end_turn, hooked_capsule, run_session, tool_call
from loopkit import stage, trace_events
from murmurd.session.tools import model_tools
from murmurd.staging.bundled import find_bundled

EDITOR = "murmur-tool-editor"
OPERATIONS = ["read_file", "write_file", "replace_in_file", "find_in_files"]
SOURCE = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"


async def _calls(tmp_path: Path, host, inputs: list[Any], *, before: dict[str, str] | None = None
                 ) -> tuple[list[str], list[dict[str, Any]], Path]:
    """One task calling the editor (declared at 0.2.0) once per input: (texts, trace lines, workdir)."""
    responses = [tool_call(f"c{i}", EDITOR, value) for i, value in enumerate(inputs)] + [end_turn()]
    capsule = hooked_capsule(tmp_path, [bundled(EDITOR, version="0.2.0")], responses, inference={"max_turns": 20})
    staged = stage(capsule, host, tmp_path)
    for rel, content in (before or {}).items():
        path = staged.workdir.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    events = Recorder()
    (outcome,) = await run_session(staged, host, "go", events=events)
    assert outcome.ok, outcome.error
    calls = [e for e in trace_events(staged) if e["event_type"] == "tool_call" and e.get("tool_name") == EDITOR]
    assert len(calls) == len(inputs)
    return [text for _n, text in events.tool_results], calls, staged.workdir.root


def test_the_bundled_editor_is_the_published_version_with_its_schema(tmp_path: Path, host) -> None:
    manifest = find_bundled(EDITOR).manifest
    assert (manifest.name, manifest.version, manifest.runtime) == (EDITOR, "0.2.0", "tool")
    staged = stage(hooked_capsule(tmp_path, [bundled(EDITOR, version="0.2.0")], [end_turn()]), host, tmp_path)
    assert staged.artifacts[EDITOR].resolved.version == "0.2.0"
    (spec,) = [s for s in model_tools(staged) if s.name == EDITOR]
    schema = spec.parameters
    assert schema["required"] == ["operation"]
    assert schema["properties"]["operation"]["enum"] == OPERATIONS
    assert set(schema["properties"]) == {"operation", "path", "content", "old_string", "new_string", "pattern",
                                         "dir", "recursive", "start_line", "end_line", "context_lines"}
    assert "op" not in schema["properties"]  # murmurd's earlier form is accepted, never advertised


@pytest.mark.anyio
async def test_the_published_operations_answer_as_published(tmp_path: Path, host) -> None:
    texts, calls, root = await _calls(tmp_path, host, [
        {"operation": "write_file", "path": "src/calc.py", "content": SOURCE},
        {"operation": "read_file", "path": "src/calc.py"},
        {"operation": "read_file", "path": "src/calc.py"},
        {"operation": "read_file", "path": "src/calc.py", "start_line": 5, "end_line": 99},
        {"operation": "replace_in_file", "path": "src/calc.py", "old_string": "a - b", "new_string": "a + b"},
        {"operation": "read_file", "path": "src/calc.py"},
        {"operation": "find_in_files", "pattern": r"def \w+\(", "dir": "src", "context_lines": 1},
        {"operation": "find_in_files", "pattern": "return", "dir": "src", "recursive": False},
        json.dumps({"operation": "read_file", "path": "src/calc.py", "start_line": 1, "end_line": 1}),
    ])
    assert [c["status"] for c in calls] == ["ok"] * 9, texts
    assert [c.get("state_effect") for c in calls] == ["mutate", "read", "read", "read", "mutate", "read", "read",
                                                      "read", "read"]
    assert texts[0] == f"{len(SOURCE)} bytes written"
    first = json.loads(texts[1])
    assert first == {"content": SOURCE, "cache_ref": first["cache_ref"], "total_lines": 6}
    assert first["cache_ref"].startswith("cache_")
    assert json.loads(texts[2]) == {"cache_ref": first["cache_ref"]}  # unchanged: a cache hit, no content
    ranged = json.loads(texts[3])
    assert {k: v for k, v in ranged.items() if k != "cache_ref"} == {
        "content": "def sub(a, b):\n    return a - b", "total_lines": 6, "start_line": 5, "end_line": 6}
    assert json.loads(texts[4]) == {"count": 2}  # every occurrence
    fixed = SOURCE.replace("a - b", "a + b")
    assert (root / "src" / "calc.py").read_text() == fixed
    assert json.loads(texts[5])["content"] == fixed  # changed since the last read: read afresh
    matches = json.loads(texts[6])["matches"]
    assert matches == [
        {"path": "calc.py", "line": 1, "text": "def add(a, b):", "context_before": [],
         "context_after": ["    return a + b"]},
        {"path": "calc.py", "line": 5, "text": "def sub(a, b):", "context_before": [""],
         "context_after": ["    return a + b"]},
    ]
    assert [(m["line"], m["text"]) for m in json.loads(texts[7])["matches"]] == [(2, "    return a + b"),
                                                                                  (6, "    return a + b")]
    assert "context_before" not in json.loads(texts[7])["matches"][0]
    assert json.loads(texts[8])["content"] == "def add(a, b):"  # a double-encoded request


@pytest.mark.anyio
async def test_the_published_errors_change_nothing(tmp_path: Path, host) -> None:
    big = "".join(f"line {n}\n" for n in range(2500))
    texts, calls, root = await _calls(tmp_path, host, [
        {"operation": "read_file", "path": "missing.txt"},
        {"operation": "read_file", "path": "a.txt", "start_line": 0},
        {"operation": "read_file", "path": "a.txt", "start_line": 9},
        {"operation": "read_file", "path": "a.txt", "start_line": 2, "end_line": 1},
        {"operation": "read_file", "path": "big.txt", "start_line": 1, "end_line": 2400},
        {"operation": "replace_in_file", "path": "a.txt", "old_string": "zeta", "new_string": "eta"},
        {"operation": "find_in_files", "pattern": "alpha", "dir": "./"},
        {"operation": "find_in_files", "pattern": "(", "dir": "src"},
        {"operation": "find_in_files", "pattern": "a", "dir": "src", "context_lines": 21},
        {"operation": "write_file", "path": "b.txt"},
        {"operation": "delete_file", "path": "a.txt"},
        {"op": "read", "path": "a.txt"},
    ], before={"a.txt": "alpha\nbeta\n", "big.txt": big, "src/x.py": "a = 1\n"})
    assert [c["status"] for c in calls] == ["error"] * 11 + ["ok"], texts
    assert [c.get("state_effect") for c in calls[:11]] == [None] * 11  # declared on success only
    assert texts[0].startswith("missing.txt: No such file or directory")
    assert texts[1] == "start_line must be >= 1, got 0"
    assert texts[2] == "start_line 9 is beyond end of file (2 lines)"
    assert texts[3] == "inverted range: start_line 2 is greater than end_line 1"
    assert texts[4].startswith("requested range of 2400 lines exceeds the maximum of 2000")
    assert texts[5] == "old_string not found in a.txt"
    assert texts[6].startswith("find_in_files requires a specific subdirectory scope")
    assert texts[7].startswith("invalid regex '('")
    assert texts[8] == "context_lines must be between 0 and 20, got 21"
    assert texts[9] == "missing required field: content"
    assert texts[10] == "unknown operation: delete_file"
    assert texts[11] == "alpha\nbeta\n"  # murmurd's earlier form, answered as before
    assert (root / "a.txt").read_text() == "alpha\nbeta\n" and not (root / "b.txt").exists()


@pytest.mark.anyio
async def test_a_search_over_the_size_limit_is_refused(tmp_path: Path, host) -> None:
    lines = "".join(f"needle {'x' * 200} {n}\n" for n in range(2000))  # ~0.9 MB of matches, counted twice
    texts, calls, _root = await _calls(tmp_path, host, [
        {"operation": "find_in_files", "pattern": "needle", "dir": "data"},
        {"operation": "find_in_files", "pattern": r"x 1999$", "dir": "data"},
    ], before={"data/big.log": lines})
    assert [c["status"] for c in calls] == ["error", "ok"], texts
    assert texts[0].startswith("search result would exceed size limit of 512000 bytes")
    assert json.loads(texts[1])["matches"][0]["line"] == 2000
