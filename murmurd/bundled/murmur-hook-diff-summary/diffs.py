"""One file's before and after as the published diff-summary's entry (pure)."""

from __future__ import annotations

import difflib
import re
from typing import Any

CONTEXT_LINES = 2
TRUNCATE_AFTER = 300  # changed (+/-) lines kept in a diff
MAX_FILE_BYTES = 512 * 1024

_NAMES = {"dockerfile": "dockerfile", "containerfile": "dockerfile", "makefile": "makefile",
          "gnumakefile": "makefile", "bsdmakefile": "makefile"}
_EXTENSIONS = {
    "rust": "rs", "python": "py pyw", "javascript": "js mjs cjs", "typescript": "ts", "tsx": "tsx", "jsx": "jsx",
    "go": "go", "java": "java", "c": "c h hpp hxx", "cpp": "cpp cc cxx c++", "csharp": "cs", "ruby": "rb",
    "php": "php", "swift": "swift", "kotlin": "kt kts", "shell": "sh bash zsh fish", "json": "json jsonc",
    "toml": "toml", "yaml": "yaml yml", "markdown": "md mdx markdown", "html": "html htm", "css": "css",
    "scss": "scss sass", "xml": "xml", "sql": "sql", "protobuf": "proto", "wit": "wit",
    "webassembly": "wat wasm", "hcl": "tf tfvars", "lua": "lua", "r": "r rmd", "scala": "scala",
    "clojure": "clj cljs cljc", "elixir": "ex exs", "erlang": "erl hrl", "haskell": "hs lhs",
    "ocaml": "ml mli", "latex": "tex sty cls", "vue": "vue", "svelte": "svelte", "graphql": "graphql gql",
}
_LANGUAGE_OF = {ext: language for language, exts in _EXTENSIONS.items() for ext in exts.split()}
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def language_for(path: str) -> str:
    name = path.rsplit("/", 1)[-1].lower()
    if name in _NAMES:
        return _NAMES[name]
    ext = name.rsplit(".", 1)[-1] if "." in name.lstrip(".") else ""
    return _LANGUAGE_OF.get(ext, "text")


def _unchanged(path: str, language: str) -> dict[str, Any]:
    return {"path": path, "language": language, "diff": "", "hunks": [], "added_lines": 0, "removed_lines": 0,
            "truncated": False, "total_changed_lines": 0}


def _lines(text: str) -> list[str]:
    """Lines with their endings; a last line without one says so, as `diff -u` does."""
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n\\ No newline at end of file\n"
    return lines


def stats(diff: str) -> tuple[list[dict[str, int]], int, int]:
    """The hunk headers and the added and removed line counts of a unified diff."""
    hunks, added, removed = [], 0, 0
    for line in diff.splitlines():
        match = _HUNK.match(line)
        if match:
            old_start, old_count, new_start, new_count = match.groups()
            hunks.append({"old_start": int(old_start), "old_count": int(old_count or 1),
                          "new_start": int(new_start), "new_count": int(new_count or 1)})
        elif line.startswith("+") and not line.startswith("+++"):
            added += 1
        elif line.startswith("-") and not line.startswith("---"):
            removed += 1
    return hunks, added, removed


def _cut(diff: str, limit: int) -> str:
    """The diff up to its `limit`-th changed line (the rest dropped, mid-hunk if need be)."""
    kept, changed = [], 0
    for line in diff.splitlines():
        change = (line.startswith("+") and not line.startswith("+++")) or (
            line.startswith("-") and not line.startswith("---"))
        if change and changed >= limit:
            break
        kept.append(line + "\n")
        changed += change
    return "".join(kept)


def file_entry(path: str, before: bytes | None, after: bytes | None) -> dict[str, Any]:
    """The entry for `path`: `before` is None when it did not exist, `after` None when it is gone.
    Either side is at most MAX_FILE_BYTES + 1 bytes (what the snapshot read)."""
    language = language_for(path)
    if after is None and before is None:  # created, then deleted: no net change
        return _unchanged(path, language)
    old, new = before or b"", after or b""
    if b"\0" in old or b"\0" in new:
        return {"path": path, "language": language, "binary": True}
    if len(old) > MAX_FILE_BYTES or len(new) > MAX_FILE_BYTES:
        return {"path": path, "language": language, "diff": None, "hunks": [], "added_lines": None,
                "removed_lines": None, "truncated": True, "total_changed_lines": None}
    try:
        old_text, new_text = old.decode("utf-8"), new.decode("utf-8")
    except UnicodeDecodeError:
        return {"path": path, "language": language, "binary": True}
    if old_text == new_text:
        return _unchanged(path, language)
    body = "".join(difflib.unified_diff(_lines(old_text), _lines(new_text), n=CONTEXT_LINES, lineterm="\n"))
    body = body.split("\n", 2)[2] if body.startswith("---") else body  # difflib's own file header
    if not body:
        return _unchanged(path, language)
    diff = f"--- a/{path}\n+++ b/{path}\n{body}"
    hunks, added, removed = stats(diff)
    total = added + removed
    truncated = total > TRUNCATE_AFTER
    if truncated:
        diff = _cut(diff, TRUNCATE_AFTER)
        hunks, added, removed = stats(diff)
    return {"path": path, "language": language, "diff": diff, "hunks": hunks, "added_lines": added,
            "removed_lines": removed, "truncated": truncated, "total_changed_lines": total}
