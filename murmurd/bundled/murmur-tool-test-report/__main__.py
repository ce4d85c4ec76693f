"""murmur-tool-test-report 0.1.0 (native): parses captured cargo test, pytest, go test or jest
output into one structured report (default-artifacts §2.2, §2.3, §5.7). It never runs tests."""

from __future__ import annotations

import json
import os
import stat
from typing import Any

from nativekit.graphdb import read_only_stable_ids
from nativekit.protocol import Result, ToolFailure, main, result, text_field
from nativekit.testparse import FORMATS, PARSERS, detect_format

INLINE_CAP = 50
MAX_INPUT_BYTES = 64 * 1024 * 1024  # a captured test run's output; past it the file is refused unread


def _read_input(input_path: str) -> str:
    """The captured output: a regular file (never a device the containment lets every process
    read, /dev/zero, nor a FIFO that would block) of at most MAX_INPUT_BYTES."""
    try:
        # O_NONBLOCK: a FIFO opens at once (and is refused) instead of waiting for a writer
        with open(os.open(input_path, os.O_RDONLY | os.O_NONBLOCK), "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise ToolFailure(f"could not read input_path '{input_path}': not a regular file")
            if info.st_size > MAX_INPUT_BYTES:
                raise ToolFailure(f"input_path '{input_path}' is larger than {MAX_INPUT_BYTES} bytes")
            raw = handle.read(MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise ToolFailure(f"could not read input_path '{input_path}': {exc.strerror or exc}") from None
    if len(raw) > MAX_INPUT_BYTES:  # grew since the stat
        raise ToolFailure(f"input_path '{input_path}' is larger than {MAX_INPUT_BYTES} bytes")
    # as text mode reads it: universal newlines
    return raw.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")


def _full_list_path(input_path: str) -> str:
    """`<input dir>/<input stem>.failures.json`."""
    directory, name = os.path.split(input_path)
    stem = os.path.splitext(name)[0] or "test-report"
    return os.path.join(directory, f"{stem}.failures.json")


def op_parse(request: dict[str, Any], _log: str | None) -> Result:
    input_path = text_field(request, "input_path")
    if not input_path:
        raise ToolFailure("missing required field 'input_path'")
    wanted = text_field(request, "format") or "auto"
    repo_path = text_field(request, "repo_path")
    raw = _read_input(input_path)
    if wanted == "auto":
        chosen = detect_format(raw)
        if chosen is None:
            raise ToolFailure("could not auto-detect test format from input; pass 'format' explicitly as one of: "
                              + ", ".join(FORMATS))
    elif wanted in FORMATS:
        chosen = wanted
    else:
        raise ToolFailure(f"unknown format '{wanted}'; expected one of: auto, {', '.join(FORMATS)}")
    failures, passed = PARSERS[chosen](raw)
    if chosen == "cargo_test" and repo_path:
        for failure, found in zip(failures, read_only_stable_ids(repo_path, [f.test_name for f in failures])):
            failure.stable_id = found
    rows = [f.to_json() for f in failures]
    total, failed = passed + len(rows), len(rows)
    truncated = len(rows) > INLINE_CAP
    data_path = None
    if truncated:
        data_path = _full_list_path(input_path)
        full = {"format_used": chosen, "total": total, "passed": passed, "failed": failed, "truncated": False,
                "failures": rows}
        try:
            with open(data_path, "w", encoding="utf-8") as handle:
                json.dump(full, handle, indent=2)
        except OSError:
            data_path = None
        rows = rows[:INLINE_CAP]
    data = {"format_used": chosen, "total": total, "passed": passed, "failed": failed, "truncated": truncated,
            "failures": rows, "data_path": data_path}
    # Any failure makes the result `failed` (ok false) though the parse itself succeeded, as upstream's.
    return result("failed" if failed else "passed", f"{passed} passed, {failed} failed", data,
                  data_path=data_path, metadata={"resource_id": input_path, "state_effect": "read"})


if __name__ == "__main__":
    main({"parse": op_parse}, input_error_status="failed")
