"""murmur-tool-code-coverage, bundled (issue 28 item 2), through a real session: a real
coverage.py run per test of a tiny project with one bug (LCOV per test), the project indexed by
murmur-tool-code-graph, then `localize` ranks the buggy function first and writes the scores
onto the graph's symbols; the failures upstream names."""

from __future__ import annotations

import json
import math
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from nativetoolkit import as_json, native_calls

pytestmark = pytest.mark.anyio
COVERAGE, GRAPH = "murmur-tool-code-coverage", "murmur-tool-code-graph"

CALC = '''def _check(x):
    if not isinstance(x, int):
        raise TypeError(x)
    return x


def add(a, b):
    return _check(a) + _check(b)


def sub(a, b):
    return _check(a) + _check(b)


def mul(a, b):
    return _check(a) * _check(b)


def div(a, b):
    return a // b
'''
TESTS = '''from calc import add, mul, sub


def test_add():
    assert add(2, 3) == 5


def test_sub():
    assert sub(3, 2) == 1


def test_mul():
    assert mul(2, 3) == 6
'''
NAMES = ("test_add", "test_sub", "test_mul")


def make_project(workdir: Path) -> None:
    """The project, and one LCOV file per test from a real coverage run (`test_calc::<name>.info`)."""
    project = workdir / "proj"
    (project / "cov").mkdir(parents=True)
    (project / "pyproject.toml").write_text('[project]\nname = "proj"\nversion = "0.1.0"\n')
    (project / "pytest.ini").write_text("[pytest]\n")
    (project / "calc.py").write_text(CALC)
    (project / "test_calc.py").write_text(TESTS)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "COV"))}
    for name in NAMES:
        data = project / f".coverage-{name}"
        run = subprocess.run([sys.executable, "-m", "coverage", "run", f"--data-file={data}", "-m", "pytest", "-q",
                              "-p", "no:cacheprovider", f"test_calc.py::{name}"],
                             cwd=project, capture_output=True, text=True, timeout=300, env=env)
        assert run.returncode == (1 if name == "test_sub" else 0), run.stdout + run.stderr
        report = subprocess.run([sys.executable, "-m", "coverage", "lcov", f"--data-file={data}",
                                 "-o", f"cov/test_calc::{name}.info"], cwd=project, capture_output=True, text=True,
                                timeout=300, env=env)
        assert report.returncode == 0, report.stdout + report.stderr
    (project / "cov" / "broken.info").write_text("not lcov at all\n")


async def test_localize_ranks_the_buggy_function_from_a_real_coverage_run(tmp_path: Path, host) -> None:
    texts, errors, staged = await native_calls(tmp_path, host, COVERAGE, [
        (GRAPH, {"operation": "index_repository", "repo_path": "proj"}),
        {"operation": "localize", "repo_path": "proj", "coverage_dir": "proj/cov",
         "failing_tests": ["test_calc::test_sub", "test_calc::test_div"]},
        {"operation": "localize", "repo_path": "proj", "coverage_dir": "proj/cov",
         "failing_tests": ["test_calc::test_sub"], "limit": 2},
    ], prepare=make_project, also=(GRAPH,))
    assert errors == [False, False, False], texts
    result = json.loads(texts[1])
    assert (result["failing_test_count"], result["passing_test_count"]) == (1, 2)
    assert result["failing_tests_without_coverage"] == ["test_calc::test_div"]
    assert result["skipped_files"] == ["broken.info"]
    top = result["top_suspects"]
    sub, test_sub = "python://proj/calc#sub(a,b)", "python://proj/test_calc#test_sub()"
    assert [s["symbol_id"] for s in top[:2]] == [sub, test_sub]  # ochiai 1.0 each, then by id
    assert (top[0]["ef"], top[0]["ep"], top[0]["suspicion_ochiai"], top[0]["suspicion_tarantula"]) == (1, 0, 1.0, 1.0)
    check = next(s for s in top if s["qualified_name"] == "_check")
    assert (check["ef"], check["ep"]) == (1, 2)
    assert math.isclose(check["suspicion_ochiai"], 1 / math.sqrt(3))
    assert math.isclose(check["suspicion_tarantula"], 1 / (1 + 1))
    add = next(s for s in top if s["qualified_name"] == "add")
    assert (add["ef"], add["suspicion_ochiai"]) == (0, 0.0)
    assert result["failing_test_stable_ids"] == [{"test_name": "test_calc::test_sub", "stable_id": test_sub},
                                                 {"test_name": "test_calc::test_div", "stable_id": None}]
    # The scores are on code-graph's symbols, one SELECT away; an uncovered symbol stays NULL.
    with sqlite3.connect(staged.workdir.root / "proj" / ".murmur" / "code-graph.db") as conn:
        scores = dict(conn.execute("SELECT symbol_id, suspicion_ochiai FROM symbols"))
    assert scores[sub] == 1.0 and math.isclose(scores[check["symbol_id"]], 1 / math.sqrt(3))
    assert {k for k, v in scores.items() if v is None} == {"python://proj/calc#div(a,b)"}  # no test ran it
    limited = as_json(texts[2])
    assert limited["truncated"] is True and len(limited["top_suspects"]) == 2
    full = json.loads(Path(limited["data_path"]).read_text())
    assert len(full["top_suspects"]) == limited["scored_symbols"] == len(top)


async def test_localize_failures_name_what_is_missing(tmp_path: Path, host) -> None:
    def prepare(workdir: Path) -> None:
        (workdir / "proj" / "cov").mkdir(parents=True)
        (workdir / "proj" / "cov" / "test_other.info").write_text("SF:calc.py\nDA:1,1\nend_of_record\n")

    texts, errors, _ = await native_calls(tmp_path, host, COVERAGE, [
        {"operation": "localize", "repo_path": "proj", "coverage_dir": "proj/cov", "failing_tests": ["t"]},
        (GRAPH, {"operation": "index_repository", "repo_path": "proj"}),
        {"operation": "localize", "repo_path": "proj", "coverage_dir": "proj/nope", "failing_tests": ["t"]},
        {"operation": "localize", "repo_path": "proj", "coverage_dir": "proj/cov", "failing_tests": []},
        {"operation": "localize", "repo_path": "proj", "coverage_dir": "proj/cov", "failing_tests": ["t"]},
    ], prepare=prepare, also=(GRAPH,))
    assert errors == [True, False, True, True, True], texts
    assert texts[0].startswith("localize: code graph db not found at ") and "index_repository first" in texts[0]
    assert texts[2] == "localize: coverage_dir is not a directory: proj/nope"
    assert texts[3] == "localize: missing or empty required field 'failing_tests' (array of test names)"
    assert texts[4].startswith("localize: no failing-test coverage found")
