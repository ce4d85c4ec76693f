"""Bundled native tools read what a model names only within bounds (attack review, issue 28):
murmur-tool-test-report's `input_path` is a regular file of at most `MAX_INPUT_BYTES`; a device
the containment grants every process (`/dev/zero`, `/dev/urandom`) or a file past the cap is
refused at once instead of being read into the tool's memory without end."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from nativetoolkit import native_calls

pytestmark = pytest.mark.anyio
REPORT = "murmur-tool-test-report"
CAP = 64 * 1024 * 1024


def big_file(workdir: Path) -> None:
    with open(workdir / "huge.txt", "wb") as handle:  # sparse: no disk, no workdir quota
        handle.truncate(CAP + 1)
    (workdir / "small.txt").write_text("test result: ok. 1 passed; 0 failed; 0 ignored\n")


async def test_a_file_past_the_cap_is_refused_unread(tmp_path: Path, host) -> None:
    texts, errors, _ = await native_calls(tmp_path, host, REPORT, [
        {"operation": "parse", "input_path": "huge.txt"},
        {"operation": "parse", "input_path": "small.txt", "format": "cargo_test"},
    ], prepare=big_file)
    assert errors[0] is True and f"larger than {CAP} bytes" in texts[0], texts
    assert errors[1] is False and json.loads(texts[1])["passed"] == 1, texts


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "fifo"])
async def test_an_endless_device_is_refused_unread(tmp_path: Path, host, device: str) -> None:
    prepare = (lambda workdir: os.mkfifo(workdir / "fifo")) if device == "fifo" else None  # noqa: E731
    texts, errors, _ = await native_calls(tmp_path, host, REPORT, [{"operation": "parse", "input_path": device}],
                                          prepare=prepare)
    assert errors == [True] and "not a regular file" in texts[0], texts


GRAPH = "murmur-tool-code-graph"
SOURCE_CAP = 8 * 1024 * 1024


def odd_sources(workdir: Path) -> None:
    repo = workdir / "repo"
    repo.mkdir()
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    with open(repo / "huge.py", "wb") as handle:  # sparse, past the per-file cap
        handle.truncate(SOURCE_CAP + 1)
    os.mkfifo(repo / "stuck.py")  # would block a read until the tool's deadline
    os.mkfifo(repo / "pyproject.toml")


async def test_code_graph_indexes_regular_sources_within_the_cap_only(tmp_path: Path, host) -> None:
    texts, errors, _ = await native_calls(tmp_path, host, GRAPH, [
        {"operation": "index_repository", "repo_path": "repo"},
    ], prepare=odd_sources)
    assert errors == [False], texts
    stats = json.loads(texts[0])
    assert stats["changed_files"] == 1 and stats["total_symbols"] >= 1, stats


COVERAGE = "murmur-tool-code-coverage"
LCOV_CAP = 64 * 1024 * 1024


def covered_project(workdir: Path) -> None:
    project = workdir / "proj"
    (project / "cov").mkdir(parents=True)
    (project / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (project / "cov" / "test_add.info").write_text("SF:calc.py\nDA:2,1\nend_of_record\n")
    with open(project / "cov" / "huge.info", "wb") as handle:  # sparse, past the cap
        handle.truncate(LCOV_CAP + 1)
    os.symlink("/dev/zero", project / "cov" / "zero.info")


async def test_code_coverage_skips_lcov_files_past_the_cap_unread(tmp_path: Path, host) -> None:
    texts, errors, _ = await native_calls(tmp_path, host, COVERAGE, [
        (GRAPH, {"operation": "index_repository", "repo_path": "proj"}),
        {"operation": "localize", "repo_path": "proj", "coverage_dir": "proj/cov", "failing_tests": ["test_add"]},
    ], prepare=covered_project, also=(GRAPH,))
    assert errors == [False, False], texts
    result = json.loads(texts[1])
    assert result["skipped_files"] == ["huge.info"] and result["failing_test_count"] == 1, result
