"""Upstream's native-tool process protocol (default-artifacts §2.2).

One run per call: read all of stdin (`{"data": <object | JSON text>, "log_path": str|null}`),
write one line of JSON to stdout, exit 0. Exit 1 with `fatal: failed to read stdin` only when
stdin cannot be read. The result carries both of upstream's protocols in one object:
`{ok, message, status, summary, data, data_path, metadata, [error_kind], ...data's keys}`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

Result = dict[str, Any]
Operation = Callable[[dict[str, Any], str | None], Result]


class ToolFailure(Exception):
    """A call that cannot go on: `message` is the result's message, `status` failed|error."""

    def __init__(self, message: str, status: str = "failed", error_kind: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.error_kind = error_kind


def result(status: str, message: str, data: Any = None, *, metadata: dict[str, str] | None = None,
           data_path: str | None = None, error_kind: str | None = None) -> Result:
    """One result object; a mapping `data` is also copied to the top level (upstream's older protocol)."""
    out: Result = {"ok": status == "passed", "message": message, "status": status, "summary": message,
                   "data": data, "data_path": data_path, "metadata": metadata}
    if error_kind is not None:
        out["error_kind"] = error_kind
    if isinstance(data, dict):
        for key, value in data.items():
            out.setdefault(key, value)
    return out


def passed(message: str, data: Any = None, **extra: Any) -> Result:
    return result("passed", message, data, **extra)


def decode_request(raw: str) -> tuple[dict[str, Any] | str, str | None]:
    """The call's input object and log path, or the input error's message (pure)."""
    if not raw.strip():
        return "missing input on stdin", None
    try:
        envelope = json.loads(raw)
    except ValueError as exc:
        return f"invalid stdin JSON: {exc}", None
    if not isinstance(envelope, dict):
        return "invalid stdin JSON: not an object", None
    data = envelope.get("data")
    log_path = envelope.get("log_path") if isinstance(envelope.get("log_path"), str) else None
    if data is None:
        return "missing data field", log_path
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except ValueError as exc:
            return f"invalid data JSON string: {exc}", log_path
    if not isinstance(data, dict):
        return "data must be a JSON string or object", log_path
    return data, log_path


def run(operations: dict[str, Operation], input_error_status: str, raw: str) -> Result:
    """Dispatch one request on `data.operation` (pure but for what the operation does)."""
    request, log_path = decode_request(raw)
    if isinstance(request, str):
        return result(input_error_status, request)
    operation = request.get("operation")
    name = operation if isinstance(operation, str) else ""
    handler = operations.get(name)
    if handler is None:
        return result(input_error_status, f"unknown operation: {name}")
    try:
        return handler(request, log_path)
    except ToolFailure as failure:
        return result(failure.status, failure.message, error_kind=failure.error_kind)


def main(operations: dict[str, Operation], input_error_status: str = "failed") -> None:
    """The program: stdin in, one JSON line out, exit 0."""
    try:
        raw = sys.stdin.read()
    except (OSError, UnicodeDecodeError):
        print("fatal: failed to read stdin", file=sys.stderr)
        sys.exit(1)
    try:
        out = run(operations, input_error_status, raw)
    except Exception as exc:  # an internal fault is still one result, never a traceback
        out = result("error", f"internal error: {type(exc).__name__}: {exc}")
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()


def text_field(request: dict[str, Any], key: str) -> str | None:
    value = request.get(key)
    return value if isinstance(value, str) else None


def int_field(request: dict[str, Any], key: str, default: int, low: int, high: int) -> int:
    """An integer input clamped to [low, high]; absent or not an integer: the default."""
    value = request.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        return default
    return max(low, min(high, value))
