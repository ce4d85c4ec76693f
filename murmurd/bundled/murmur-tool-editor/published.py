"""The published editor's four operations (murmur-tool-editor 0.2.0): `read_file`, `write_file`,
`replace_in_file`, `find_in_files`, each answering the native-tool envelope
`{ok, message, status, summary, data, data_path, metadata, [error_kind], ...data}` that the
adapter in app.py maps onto the WIT `tool-result` as upstream's component does.

Paths are relative to `.`, the tool's preopened filesystem scope; the host keeps them there.
A read is remembered in a small on-disk cache keyed by path, range and mtime: a read of the
same span of an unchanged file answers only `cache_ref`, no content, as published. The key holds
the mtime in nanoseconds where upstream's holds seconds, so a file changed within the second of
its last read is read afresh instead of answered "cache hit" (docs/decisions.md, issue 28).
"""

from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

FIND_RESULT_SIZE_LIMIT = 500 * 1024
MAX_READ_RANGE_LINES = 2000
MAX_CONTEXT_LINES = 20
CACHE_DIR_ENV = "MURMUR_TOOL_EDITOR_CACHE_DIR"
DEFAULT_CACHE_DIR = ".murmur-tool-editor-cache"
MAX_CACHE_ENTRIES = 1024

Envelope = dict[str, Any]


def _compact(value: Any) -> str:
    """JSON as serde_json writes a `Value`: no spaces, keys sorted."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def ok_with(message: str, data: Any, summary: str) -> Envelope:
    envelope: Envelope = {"ok": True, "message": message, "status": "passed", "summary": summary,
                          "data": data, "data_path": None, "metadata": None}
    if isinstance(data, dict):
        envelope.update(data)
    return envelope


def fail_msg(message: str) -> Envelope:
    return {"ok": False, "message": message, "status": "error", "summary": message,
            "data": None, "data_path": None, "metadata": None}


def err_result(error_kind: str, message: str) -> Envelope:
    return {**fail_msg(message), "error_kind": error_kind}


def _io_kind(exc: OSError) -> str:
    if isinstance(exc, FileNotFoundError):
        return "not_found"
    if isinstance(exc, PermissionError):
        return "permission_denied"
    return "io_error"


def _io_error(path: str, exc: OSError) -> Envelope:
    return err_result(_io_kind(exc), f"{path}: {exc.strerror or exc}")


def _lines(text: str) -> list[str]:
    """Rust's `str::lines`: split on `\\n`, drop one trailing `\\r` per line and a final empty line."""
    parts = text.split("\n")
    if parts and parts[-1] == "":
        parts.pop()
    return [p[:-1] if p.endswith("\r") else p for p in parts]


def _int_field(request: dict[str, Any], name: str) -> int | None:
    """`as_i64`: an integer, else absent (a float, a string or a bool counts as absent)."""
    value = request.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str_field(request: dict[str, Any], name: str, *, non_empty: bool = False) -> str | None:
    value = request.get(name)
    if not isinstance(value, str) or (non_empty and value == ""):
        return None
    return value


def _read_text(path: str) -> str:
    with open(path, encoding="utf-8", newline="") as handle:
        return handle.read()


# -- the read cache ----------------------------------------------------------------------------


def _fnv1a(data: bytes) -> int:
    value = 0xCBF29CE484222325
    for byte in data:
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return value


def _cache_dir() -> str:
    configured = os.environ.get(CACHE_DIR_ENV, "")
    return configured if configured.strip() else DEFAULT_CACHE_DIR


class _Mtime(NamedTuple):
    seconds: int  # in the `cache_id`, as published
    nanoseconds: int  # in the key


def _cache_key(path: str, start: int | None, end: int | None, mtime: _Mtime) -> str:
    bounds = ("" if start is None else str(start), "" if end is None else str(end))
    return "\0".join((path, *bounds, str(mtime.nanoseconds)))


def _entry_path(cache_dir: str, key: str) -> str:
    return os.path.join(cache_dir, f"{_fnv1a(key.encode('utf-8')):016x}.json")


def cache_lookup(key: str) -> str | None:
    try:
        entry = json.loads(_read_text(_entry_path(_cache_dir(), key)))
    except (OSError, ValueError):
        return None
    if isinstance(entry, dict) and entry.get("key") == key and isinstance(entry.get("cache_id"), str):
        return entry["cache_id"]
    return None


def _evict(cache_dir: str) -> None:
    """At MAX_CACHE_ENTRIES entries, drop the oldest by mtime so one more fits."""
    try:
        names = [n for n in os.listdir(cache_dir) if n.endswith(".json")]
    except OSError:
        return
    if len(names) < MAX_CACHE_ENTRIES:
        return
    aged = []
    for name in names:
        try:
            aged.append((os.stat(os.path.join(cache_dir, name)).st_mtime, name))
        except OSError:
            continue
    aged.sort()
    for _mtime, name in aged[: max(0, len(aged) - (MAX_CACHE_ENTRIES - 1))]:
        try:
            os.remove(os.path.join(cache_dir, name))
        except OSError:
            pass


