"""index_repository (default-artifacts §5.5): walk the tree for `*.rs` and `*.py`, re-parse
the files whose sha256 changed, drop the rows of files gone from disk, resolve call edges by
simple name and grade their confidence, all in one transaction."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import stat
import tomllib
from pathlib import Path

from parse_python import parse_python
from parse_rust import parse_rust
from parsed import Parsed

SKIPPED_DIRS = {"target", ".git", "__pycache__", "venv", "build", "dist", "node_modules"}
LANGUAGES = {".rs": "rust", ".py": "python"}
MAX_SOURCE_BYTES = 8 * 1024 * 1024  # a source file past it (generated, or planted) is not indexed


def _plain_file(path: str | Path) -> bool:
    """A regular file (not a link, a FIFO a read would block on, a device) within the cap."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_size <= MAX_SOURCE_BYTES


def _small_text(path: Path) -> str:
    """A manifest's text, when it is a plain file within the cap (OSError otherwise)."""
    if not _plain_file(path):
        raise OSError(f"{path}: not a regular file within {MAX_SOURCE_BYTES} bytes")
    return path.read_text(encoding="utf-8")


def _skipped(name: str) -> bool:
    return name in SKIPPED_DIRS or name.startswith(".") or name.endswith(".egg-info")


def source_files(repo: Path) -> list[str]:
    """Repo-relative `/` paths of the `*.rs` and `*.py` files, sorted (links never followed, and only regular files within MAX_SOURCE_BYTES)."""
    found: list[str] = []
    for top, dirs, files in os.walk(repo):
        dirs[:] = [d for d in dirs if not _skipped(d)]
        for name in files:
            if os.path.splitext(name)[1] in LANGUAGES and _plain_file(os.path.join(top, name)):
                found.append(Path(top, name).relative_to(repo).as_posix())
    return sorted(found)


