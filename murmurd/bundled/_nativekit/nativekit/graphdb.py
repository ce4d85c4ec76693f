"""murmur-tool-code-graph's SQLite database (default-artifacts §2.4), shared by code-graph
(which creates and fills it), git's symbol_history, test-report and code-coverage."""

from __future__ import annotations

import os
import sqlite3

DB_RELATIVE = os.path.join(".murmur", "code-graph.db")

SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE, content_hash TEXT NOT NULL,
    language TEXT NOT NULL DEFAULT 'rust');
CREATE TABLE IF NOT EXISTS symbols (
    id INTEGER PRIMARY KEY, symbol_id TEXT NOT NULL UNIQUE, language TEXT NOT NULL, package TEXT NOT NULL,
    module TEXT NOT NULL, qualified_name TEXT NOT NULL, simple_name TEXT NOT NULL, signature TEXT NOT NULL,
    kind TEXT NOT NULL, file_id INTEGER NOT NULL REFERENCES files(id) ON DELETE CASCADE,
    start_line INTEGER NOT NULL, end_line INTEGER NOT NULL, doc_comment TEXT NOT NULL DEFAULT '',
    visibility TEXT NOT NULL DEFAULT '', attributes TEXT NOT NULL DEFAULT '');
CREATE INDEX IF NOT EXISTS symbols_file ON symbols(file_id);
CREATE INDEX IF NOT EXISTS symbols_simple ON symbols(simple_name);
CREATE TABLE IF NOT EXISTS edges (
    id INTEGER PRIMARY KEY, src_symbol_id TEXT NOT NULL, dst_symbol_id TEXT, dst_name TEXT NOT NULL,
    edge_kind TEXT NOT NULL, call_style TEXT NOT NULL DEFAULT '', confidence TEXT NOT NULL DEFAULT 'unresolved',
    UNIQUE(src_symbol_id, dst_name, edge_kind));
CREATE INDEX IF NOT EXISTS edges_src ON edges(src_symbol_id);
CREATE INDEX IF NOT EXISTS edges_dst ON edges(dst_symbol_id);
CREATE VIRTUAL TABLE IF NOT EXISTS symbols_fts USING fts5(
    symbol_id UNINDEXED, qualified_name, doc_comment, tokenize='unicode61');
"""
_MIGRATED = {"symbols": ("visibility", "attributes"), "edges": ("confidence", "call_style")}


def db_path(repo: str) -> str:
    return os.path.join(repo, DB_RELATIVE)


def open_db(repo: str, *, create: bool) -> sqlite3.Connection:
    """The repository's graph, schema ensured and migrated (an older db missing a column gets it
    and is emptied, as upstream's). `create=False`: the db must exist already."""
    path = db_path(repo)
    if not create and not os.path.isfile(path):
        raise FileNotFoundError(path)
    if create:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA foreign_keys=ON")
    existing = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    conn.executescript(SCHEMA)
    stale = False
    for table, columns in _MIGRATED.items():
        if table not in existing:
            continue
        have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        for column in columns:
            if column not in have:
                default = "'unresolved'" if column == "confidence" else "''"
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} TEXT NOT NULL DEFAULT {default}")
                stale = True
    if stale:
        for table in ("symbols_fts", "edges", "symbols", "files"):
            conn.execute(f"DELETE FROM {table}")
    conn.commit()
    return conn


def stable_id(conn: sqlite3.Connection, test_name: str) -> str | None:
    """A test name's symbol: split at the last `::` into (module, qualified name); the one
    `function` row matching both, else None (no match, or more than one)."""
    module, sep, qualified = test_name.rpartition("::")
    if not sep:
        module, qualified = "", test_name
    rows = conn.execute("SELECT symbol_id FROM symbols WHERE kind = 'function' AND module = ? AND "
                        "qualified_name = ? LIMIT 2", (module, qualified)).fetchall()
    return rows[0][0] if len(rows) == 1 else None


def read_only_stable_ids(repo: str, names: list[str]) -> list[str | None]:
    """stable_id for each name from the repository's db opened read-only; all None without one."""
    path = db_path(repo)
    if not os.path.isfile(path):
        return [None] * len(names)
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            return [stable_id(conn, name) for name in names]
    except sqlite3.Error:
        return [None] * len(names)
