"""murmur-tool-editor: read, write, patch, search and list files for a coding agent.

Every path is opened relative to `.`, the filesystem scope the host preopens for this tool (the
session workdir unless the capsule narrows it); the host, not this code, keeps it there, so an
absolute path or a `..` out of the scope fails like a missing file. `patch` replaces exact text
only, and refuses text that is missing or ambiguous: a model editing from memory must quote the
file as it is. A result larger than `INLINE_BYTES` is written to `RESULT_FILE` and returned
through `data-path`, which the runtime reads back.

A whole-file `read` reports `state_effect: read`, a `write` or `patch` `state_effect: mutate`,
each with `resource_id: file:<normalized path>`, so `murmurd trace` can flag a file read again
with no write between. A ranged read, `search` and `list` declare nothing: reading another
range, or listing after a change, is not redundant.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

from wit_world import exports
from wit_world.exports import run

INLINE_BYTES = 32 * 1024
RESULT_FILE = ".murmur-editor/result.txt"
MAX_SEARCH_HITS = 500
MAX_LIST_ENTRIES = 2000
SKIPPED_DIRS = ("__pycache__", "node_modules")  # and every directory whose name starts with "."
# The session trace records every tool call's input: a search would find its own earlier requests.
SKIPPED_ROOT_FILES = ("trace.jsonl",)


class Refused(Exception):
    """A request the tool answers with `failed` and this message."""


def _field(request: dict[str, Any], name: str, default: Any = None) -> Any:
    value = request.get(name, default)
    if value is None:
        raise Refused(f"{request.get('op')}: `{name}` is required")
    return value


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        raise Refused(f"{path}: no such file in the workdir") from None
    except IsADirectoryError:
        raise Refused(f"{path}: is a directory (use op=list)") from None
    except UnicodeDecodeError:
        raise Refused(f"{path}: not UTF-8 text") from None
    except OSError as exc:
        raise Refused(f"{path}: {exc.strerror or exc}") from None


def _write_text(path: str, text: str) -> None:
    try:
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as exc:
        raise Refused(f"{path}: cannot write: {exc.strerror or exc}") from None


def op_read(request: dict[str, Any]) -> str:
    text = _read_text(_field(request, "path"))
    start, end = request.get("start_line"), request.get("end_line")
    if start is None and end is None:
        return text
    lines = text.splitlines(keepends=True)
    return "".join(lines[max(int(start or 1), 1) - 1: int(end) if end is not None else None])


def op_write(request: dict[str, Any]) -> str:
    path, content = _field(request, "path"), _field(request, "content")
    _write_text(path, content)
    return f"wrote {len(content.encode('utf-8'))} bytes to {path}"


def op_patch(request: dict[str, Any]) -> str:
    path, old, new = _field(request, "path"), _field(request, "old"), _field(request, "new")
    if old == "":
        raise Refused("patch: `old` is empty; quote the exact text to replace")
    text = _read_text(path)
    count = text.count(old)
    if count == 0:
        raise Refused(f"patch: the old text is not in {path}; read the file and quote it exactly")
    if count > 1:
        raise Refused(f"patch: the old text occurs {count} times in {path}; include more context so it is unique")
    _write_text(path, text.replace(old, new, 1))
    line = text[: text.index(old)].count("\n") + 1
    return f"patched {path} at line {line}"


def _walk(root: str) -> Iterator[str]:
    """Every file under `root`, sorted, skipping hidden, dependency and bookkeeping entries."""
    if os.path.isfile(root):
        yield root
        return
    if not os.path.isdir(root):
        raise Refused(f"{root}: no such file or directory in the workdir")
    for current, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.startswith("."))
        for name in sorted(files):
            path = os.path.normpath(os.path.join(current, name))
            if path not in SKIPPED_ROOT_FILES:
                yield path


def _matcher(request: dict[str, Any]) -> Callable[[str], bool]:
    pattern = _field(request, "pattern")
    if not request.get("regex"):
        return lambda line: pattern in line
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise Refused(f"search: invalid regex {pattern!r}: {exc}") from None
    return lambda line: compiled.search(line) is not None


def op_search(request: dict[str, Any]) -> str:
    matches = _matcher(request)
    hits: list[str] = []
    for path in _walk(request.get("path") or "."):
        try:
            with open(path, encoding="utf-8") as handle:
                lines = handle.read().splitlines()
        except (OSError, UnicodeDecodeError):
            continue  # binary or unreadable: not text to search
        hits += [f"{path}:{n}: {line}" for n, line in enumerate(lines, start=1) if matches(line)]
        if len(hits) >= MAX_SEARCH_HITS:
            return "\n".join(hits[:MAX_SEARCH_HITS] + [f"(stopped at {MAX_SEARCH_HITS} matches)"])
    return "\n".join(hits) if hits else "no matches"


def op_list(request: dict[str, Any]) -> str:
    root = request.get("path") or "."
    entries = []
    for path in _walk(root):
        entries.append(path)
        if len(entries) >= MAX_LIST_ENTRIES:
            entries.append(f"(stopped at {MAX_LIST_ENTRIES} files)")
            break
    return "\n".join(entries) if entries else "(empty)"


OPS: dict[str, Callable[[dict[str, Any]], str]] = {
    "read": op_read, "write": op_write, "patch": op_patch, "search": op_search, "list": op_list,
}


def _parse(data: str | None) -> dict[str, Any]:
    try:
        request = json.loads(data or "")
    except ValueError:
        raise Refused("the input is not JSON; send {\"op\": ..., ...}") from None
    if not isinstance(request, dict):
        raise Refused("the input must be a JSON object")
    if request.get("op") not in OPS:
        raise Refused(f"unknown op {request.get('op')!r}; one of {', '.join(OPS)}")
    return request


def effect(request: dict[str, Any]) -> list[tuple[str, str]]:
    """The `state_effect` / `resource_id` metadata of a call that succeeded."""
    op, path = request["op"], request.get("path")
    if not isinstance(path, str):
        return []
    if op == "read" and request.get("start_line") is None and request.get("end_line") is None:
        kind = "read"
    elif op in ("write", "patch"):
        kind = "mutate"
    else:
        return []
    return [("state_effect", kind), ("resource_id", "file:" + os.path.normpath(path))]


def _result(status: run.Status, summary: str, text: str | None,
            metadata: list[tuple[str, str]] | None = None) -> run.ToolResult:
    """Inline up to INLINE_BYTES; past that the text goes to RESULT_FILE and back through data-path."""
    if text is not None and len(text.encode("utf-8")) > INLINE_BYTES:
        _write_text(RESULT_FILE, text)
        return run.ToolResult(status, summary, None, RESULT_FILE, False, metadata or [])
    return run.ToolResult(status, summary, text, None, False, metadata or [])


class Run(exports.Run):
    def run(self, input: run.ToolInput) -> run.ToolResult:
        try:
            request = _parse(input.data)
            text = OPS[request["op"]](request)
            return _result(run.Status.PASSED, f"{request['op']} ok", text, effect(request))
        except Refused as exc:
            return run.ToolResult(run.Status.FAILED, str(exc), None, None, False, [])
