"""A test runner's output as one run: how many passed, which failed (pure).

The formats and their rules are the published `murmur-test-parse` library's, which both
murmur-tool-test-report and this hook use (default-artifacts.md §2.3): the first format
`detect_format` recognizes wins, and each parser counts what that runner reports. The hook needs
only the passed count and the failing tests' names, so that is all these parsers keep.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_INT = re.compile(r"[+-]?\d+")


@dataclass(frozen=True)
class Run:
    passed: int
    failed: tuple[str, ...]  # failing test names, in report order


def _lines(raw: str) -> list[str]:
    """Lines as Rust's `str::lines` gives them: split on `\\n`, one trailing `\\r` dropped."""
    parts = raw.split("\n")
    if parts and parts[-1] == "":
        parts.pop()
    return [p[:-1] if p.endswith("\r") else p for p in parts]


def _int(text: str) -> int | None:
    return int(text) if _INT.fullmatch(text) else None


def count_before(text: str, keyword: str) -> int:
    """The integer just before `keyword`, words split on space, `;`, `,`, `.` and tab (0: none)."""
    words = [w for w in re.split(r"[ ;,.\t]", text) if w]
    for number, word in zip(words, words[1:]):
        if word == keyword and _int(number) is not None:
            return _int(number)  # type: ignore[return-value]
    return 0


def _banner(line: str, word: str) -> bool:
    stripped = line.strip()
    return "=" in stripped and stripped.strip("=").strip() == word


def detect_format(raw: str) -> str | None:
    if "test result:" in raw and "running " in raw:
        return "cargo_test"
    if ("short test summary info" in raw or "=== test session starts ===" in raw
            or any(_banner(line, "FAILURES") for line in _lines(raw))):
        return "pytest"
    if "--- FAIL:" in raw or ("panic:" in raw and "goroutine " in raw):
        return "go_test"
    if "Tests:" in raw and ("FAIL " in raw or "\u25cf " in raw):
        return "jest"
    return None


def parse_cargo(raw: str) -> Run:
    lines = _lines(raw)
    passed = sum(count_before(line.lstrip()[len("test result:"):], "passed")
                 for line in lines if line.lstrip().startswith("test result:"))
    failed = []
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("---- ") and stripped.endswith(" stdout ----") and len(stripped) >= 17:
            failed.append(stripped[len("---- "):-len(" stdout ----")])
    return Run(passed, tuple(failed))


def _footer_file(line: str) -> str | None:
    """`file:line: Exception`, a pytest failure's last traceback line: its file."""
    left, sep, right = line.partition(": ")
    if not sep:
        return None
    file, colon, number = left.rpartition(":")
    if not colon or _int(number) is None or not file or not right.strip():
        return None
    return file


def parse_pytest(raw: str) -> Run:
    lines = _lines(raw)
    passed = 0
    for line in lines:
        if " passed" in line and (" in " in line or "=" in line):
            passed = count_before(line, "passed")
    start = next((i for i, line in enumerate(lines) if _banner(line, "FAILURES")), None)
    if start is None:
        return Run(passed, ())
    blocks: list[tuple[str, str | None]] = []  # (title, file of its last footer)
    for line in lines[start + 1:]:
        stripped = line.strip()
        if stripped and stripped.startswith("=") and stripped.endswith("="):
            break
        if stripped.startswith("_") and stripped.endswith("_") and stripped.strip("_").strip():
            blocks.append((stripped.strip("_").strip(), None))
        elif blocks:
            file = _footer_file(stripped)
            if file is not None:
                blocks[-1] = (blocks[-1][0], file)
    return Run(passed, tuple(f"{file}::{title}" if file else title for title, file in blocks))


_GO_STOPS = ("--- FAIL:", "--- PASS:", "=== RUN", "=== PAUSE", "=== CONT", "ok ", "FAIL\t")


def _go_location(text: str) -> bool:
    left, sep, right = text.partition(": ")
    file, colon, number = left.rpartition(":")
    return bool(sep) and ".go:" in left and bool(colon) and _int(number) is not None


def _go_frame(line: str) -> bool:
    if not line[:1].isspace():
        return False
    token = line.split()[0] if line.split() else ""
    file, colon, number = token.rpartition(":")
    return ".go:" in token and bool(colon) and _int(number) is not None


def parse_go(raw: str) -> Run:
    lines = _lines(raw)
    passed = sum(1 for line in lines if line.lstrip().startswith("--- PASS:"))
    failed: list[str] = []
    i = 0
    while i < len(lines):
        line, stripped = lines[i], lines[i].lstrip()
        if stripped.startswith("--- FAIL: "):
            rest = stripped[len("--- FAIL: "):]
            name = rest.split(" (", 1)[0].strip()
            located = False
            j = i + 1
            while j < len(lines):
                body = lines[j].lstrip()
                if body.startswith(_GO_STOPS) or lines[j].startswith("panic:") or body in ("PASS", "FAIL"):
                    break
                located = located or _go_location(body)
                j += 1
            if located:  # a block with neither location nor message is skipped, as published
                failed.append(name)
            i = j
            continue
        if line.startswith("panic: "):
            name, k = "", i + 1
            while k < len(lines):
                if _go_frame(lines[k]):
                    caller = lines[k - 1].strip().split("(", 1)[0]
                    name = caller.rsplit(".", 1)[-1].strip()
                    break
                k += 1
            failed.append(name)
            i = max(k + 1, i + 1)
            continue
        i += 1
    return Run(passed, tuple(failed))


def parse_jest(raw: str) -> Run:
    lines = _lines(raw)
    passed = 0
    for line in lines:
        if line.lstrip().startswith("Tests:"):
            passed = count_before(line, "passed")
    failed = [line.lstrip()[2:].strip() for line in lines if line.lstrip().startswith("\u25cf ")]
    return Run(passed, tuple(failed))


PARSERS = {"cargo_test": parse_cargo, "pytest": parse_pytest, "go_test": parse_go, "jest": parse_jest}


def parse_run(raw: str) -> Run | None:
    """The run `raw` reports, or None when it is no test runner's output murmur recognizes."""
    found = detect_format(raw)
    return PARSERS[found](raw) if found else None
