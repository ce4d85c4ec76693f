"""Test-runner output parsers shared by murmur-tool-test-report (and, upstream, the
regression-verifier hook): cargo test, pytest, go test and jest console output into
`Failure` records (default-artifacts §2.3). Pure functions of the text."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

FORMATS = ("cargo_test", "pytest", "go_test", "jest")
BULLET = "\u25cf "


@dataclass
class Failure:
    test_name: str
    file: str | None
    line: int | None
    exception: str
    message: str
    stable_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _banner(line: str, word: str) -> bool:
    text = line.strip()
    return "=" in text and text.strip("=").strip() == word


def detect_format(raw: str) -> str | None:
    """The first format whose markers the text carries."""
    if "test result:" in raw and "running " in raw:
        return "cargo_test"
    if ("short test summary info" in raw or "=== test session starts ===" in raw
            or any(_banner(line, "FAILURES") for line in raw.splitlines())):
        return "pytest"
    if "--- FAIL:" in raw or ("panic:" in raw and "goroutine " in raw):
        return "go_test"
    if "Tests:" in raw and ("FAIL " in raw or BULLET in raw):
        return "jest"
    return None


def count_before(text: str, keyword: str) -> int:
    """The integer just before `keyword` (words split on space ; , . and tab), else 0."""
    words = [w for w in re.split(r"[ ;,.\t]", text) if w]
    for before, word in zip(words, words[1:]):
        if word == keyword and before.isdigit():
            return int(before)
    return 0


def file_line(location: str) -> tuple[str, int] | None:
    """`f:l` or `f:l:c` into (f, l)."""
    head, sep, last = location.rpartition(":")
    if not sep or not last.isdigit():
        return None
    head2, sep2, middle = head.rpartition(":")
    if sep2 and middle.isdigit():
        return head2, int(middle)
    return head, int(last)


def _trim_blank_edges(lines: list[str]) -> list[str]:
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


# -- cargo test ----------------------------------------------------------------------------------


def _cargo_header(line: str) -> str | None:
    text = line.strip()
    if text.startswith("---- ") and text.endswith(" stdout ----"):
        return text[len("---- "):-len(" stdout ----")]
    return None


def parse_cargo(raw: str) -> tuple[list[Failure], int]:
    lines = raw.splitlines()
    passed = sum(count_before(line.strip()[len("test result:"):], "passed")
                 for line in lines if line.strip().startswith("test result:"))
    failures: list[Failure] = []
    i = 0
    while i < len(lines):
        name = _cargo_header(lines[i])
        if name is None:
            i += 1
            continue
        file = line_no = None
        message: list[str] = []
        panicked = False
        j = i + 1
        while j < len(lines):
            line, text = lines[j], lines[j].strip()
            if _cargo_header(line) is not None or text == "failures:" or text.startswith("test result:"):
                break
            if not panicked and "panicked at " in line:
                location = line.split("panicked at ", 1)[1].strip().rstrip(":")
                found = file_line(location)
                if found:
                    file, line_no = found
                panicked = True
            elif panicked and not (line.lstrip().startswith("note: run with") and "RUST_BACKTRACE" in line):
                message.append(line)
            j += 1
        failures.append(Failure(name, file, line_no, "panic", "\n".join(_trim_blank_edges(message))))
        i = j
    return failures, passed


# -- pytest ----------------------------------------------------------------------------------------


def _underscore_title(text: str) -> bool:
    return text.startswith("_") and text.endswith("_") and bool(text.strip("_").strip())


def _pytest_footer(text: str) -> tuple[str, int, str] | None:
    left, sep, right = text.partition(": ")
    if not sep:
        return None
    file, sep2, number = left.rpartition(":")
    if not sep2 or not number.isdigit() or not file or not right.strip():
        return None
    return file, int(number), right.strip()


def _pytest_block(title: str, body: list[str]) -> Failure:
    message = [line[1:].lstrip() for line in body if line.startswith("E") and (len(line) == 1 or line[1] in " \t")]
    file = line_no = None
    exception = "Error"
    for line in body:
        footer = _pytest_footer(line.strip())
        if footer:
            file, line_no, exception = footer
    return Failure(f"{file}::{title}" if file else title, file, line_no, exception, "\n".join(message))


def parse_pytest(raw: str) -> tuple[list[Failure], int]:
    lines = raw.splitlines()
    passed = 0
    for line in lines:
        if " passed" in line and (" in " in line or "=" in line):
            passed = count_before(line, "passed")
    start = next((k for k, line in enumerate(lines) if _banner(line, "FAILURES")), None)
    if start is None:
        return [], passed
    failures: list[Failure] = []
    current: tuple[str, list[str]] | None = None
    for line in lines[start + 1:]:
        text = line.strip()
        if text and text.startswith("=") and text.endswith("="):
            break
        if _underscore_title(text):
            if current:
                failures.append(_pytest_block(*current))
            current = (text.strip("_").strip(), [])
        elif current:
            current[1].append(line)
    if current:
        failures.append(_pytest_block(*current))
    return failures, passed


# -- go test ---------------------------------------------------------------------------------------

_GO_STOP = ("--- FAIL:", "--- PASS:", "=== RUN", "=== PAUSE", "=== CONT", "ok ", "FAIL\t")


def _go_location(text: str) -> tuple[str, int, str] | None:
    left, sep, right = text.partition(": ")
    if not sep or ".go:" not in left:
        return None
    file, _, number = left.rpartition(":")
    return (file, int(number), right.strip()) if number.isdigit() else None


def _go_frame(line: str) -> tuple[str, int] | None:
    if not line[:1].isspace():
        return None
    token = line.split()[0] if line.split() else ""
    if ".go:" not in token:
        return None
    file, _, number = token.rpartition(":")
    return (file, int(number)) if number.isdigit() else None


def _go_function(line: str) -> str:
    before = line.strip().split("(", 1)[0]
    return before.rsplit(".", 1)[-1].strip()


_GO_LIBRARY = ("/src/runtime/", "/src/testing/")


def _go_frames(lines: list[str], start: int) -> list[tuple[str, str, int]]:
    """(function, file, line) of a panic's stack frames, up to the end of its trace."""
    frames = []
    for k in range(start, _go_trace_end(lines, start)):
        frame = _go_frame(lines[k])
        if frame and k > 0:
            frames.append((_go_function(lines[k - 1]), frame[0], frame[1]))
    return frames


