"""A test runner's output as one run: how many passed, which failed (pure).

The formats and their rules are the published `murmur-test-parse` library's, which both
murmur-tool-test-report and this hook use (default-artifacts.md §2.3). Here too they are one
library: `nativekit.testparse`, built into this guest from `_nativekit` (`python_path`). The hook
needs only the passed count and the failing tests' names, so that is all a `Run` keeps.
"""

from __future__ import annotations

from dataclasses import dataclass

from nativekit.testparse import detect_format, parse_cargo, parse_go, parse_jest, parse_pytest

PARSERS = {"cargo_test": parse_cargo, "pytest": parse_pytest, "go_test": parse_go, "jest": parse_jest}


@dataclass(frozen=True)
class Run:
    passed: int
    failed: tuple[str, ...]  # failing test names, in report order


def parse_run(raw: str) -> Run | None:
    """The run `raw` reports, or None when no runner's format is recognized."""
    fmt = detect_format(raw)
    if fmt is None:
        return None
    failures, passed = PARSERS[fmt](raw)
    return Run(passed, tuple(failure.test_name for failure in failures))