def _cargo_name(directory: Path) -> str | None:
    try:
        data = tomllib.loads(_small_text(directory / "Cargo.toml"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    name = (data.get("package") or {}).get("name")
    return name if isinstance(name, str) and name else None


def _python_name(directory: Path) -> str | None:
    try:
        data = tomllib.loads(_small_text(directory / "pyproject.toml"))
        for table in ((data.get("project") or {}), ((data.get("tool") or {}).get("poetry") or {})):
            if isinstance(table.get("name"), str) and table["name"]:
                return table["name"]
    except (OSError, ValueError, UnicodeDecodeError):
        pass
    for file, marker in (("setup.py", "name"), ("setup.cfg", "name")):
        try:
            text = _small_text(directory / file)
        except (OSError, UnicodeDecodeError):
            continue
        in_metadata = file == "setup.py"
        for line in text.splitlines():
            stripped = line.strip()
            if file == "setup.cfg" and stripped.startswith("["):
                in_metadata = stripped == "[metadata]"
                continue
            if in_metadata and stripped.startswith(marker):
                rest = stripped[len(marker):].lstrip()
                if rest.startswith("="):
                    value = rest[1:].strip().rstrip(",").strip().strip("\"'")
                    if value:
                        return value
    return None


def nearest_package(repo: Path, directory: Path, named, cache: dict) -> tuple[str, Path]:
    """The package name and root from the nearest manifest up to the repo root, else the repo's
    directory name and the repo root."""
    key = (named, directory)
    if key not in cache:
        current = directory
        found = None
        while True:
            name = named(current)
            if name:
                found = (name, current)
                break
            if current == repo or repo not in current.parents:
                break
            current = current.parent
        cache[key] = found or (repo.name or "package", repo)
    return cache[key]


def module_path(root: Path, file: Path, suffix: str, collapse: tuple[str, ...], joiner: str) -> str:
    parts = list(file.relative_to(root).parts) if file.is_relative_to(root) else []
    if parts and parts[0] == "src":
        parts = parts[1:]
    if not parts:
        return ""
    parts[-1] = parts[-1].removesuffix(suffix)
    if parts[-1] in collapse:
        parts.pop()
    return joiner.join(parts)


def parse_file(repo: Path, rel: str, source: bytes, cache: dict) -> tuple[str, Parsed]:
    path = repo / rel
    if rel.endswith(".rs"):
        package, root = nearest_package(repo, path.parent, _cargo_name, cache)
        return "rust", parse_rust(source, package, module_path(root, path, ".rs", ("lib", "main", "mod"), "::"))
    package, root = nearest_package(repo, path.parent, _python_name, cache)
    return "python", parse_python(source, package, module_path(root, path, ".py", ("__init__",), "."))


def _delete_file_rows(conn: sqlite3.Connection, file_id: int) -> None:
    ids = "SELECT symbol_id FROM symbols WHERE file_id = ?"
    conn.execute(f"DELETE FROM symbols_fts WHERE symbol_id IN ({ids})", (file_id,))
    conn.execute(f"DELETE FROM edges WHERE src_symbol_id IN ({ids})", (file_id,))
    conn.execute("DELETE FROM symbols WHERE file_id = ?", (file_id,))


def _insert(conn: sqlite3.Connection, file_id: int, parsed: Parsed) -> None:
    for s in parsed.symbols:
        cursor = conn.execute(
            "INSERT OR IGNORE INTO symbols (symbol_id, language, package, module, qualified_name, simple_name, "
            "signature, kind, file_id, start_line, end_line, doc_comment, visibility, attributes) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (s.symbol_id, s.language, s.package, s.module, s.qualified_name, s.simple_name, s.signature, s.kind,
             file_id, s.start_line, s.end_line, s.doc_comment, s.visibility, s.attributes))
        if cursor.rowcount:
            conn.execute("INSERT INTO symbols_fts (rowid, symbol_id, qualified_name, doc_comment) VALUES (?,?,?,?)",
                         (cursor.lastrowid, s.symbol_id, s.qualified_name, s.doc_comment))
    conn.executemany(
        "INSERT OR IGNORE INTO edges (src_symbol_id, dst_symbol_id, dst_name, edge_kind, call_style, confidence) "
        "VALUES (?,?,?,?,?,?)",
        [(e.src_symbol_id, e.dst_symbol_id, e.dst_name, e.edge_kind, e.call_style,
          "definite" if e.edge_kind == "contains" else "unresolved") for e in parsed.edges])


_RESOLVE = (
    "UPDATE edges SET dst_symbol_id = NULL WHERE edge_kind = 'calls'",
    "UPDATE edges SET dst_symbol_id = (SELECT MIN(s.symbol_id) FROM symbols s WHERE s.simple_name = edges.dst_name) "
    "WHERE edge_kind = 'calls'",
    "UPDATE edges SET confidence = CASE "
    " WHEN dst_symbol_id IS NULL THEN 'unresolved' WHEN call_style = 'method' THEN 'heuristic' "
    " WHEN (SELECT COUNT(*) FROM symbols s WHERE s.simple_name = edges.dst_name) > 1 THEN 'possible' "
    " ELSE 'definite' END WHERE edge_kind = 'calls'",
)


def index_repository(conn: sqlite3.Connection, repo: Path) -> dict[str, int]:
    on_disk = source_files(repo)
    stored = {path: (file_id, digest) for file_id, path, digest in conn.execute("SELECT id, path, content_hash FROM files")}
    changed = unchanged = removed = 0
    cache: dict = {}
    with conn:
        for rel in on_disk:
            try:
                if not _plain_file(repo / rel):  # changed since the walk
                    continue
                source = (repo / rel).read_bytes()
            except OSError:
                continue
            digest = hashlib.sha256(source).hexdigest()
            if rel in stored and stored[rel][1] == digest:
                unchanged += 1
                continue
            changed += 1
            language, parsed = parse_file(repo, rel, source, cache)
            if rel in stored:
                _delete_file_rows(conn, stored[rel][0])
            conn.execute("INSERT INTO files (path, content_hash, language) VALUES (?,?,?) ON CONFLICT(path) "
                         "DO UPDATE SET content_hash = excluded.content_hash, language = excluded.language",
                         (rel, digest, language))
            file_id = conn.execute("SELECT id FROM files WHERE path = ?", (rel,)).fetchone()[0]
            _insert(conn, file_id, parsed)
        present = set(on_disk)
        for rel, (file_id, _digest) in stored.items():
            if rel not in present:
                _delete_file_rows(conn, file_id)
                conn.execute("DELETE FROM files WHERE id = ?", (file_id,))
                removed += 1
        for statement in _RESOLVE:
            conn.execute(statement)
    total_symbols = conn.execute("SELECT COUNT(*) FROM symbols").fetchone()[0]
    total_edges = conn.execute("SELECT COUNT(*) FROM edges").fetchone()[0]
    return {"changed_files": changed, "unchanged_files": unchanged, "removed_files": removed,
            "total_symbols": total_symbols, "total_edges": total_edges}