def _go_trace_end(lines: list[str], start: int) -> int:
    """The line after a panic's trace: the first `FAIL`/`ok`/`---`/`===` line, or the end."""
    for k in range(start, len(lines)):
        if lines[k].startswith(("FAIL", "ok ", "--- ", "=== ", "PASS")):
            return k
    return len(lines)


def parse_go(raw: str) -> tuple[list[Failure], int]:
    lines = raw.splitlines()
    passed = sum(1 for line in lines if line.lstrip().startswith("--- PASS:"))
    failures: list[Failure] = []
    i = 0
    while i < len(lines):
        line, text = lines[i], lines[i].lstrip()
        if text.startswith("--- FAIL: "):
            name = text[len("--- FAIL: "):].split(" (", 1)[0].strip()
            found: tuple[str, int, str] | None = None
            j = i + 1
            while j < len(lines):
                body = lines[j].lstrip()
                if body.startswith(_GO_STOP) or lines[j].startswith("panic:") or body in ("PASS", "FAIL"):
                    break
                found = found or _go_location(body)
                j += 1
            # `go test -v` streams a test's log lines before its `--- FAIL:` line: look back to its `=== RUN`.
            k, streamed = i - 1, None
            while found is None and k >= 0 and not lines[k].lstrip().startswith(("=== RUN", "--- ")):
                streamed = _go_location(lines[k].lstrip()) or streamed  # the earliest one wins
                k -= 1
            found = found or streamed
            if found:
                failures.append(Failure(name, found[0], found[1], "test_failure", found[2]))
            i = j
            continue
        if line.startswith("panic: "):
            frames = _go_frames(lines, i + 1)
            # The first frame outside Go's own runtime and testing packages (upstream takes the
            # very first, `testing.tRunner...` for a recovered panic), else the first.
            chosen = next((f for f in frames if not any(part in f[1] for part in _GO_LIBRARY)), frames[0] if frames else None)
            file, line_no, name = (chosen[1], chosen[2], chosen[0]) if chosen else (None, None, "")
            failures.append(Failure(name, file, line_no, "panic", line[len("panic: "):].strip()))
            i = _go_trace_end(lines, i + 1)
            continue
        i += 1
    return failures, passed


# -- jest ------------------------------------------------------------------------------------------


def _code_frame(text: str) -> bool:
    rest = text.lstrip(">").lstrip()
    digits = len(rest) - len(rest.lstrip("0123456789"))
    return digits > 0 and "|" in rest


def _jest_location(body: list[str], current: str | None) -> tuple[str | None, int | None]:
    first: tuple[str, int] | None = None
    for line in body:
        text = line.strip()
        if not text.startswith("at "):
            continue
        if "(" in text:
            inner = text[text.rfind("(") + 1:].split(")", 1)[0]
        else:
            inner = (text[3:].split() or [""])[0]
        found = file_line(inner)
        if not found:
            continue
        first = first or found
        if current and (found[0] == current or current in found[0] or found[0] in current):
            return found
    return first if first else (None, None)


def _jest_exception(body: list[str]) -> str:
    if "expect(" in "\n".join(body):
        return "AssertionError"
    for line in body:
        head, sep, _ = line.lstrip().partition(": ")
        if sep and head.endswith("Error") and not any(c.isspace() for c in head):
            return head
    return "Error"


def _jest_message(body: list[str]) -> str:
    out = []
    for line in body:
        text = line.strip()
        if not text:
            continue
        if _code_frame(text) or text.startswith("at "):
            break
        out.append(text)
    return "\n".join(out)


def parse_jest(raw: str) -> tuple[list[Failure], int]:
    lines = raw.splitlines()
    passed = 0
    for line in lines:
        if line.lstrip().startswith("Tests:"):
            passed = count_before(line, "passed")
    failures: list[Failure] = []
    current: str | None = None
    i = 0
    while i < len(lines):
        text = lines[i].lstrip()
        if text.startswith(("FAIL ", "PASS ")):
            current = (text[5:].split() or [None])[0]
            i += 1
            continue
        if text.startswith(BULLET):
            title = text[len(BULLET):].strip()
            j = i + 1
            body: list[str] = []
            while j < len(lines):
                if lines[j].lstrip().startswith((BULLET, "FAIL ", "PASS ", "Tests:", "Test Suites:")):
                    break
                body.append(lines[j])
                j += 1
            file, line_no = _jest_location(body, current)
            failures.append(Failure(title, file, line_no, _jest_exception(body), _jest_message(body)))
            i = j
            continue
        i += 1
    return failures, passed


PARSERS = {"cargo_test": parse_cargo, "pytest": parse_pytest, "go_test": parse_go, "jest": parse_jest}