def cache_store(key: str, cache_id: str) -> None:
    """Best effort: written to a temporary file and renamed into place."""
    cache_dir = _cache_dir()
    try:
        os.makedirs(cache_dir, exist_ok=True)
    except OSError:
        return
    _evict(cache_dir)
    temporary = os.path.join(cache_dir, f".tmp-{secrets.randbits(64):016x}-{_fnv1a(key.encode('utf-8')):016x}")
    try:
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.write(_compact({"cache_id": cache_id, "key": key}))
        os.replace(temporary, _entry_path(cache_dir, key))
    except OSError:
        pass


# -- operations --------------------------------------------------------------------------------


def read_file(request: dict[str, Any]) -> Envelope:
    path = _str_field(request, "path", non_empty=True)
    if path is None:
        return fail_msg("missing required field: path")
    try:
        stat = os.stat(path)
    except OSError as exc:
        return _io_error(path, exc)
    mtime = _Mtime(max(int(stat.st_mtime), 0), stat.st_mtime_ns)
    start_arg, end_arg = _int_field(request, "start_line"), _int_field(request, "end_line")
    try:
        content = _read_text(path) if start_arg is not None or end_arg is not None else None
    except (OSError, UnicodeDecodeError) as exc:
        return _io_error(path, exc) if isinstance(exc, OSError) else err_result("io_error", f"{path}: not UTF-8 text")
    if content is None:
        return _read_whole(path, mtime)
    return _read_range(path, mtime, content, start_arg, end_arg)


def _read_whole(path: str, mtime: _Mtime) -> Envelope:
    key = _cache_key(path, None, None, mtime)
    cached = cache_lookup(key)
    if cached is not None:
        return ok_with(f"read {path} (cached)", {"cache_ref": cached}, f"cache hit: {cached}")
    try:
        content = _read_text(path)
    except UnicodeDecodeError:
        return err_result("io_error", f"{path}: not UTF-8 text")
    except OSError as exc:
        return _io_error(path, exc)
    size = len(content.encode("utf-8"))
    cache_id = f"cache_{size ^ mtime.seconds:x}"
    cache_store(key, cache_id)
    return ok_with(f"read {path}", {"content": content, "cache_ref": cache_id, "total_lines": len(_lines(content))},
                   f"{size} bytes")


def _read_range(path: str, mtime: _Mtime, content: str, start_arg: int | None, end_arg: int | None) -> Envelope:
    lines = _lines(content)
    total = len(lines)
    start = 1 if start_arg is None else start_arg
    if start < 1:
        return err_result("invalid_range", f"start_line must be >= 1, got {start}")
    if start > total:
        return err_result("invalid_range", f"start_line {start} is beyond end of file ({total} lines)")
    end = min(total if end_arg is None else end_arg, total)
    if start > end:
        return err_result("invalid_range", f"inverted range: start_line {start} is greater than end_line {end}")
    span = end - start + 1
    if span > MAX_READ_RANGE_LINES:
        return err_result("range_too_large", f"requested range of {span} lines exceeds the maximum of "
                                             f"{MAX_READ_RANGE_LINES}; narrow start_line/end_line")
    bounds = {"total_lines": total, "start_line": start, "end_line": end}
    key = _cache_key(path, start, end, mtime)
    cached = cache_lookup(key)
    if cached is not None:
        return ok_with(f"read {path} lines {start}-{end} (cached)", {"cache_ref": cached, **bounds},
                       f"cache hit: {cached}")
    sliced = "\n".join(lines[start - 1: end])
    size = len(sliced.encode("utf-8"))
    cache_id = f"cache_{size ^ mtime.seconds:x}"
    cache_store(key, cache_id)
    return ok_with(f"read {path} lines {start}-{end}", {"content": sliced, "cache_ref": cache_id, **bounds},
                   f"{size} bytes (lines {start}-{end} of {total})")


def write_file(request: dict[str, Any]) -> Envelope:
    path = _str_field(request, "path", non_empty=True)
    if path is None:
        return fail_msg("missing required field: path")
    content = _str_field(request, "content")
    if content is None:
        return fail_msg("missing required field: content")
    parent = os.path.dirname(path)
    if parent:
        try:
            os.makedirs(parent, exist_ok=True)
        except OSError as exc:
            return err_result(_io_kind(exc), f"failed to create directories for {path}: {exc.strerror or exc}")
    try:
        with open(path, "w", encoding="utf-8", newline="") as handle:
            handle.write(content)
    except OSError as exc:
        return _io_error(path, exc)
    return ok_with(f"wrote {path}", None, f"{len(content.encode('utf-8'))} bytes written")


