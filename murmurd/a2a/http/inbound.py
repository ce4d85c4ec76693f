"""What the edge refuses in a request's params before any dialect parses them.

A value the daemon accepts is stored, traced, rendered in every dialect and handed to the
capsule. Two kinds of JSON parse fine yet break one of those later, after the task is already
recorded: text that is not valid Unicode (JSON's `"\\ud800"` is a lone surrogate, which neither
UTF-8, SQLite nor the trace can hold) and nesting deep enough to exhaust a recursive renderer.
Both are refused here with -32602 naming the field, so nothing half-recorded is ever left behind.

Pure logic; the walk is iterative and visits each value once (the body is already size-capped).
"""

from __future__ import annotations

from typing import Any

from murmurd.a2a.wire.jsonrpc import JsonRpcError, encodable

MAX_DEPTH = 64
"""Levels of containers allowed, `params` itself being the first (a2a-sdk's own shapes need ~8)."""
MAX_FIELD_CHARS = 200
# Fields that become task or context ids: stored in indexed text columns, which PostgreSQL's
# `text` cannot hold U+0000 in. Refused on every store alike (message text keeps U+0000: it is
# stored inside the record's JSON, escaped).
ID_FIELDS = frozenset({"id", "taskId", "contextId", "task_id", "context_id", "referenceTaskIds"})


def _field(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    shown = key.encode("utf-8", "backslashreplace").decode("utf-8")
    return f"{path}.{shown[:64]}"


def _refuse(path: str, problem: str, **data: Any) -> JsonRpcError:
    shown = path if len(path) <= MAX_FIELD_CHARS else path[:MAX_FIELD_CHARS] + "..."
    return JsonRpcError.invalid_params(f"{shown}: {problem}", {"field": shown, **data})


def check_params(params: Any, max_depth: int = MAX_DEPTH) -> None:
    """JsonRpcError(-32602) naming a field that nests past `max_depth` or holds (or is
    keyed by) text that is not valid Unicode; None when the params are safe to record."""
    stack: list[tuple[str, Any, int, bool]] = [("params", params, 0, False)]
    while stack:
        path, value, depth, is_id = stack.pop()
        if isinstance(value, str):
            if not encodable(value):
                raise _refuse(path, "text is not valid Unicode (a lone surrogate)")
            if is_id and "\x00" in value:
                raise _refuse(path, "an id may not hold U+0000")
            continue
        if not isinstance(value, dict | list):
            continue
        if depth >= max_depth:
            raise _refuse(path, f"nested deeper than {max_depth} levels", limit_depth=max_depth)
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            child = _field(path, key)
            if isinstance(key, str) and not encodable(key):
                raise _refuse(child, "member name is not valid Unicode (a lone surrogate)")
            stack.append((child, item, depth + 1, key in ID_FIELDS or (is_id and isinstance(key, int))))
