"""murmur-tool-test-report, bundled (issue 28 item 2), through real sessions: real pytest output
produced here (a tiny failing test file run by pytest), and cargo test, go test and jest console
texts, parsed into one report each; the input errors upstream names."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nativetoolkit import as_json, native_calls

pytestmark = pytest.mark.anyio
REPORT = "murmur-tool-test-report"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "test-report"

TINY_TESTS = '''
def double(x):
    return x * 3


def test_double_of_two():
    assert double(2) == 4


def test_double_of_zero():
    assert double(0) == 0


def test_parse_number():
    int("four")


def test_truth():
    assert True
'''


def run_real_pytest(tmp_path: Path) -> str:
    """pytest's own console output for a tiny test file with two failures."""
    project = tmp_path / "tiny"
    project.mkdir()
    (project / "test_tiny.py").write_text(TINY_TESTS)
    (project / "pytest.ini").write_text("[pytest]\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rf", "test_tiny.py"],
                          cwd=project, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    return proc.stdout


async def test_real_pytest_output_is_parsed_into_one_report(tmp_path: Path, host) -> None:
    output = run_real_pytest(tmp_path)

    def prepare(workdir: Path) -> None:
        (workdir / "reports").mkdir()
        (workdir / "reports" / "pytest.txt").write_text(output)

    texts, errors, staged = await native_calls(tmp_path, host, REPORT, [
        {"operation": "parse", "input_path": "reports/pytest.txt"},
        {"operation": "parse", "input_path": "reports/pytest.txt", "format": "jest"},
    ], prepare=prepare)
    assert errors == [True, False]  # failures make the result `failed`, though the parse succeeded
    summary, _ = texts[0].split("\n", 1)
    assert summary == "2 passed, 2 failed"
    report = as_json(texts[0])
    assert report["format_used"] == "pytest" and report["total"] == 4 and report["passed"] == 2
    assert report["failed"] == 2 and report["truncated"] is False and report["data_path"] is None
    by_name = {f["test_name"]: f for f in report["failures"]}
    assert set(by_name) == {"test_tiny.py::test_double_of_two", "test_tiny.py::test_parse_number"}
    double = by_name["test_tiny.py::test_double_of_two"]
    assert double["file"] == "test_tiny.py" and double["line"] == 7 and double["exception"] == "AssertionError"
    assert "assert 6 == 4" in double["message"] and double["stable_id"] is None
    parse = by_name["test_tiny.py::test_parse_number"]
    assert parse["exception"] == "ValueError" and parse["line"] == 15
    assert "invalid literal for int() with base 10: 'four'" in parse["message"]
    # An explicit format is taken at its word: pytest's text holds no jest failures.
    assert json.loads(texts[1])["format_used"] == "jest" and json.loads(texts[1])["failed"] == 0
    calls = [e for e in __import__("loopkit").trace_events(staged) if e["event_type"] == "tool_call"]
    assert calls[0]["state_effect"] == "read" and calls[0]["resource_id"] == "reports/pytest.txt"


async def test_cargo_go_and_jest_output_each_become_a_report(tmp_path: Path, host) -> None:
    def prepare(workdir: Path) -> None:
        (workdir / "runs").mkdir()
        for fixture in FIXTURES.iterdir():
            (workdir / "runs" / fixture.name).write_text(fixture.read_text())

    texts, errors, _ = await native_calls(tmp_path, host, REPORT, [
        {"operation": "parse", "input_path": "runs/cargo_test.txt"},
        {"operation": "parse", "input_path": "runs/go_test.txt", "format": "auto"},
        {"operation": "parse", "input_path": "runs/jest.txt"},
    ], prepare=prepare)
    assert errors == [True, True, True]
    cargo, go, jest = (as_json(t) for t in texts)
    assert (cargo["format_used"], cargo["passed"], cargo["failed"], cargo["total"]) == ("cargo_test", 3, 2, 5)
    assert cargo["failures"] == [
        {"test_name": "tests::subtracts", "file": "src/lib.rs", "line": 27, "exception": "panic",
         "message": "assertion `left == right` failed\n  left: 5\n right: 1", "stable_id": None},
        {"test_name": "tests::divides", "file": "src/lib.rs", "line": 32, "exception": "panic",
         "message": "attempt to divide by zero", "stable_id": None}]
    assert (go["format_used"], go["passed"], go["failed"]) == ("go_test", 2, 2)
    assert go["failures"][0] == {"test_name": "TestSub", "file": "calc_test.go", "line": 14,
                                 "exception": "test_failure", "message": "Sub(3, 2) = 5, want 1", "stable_id": None}
    panic = go["failures"][1]
    assert panic["exception"] == "panic" and panic["message"].startswith("runtime error: integer divide by zero")
    assert (panic["file"], panic["line"], panic["test_name"]) == ("/work/calc/calc.go", 18, "Div")  # past the testing frames
    assert (jest["format_used"], jest["passed"], jest["failed"], jest["total"]) == ("jest", 5, 2, 7)
    sub, parse = jest["failures"]
    assert sub["test_name"] == "calc › subtracts two numbers" and sub["exception"] == "AssertionError"
    assert (sub["file"], sub["line"]) == ("src/calc.test.js", 13)
    assert sub["message"].splitlines() == ["expect(received).toBe(expected) // Object.is equality",
                                           "Expected: 1", "Received: 5"]
    assert parse["exception"] == "TypeError" and (parse["file"], parse["line"]) == ("src/calc.test.js", 18)


async def test_input_errors_are_failed_results_that_name_the_problem(tmp_path: Path, host) -> None:
    def prepare(workdir: Path) -> None:
        (workdir / "plain.txt").write_text("nothing a test runner wrote\n")
        many = "".join(f"---- t{i} stdout ----\nthread 't{i}' panicked at src/lib.rs:{i + 1}:1:\nboom {i}\n"
                       for i in range(60))
        (workdir / "many.txt").write_text(f"running 60 tests\n{many}\ntest result: FAILED. 0 passed; 60 failed\n")

    texts, errors, staged = await native_calls(tmp_path, host, REPORT, [
        {"operation": "parse", "input_path": "missing.txt"},
        {"operation": "parse", "input_path": "plain.txt"},
        {"operation": "parse", "input_path": "plain.txt", "format": "nunit"},
        {"operation": "parse"},
        {"operation": "summarize", "input_path": "plain.txt"},
        {"operation": "parse", "input_path": "many.txt"},
    ], prepare=prepare)
    assert errors == [True] * 6
    assert texts[0].startswith("could not read input_path 'missing.txt': No such file or directory")
    assert texts[1] == ("could not auto-detect test format from input; pass 'format' explicitly as one of: "
                        "cargo_test, pytest, go_test, jest")
    assert texts[2] == "unknown format 'nunit'; expected one of: auto, cargo_test, pytest, go_test, jest"
    assert texts[3] == "missing required field 'input_path'"
    assert texts[4] == "unknown operation: summarize"
    many = as_json(texts[5])
    assert many["failed"] == 60 and many["truncated"] is True and len(many["failures"]) == 50
    full = json.loads((staged.workdir.root / "many.failures.json").read_text())
    assert many["data_path"] == "many.failures.json" and len(full["failures"]) == 60
