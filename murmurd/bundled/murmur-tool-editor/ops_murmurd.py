"""murmurd's earlier editor form, still accepted: a request with `op` (read, write, patch,
search, list) and no `operation` is answered as murmurd's editor 0.1.0 answered it, so capsules
and prompts written for it keep working. The schema the model is shown is the published one
(published.py); this form is never advertised.

`patch` replaces exact text only, and refuses text that is missing or ambiguous. A result larger
than `INLINE_BYTES` is written to `RESULT_FILE` and returned through `data-path`. A whole-file
`read` reports `state_effect: read`, a `write` or `patch` `state_effect: mutate`, each with
`resource_id: file:<normalized path>`, so `murmurd trace` can flag a file read again with no
write between.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

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


def is_murmurd_form(request: object) -> bool:
    """A request in this form: an object with `op` and no `operation`."""
    return isinstance(request, dict) and "op" in request and "operation" not in request


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


def answer(request: dict[str, Any]) -> tuple[bool, str, str | None, str | None, list[tuple[str, str]]]:
    """(passed, summary, inline text, data-path, metadata) for one request in this form. Inline
    up to INLINE_BYTES; past that the text goes to RESULT_FILE and back through data-path."""
    try:
        if request.get("op") not in OPS:
            raise Refused(f"unknown op {request.get('op')!r}; one of {', '.join(OPS)} "
                          "(or `operation`: read_file, write_file, replace_in_file, find_in_files)")
        text = OPS[request["op"]](request)
    except Refused as exc:
        return False, str(exc), None, None, []
    summary = f"{request['op']} ok"
    if len(text.encode("utf-8")) > INLINE_BYTES:
        _write_text(RESULT_FILE, text)
        return True, summary, None, RESULT_FILE, effect(request)
    return True, summary, text, None, effect(request)