def replace_in_file(request: dict[str, Any]) -> Envelope:
    path = _str_field(request, "path", non_empty=True)
    if path is None:
        return fail_msg("missing required field: path")
    old, new = _str_field(request, "old_string"), _str_field(request, "new_string")
    if old is None:
        return fail_msg("missing required field: old_string")
    if new is None:
        return fail_msg("missing required field: new_string")
    try:
        text = _read_text(path)
    except UnicodeDecodeError:
        return err_result("io_error", f"{path}: not UTF-8 text")
    except OSError as exc:
        return _io_error(path, exc)
    count = text.count(old)  # as Rust's `matches`: an empty old_string matches at every boundary
    if count == 0:
        return err_result("string_not_found", f"old_string not found in {path}")
    replaced = text.replace(old, new)
    try:
        with open(path, "w", encoding="utf-8", newline="") as handle:
            handle.write(replaced)
    except OSError as exc:
        return _io_error(path, exc)
    return ok_with(f"{count} replacement(s) in {path}", {"count": count}, f"{count} replacements")


def _files(directory: str, recursive: bool) -> Iterator[str]:
    """The files to search: walkdir's (symlinks not followed, a missing root yields nothing) or
    one listing. Sorted, so the answer does not depend on the directory's order on disk."""
    if not recursive:
        for name in sorted(os.listdir(directory)):  # an OSError here is the caller's I/O error
            path = os.path.join(directory, name)
            if os.path.isfile(path) and not os.path.islink(path):
                yield path
        return
    if os.path.isfile(directory) and not os.path.islink(directory):
        yield directory
        return
    for current, dirs, names in os.walk(directory):
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(current, name)
            if not os.path.islink(path):
                yield path


def _relative(path: str, directory: str) -> str:
    if path == directory:
        return ""
    relative = os.path.relpath(path, directory)
    return relative.lstrip("/")


def find_in_files(request: dict[str, Any]) -> Envelope:
    pattern = _str_field(request, "pattern", non_empty=True)
    if pattern is None:
        return fail_msg("missing required field: pattern")
    directory = _str_field(request, "dir")
    if directory is None:
        return fail_msg("missing required field: dir")
    recursive = request.get("recursive")
    recursive = recursive if isinstance(recursive, bool) else True
    context = _int_field(request, "context_lines") or 0
    if not 0 <= context <= MAX_CONTEXT_LINES:
        return err_result("context_too_large",
                          f"context_lines must be between 0 and {MAX_CONTEXT_LINES}, got {context}")
    if directory.strip() in ("", ".", "./"):
        return err_result("search_too_broad", "find_in_files requires a specific subdirectory scope, not repo "
                                              "root. Provide a more specific path.")
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        return err_result("invalid_pattern", f"invalid regex '{pattern}': {exc}")
    try:
        paths = list(_files(directory, recursive))
    except OSError as exc:
        return _io_error(directory, exc)
    return _search(paths, directory, compiled.search, context)


def _search(paths: list[str], directory: str, matches: Callable[[str], Any], context: int) -> Envelope:
    found: list[dict[str, Any]] = []
    files: set[str] = set()
    approximate = 0
    for path in paths:
        try:
            lines = _lines(_read_text(path))
        except (OSError, UnicodeDecodeError):
            continue  # binary or unreadable: skipped
        relative = _relative(path, directory)
        for index, line in enumerate(lines):
            if not matches(line):
                continue
            hit: dict[str, Any] = {"path": relative, "line": index + 1, "text": line}
            if context > 0:
                hit["context_before"] = lines[max(0, index - context): index]
                hit["context_after"] = lines[index + 1: index + 1 + context]
            approximate += 2 * len(_compact(hit).encode("utf-8"))
            if approximate > FIND_RESULT_SIZE_LIMIT:
                return _size_exceeded()
            found.append(hit)
            files.add(relative)
    summary = f"{len(found)} matches in {len(files)} files"
    result = ok_with(summary, {"matches": found}, summary)
    if len(_compact(result).encode("utf-8")) > FIND_RESULT_SIZE_LIMIT:
        return _size_exceeded()
    return result


def _size_exceeded() -> Envelope:
    return err_result("result_size_exceeded", f"search result would exceed size limit of {FIND_RESULT_SIZE_LIMIT} "
                                              "bytes. Try a more specific pattern or narrower scope.")


OPERATIONS: dict[str, tuple[Callable[[dict[str, Any]], Envelope], str]] = {
    "read_file": (read_file, "read"),
    "write_file": (write_file, "mutate"),
    "replace_in_file": (replace_in_file, "mutate"),
    "find_in_files": (find_in_files, "read"),
}


def run(request: Any) -> Envelope:
    """One parsed request object: its operation's envelope, with `state_effect` on success."""
    operation = request.get("operation") if isinstance(request, dict) else None
    operation = operation if isinstance(operation, str) else ""
    if operation not in OPERATIONS:
        return fail_msg(f"unknown operation: {operation}")
    handler, effect = OPERATIONS[operation]
    result = handler(request)
    if result.get("ok") is True:
        result["metadata"] = {"state_effect": effect}
    return result


def envelope_data(result: Envelope) -> str | None:
    """The WIT `data`: the envelope's `data` field, a string verbatim, else its JSON, else none."""
    data = result.get("data")
    if isinstance(data, str):
        return data
    return None if data is None else _compact(data)
