"""murmur-tool-test-report 0.1.0 (native): parses captured cargo test, pytest, go test or jest
output into one structured report (default-artifacts §2.2, §2.3, §5.7). It never runs tests."""

from __future__ import annotations

import json
import os
from typing import Any

from nativekit.graphdb import read_only_stable_ids
from nativekit.protocol import Result, ToolFailure, main, result, text_field
from nativekit.testparse import FORMATS, PARSERS, detect_format

INLINE_CAP = 50


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
    try:
        with open(input_path, encoding="utf-8", errors="replace") as handle:
            raw = handle.read()
    except OSError as exc:
        raise ToolFailure(f"could not read input_path '{input_path}': {exc.strerror or exc}") from None
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
