"""murmur-tool-code-graph, bundled (issue 28 item 2), through real sessions: indexing murmurd's
own sources (copied into the workdir: the tool's containment reads nothing else) and finding a
symbol's references there; the six operations over a small Rust crate; the input failures."""

from __future__ import annotations

import ast
import json
import re
import shutil
from pathlib import Path

import pytest

from loopkit import trace_events
from nativetoolkit import native_calls

pytestmark = pytest.mark.anyio
GRAPH = "murmur-tool-code-graph"
ROOT = Path(__file__).resolve().parent.parent


def copy_murmurd(workdir: Path) -> None:
    shutil.copytree(ROOT / "murmurd", workdir / "repo" / "murmurd", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", workdir / "repo" / "pyproject.toml")


def python_symbol_id(path: Path, module: str, name: str) -> str:
    """A function's stable id computed with `ast` (not tree-sitter): each parameter's source text
    (annotation and default included) joined with `,`, then `->` and the return annotation."""
    source = path.read_text()
    node = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == name)
    args = node.args.args
    defaults = [None] * (len(args) - len(node.args.defaults)) + list(node.args.defaults)
    text = lambda n: " ".join(ast.get_source_segment(source, n).split())  # noqa: E731
    params = [text(a) + (f" = {text(d)}" if d is not None else "") for a, d in zip(args, defaults)]
    return f"python://murmurd/{module}#{name}({','.join(params)}->{text(node.returns)})"


async def test_the_code_graph_finds_a_symbols_references_in_murmurd_itself(tmp_path: Path, host) -> None:
    target = python_symbol_id(ROOT / "murmurd" / "session" / "native.py", "murmurd.session.native", "call_native")
    start = next(i for i, line in enumerate((ROOT / "murmurd/session/native.py").read_text().splitlines(), 1)
                 if line.startswith("def call_native("))
    texts, errors, staged = await native_calls(tmp_path, host, GRAPH, [
        {"operation": "index_repository", "repo_path": "repo"},
        {"operation": "find_symbol", "repo_path": "repo", "query": "call_native"},
        {"operation": "get_symbol", "repo_path": "repo", "symbol_id": target},
        {"operation": "impact_analysis", "repo_path": "repo", "file": "./murmurd/session/native.py",
         "start_line": start + 1, "end_line": start + 1},
        {"operation": "index_repository", "repo_path": "repo"},
    ], prepare=copy_murmurd)
    assert errors == [False] * 5, texts
    indexed = json.loads(texts[0])
    python_files = [p for p in (ROOT / "murmurd").rglob("*.py") if "__pycache__" not in p.parts]
    assert indexed["changed_files"] == len(python_files) and indexed["unchanged_files"] == 0
    assert indexed["total_symbols"] > 1000 and indexed["total_edges"] > indexed["total_symbols"]
    found = json.loads(texts[1])
    assert found["matches"][0]["symbol_id"] == target and found["matches"][0]["file"] == "murmurd/session/native.py"
    detail = json.loads(texts[2])
    assert (detail["kind"], detail["visibility"], detail["start_line"]) == ("function", "pub", start)
    assert detail["doc_comment"].startswith("One call of the staged capsule's native tool")
    # Its references: every module that calls `call_native(...)` directly, as a grep finds them.
    calling = {".".join(p.relative_to(ROOT).with_suffix("").parts) for p in python_files
               if re.search(r"(?<!def )\bcall_native\(", p.read_text())}
    assert calling and {c.split("#")[0].removeprefix("python://murmurd/") for c in detail["callers"]} == calling
    assert python_symbol_id(ROOT / "murmurd/session/native.py", "murmurd.session.native", "run_native") \
        in detail["callees"]
    impact = json.loads(texts[3])
    assert [r["symbol_id"] for r in impact["roots"]] == [target]
    assert {c["symbol_id"] for c in impact["callers"] if c["depth"] == 1} == set(detail["callers"])
    assert Path(impact["data_path"]).is_file()
    again = json.loads(texts[4])
    assert again["changed_files"] == 0 and again["unchanged_files"] == len(python_files)
    calls = [e for e in trace_events(staged) if e["event_type"] == "tool_call"]
    assert [c["state_effect"] for c in calls] == ["mutate", "read", "read", "read", "read"]
    assert calls[0]["resource_id"] == f"repo:{staged.workdir.root / 'repo'}"


LIB_RS = '''//! A tiny calculator.

/// Adds two numbers.
pub fn add(a: i64, b: i64) -> i64 {
    helper(a) + b
}

fn helper(x: i64) -> i64 {
    x
}

pub struct Calc;

impl Calc {
    pub fn run(&self) -> i64 {
        add(1, 2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds() {
        let sum = add(1, 2); // a call inside a macro's arguments is not one the graph sees
        assert_eq!(sum, 3);
    }
}
'''


