"""Helpers for `murmurd trace` / `murmurd eval` tests: run the CLI, lay out workdirs, golden files."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import time
from pathlib import Path

from conftest import FIXTURES
from murmurd import cli

TRACES = FIXTURES / "traces"
GOLDEN = Path(__file__).resolve().parent / "golden"


def murmurd(capsys, *args: str) -> tuple[int, str, str]:
    """`murmurd ARGS` in this process (the real CLI code); (exit code, stdout, stderr)."""
    capsys.readouterr()
    code = cli.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def golden(name: str, text: str) -> None:
    """`text` equals tests/golden/<name>; MURMUR_UPDATE_GOLDEN=1 rewrites the file instead."""
    path = GOLDEN / name
    if os.environ.get("MURMUR_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no golden file {path}; run with MURMUR_UPDATE_GOLDEN=1 once and review it"
    assert text == path.read_text(), f"output differs from {path}"


def v7_id(ms: int, prefix: str = "ses_") -> str:
    """A UUIDv7 id whose timestamp is `ms` (as murmurd.ids mints them)."""
    value = (ms << 80) | (0x7 << 76) | (secrets.randbits(12) << 64) | (0b10 << 62) | secrets.randbits(62)
    return f"{prefix}{value:032x}"


def place(workdir: Path, session_id: str, trace: Path | str | None) -> Path:
    """A session directory `workdir/session_id` holding `trace` (a fixture path, or text)."""
    directory = workdir / session_id
    directory.mkdir(parents=True)
    if isinstance(trace, Path):
        shutil.copyfile(trace, directory / "trace.jsonl")
    elif trace is not None:
        (directory / "trace.jsonl").write_text(trace)
    return directory


def now_ms() -> int:
    return int(time.time() * 1000)


DURATION = re.compile(r"(?<![\w.])[0-9][0-9.,]*(?:ms|s)\b|[0-9]+m[0-9.]+s")


def steady(text: str, *session_ids: str) -> str:
    """Output of a real run with what varies between runs (ids, durations) replaced, and runs of
    spaces (column padding, which follows the durations' widths) cut to two."""
    for i, session_id in enumerate(session_ids):
        text = text.replace(session_id, f"<session-{i}>")
    for i, session_id in enumerate(session_ids):
        text = text.replace(session_id[:12], f"<ses-{i}>")
    return re.sub(r"(?<=\S) {2,}", "  ", DURATION.sub("<dur>", text))