def make_crate(workdir: Path) -> None:
    (workdir / "calc" / "src").mkdir(parents=True)
    (workdir / "calc" / "Cargo.toml").write_text('[package]\nname = "calc"\nversion = "0.1.0"\n')
    (workdir / "calc" / "src" / "lib.rs").write_text(LIB_RS)


async def test_the_six_operations_over_a_rust_crate(tmp_path: Path, host) -> None:
    add, helper, run = "rust://calc/#add(i64,i64->i64)", "rust://calc/#helper(i64->i64)", "rust://calc/#Calc::run(&self->i64)"
    adds = "rust://calc/tests#adds()"
    texts, errors, staged = await native_calls(tmp_path, host, GRAPH, [
        {"operation": "index_repository", "repo_path": "calc"},
        {"operation": "get_symbol", "repo_path": "calc", "symbol_id": add},
        {"operation": "slice_symbol", "repo_path": "calc", "symbol_id": run},
        {"operation": "explain_path", "repo_path": "calc", "from": run, "to": helper},
        {"operation": "explain_path", "repo_path": "calc", "from": helper, "to": run},
        {"operation": "impact_analysis", "repo_path": "calc", "file": "src/lib.rs", "start_line": 9, "end_line": 9},
        {"operation": "find_symbol", "repo_path": "calc", "query": "Adds numbers"},
    ], prepare=make_crate)
    assert errors == [False] * 7, texts
    assert json.loads(texts[0])["total_symbols"] == 6  # add, helper, Calc, Calc::run, tests, adds
    detail = json.loads(texts[1])
    assert detail["doc_comment"] == "Adds two numbers." and detail["callees"] == [helper]
    assert detail["callers"] == [run, adds]
    sliced = json.loads(texts[2])
    assert [(n["symbol_id"], n["depth"]) for n in sliced["nodes"]] == [(run, 0), (add, 1), (helper, 2)]
    full = json.loads(Path(sliced["data_path"]).read_text())
    assert {(e["src"], e["dst"]) for e in full["edges"]} == {(run, add), (add, helper)}
    assert json.loads(texts[3]) == {"from": run, "to": helper, "found": True, "depth": 2, "path": [run, add, helper]}
    assert json.loads(texts[4])["found"] is False
    impact = json.loads(texts[5])
    assert [r["symbol_id"] for r in impact["roots"]] == [helper]
    assert [(c["symbol_id"], c["depth"], c["confidence"]) for c in impact["callers"]] == [
        (add, 1, "definite"), (run, 2, "definite"), (adds, 2, "definite")]
    assert [t["symbol_id"] for t in impact["tests"]] == [adds]
    assert {p["symbol_id"] for p in impact["public_apis"]} == {add, run}
    assert json.loads(texts[6])["matches"][0]["symbol_id"] == add


async def test_bad_input_and_unknown_symbols_are_failed_results(tmp_path: Path, host) -> None:
    texts, errors, _ = await native_calls(tmp_path, host, GRAPH, [
        {"operation": "find_symbol", "repo_path": "calc", "query": "add"},
        {"operation": "index_repository", "repo_path": "nowhere"},
        {"operation": "index_repository", "repo_path": "calc"},
        {"operation": "get_symbol", "repo_path": "calc", "symbol_id": "rust://calc/#nope()"},
        {"operation": "impact_analysis", "repo_path": "calc", "file": "src/other.rs", "start_line": 1, "end_line": 2},
        {"operation": "impact_analysis", "repo_path": "calc", "file": "src/lib.rs", "start_line": 5, "end_line": 2},
        {"operation": "slice_symbol", "repo_path": "calc", "symbol_id": "rust://calc/#add(i64,i64->i64)",
         "direction": "sideways"},
        {"operation": "draw_graph"},
    ], prepare=make_crate)
    assert errors == [True, True, False, True, True, True, True, True], texts
    assert texts[0].startswith("find_symbol: no code graph at ") and "run index_repository first" in texts[0]
    assert texts[1] == "index_repository: repo_path is not a directory: nowhere"
    assert texts[3] == "get_symbol: symbol not found: rust://calc/#nope()"
    assert texts[4].startswith("impact_analysis: file not indexed: 'src/other.rs'")
    assert texts[5] == "impact_analysis: end_line (2) must be >= start_line (5)"
    assert texts[6] == "slice_symbol: direction must be 'callees' or 'callers'"
    assert texts[7] == "unknown operation: draw_graph"
