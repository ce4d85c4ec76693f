"""find_symbol, get_symbol, slice_symbol and explain_path over the graph (default-artifacts §5.5)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
from collections import deque
from pathlib import Path
from typing import Any

from nativekit.protocol import Result, ToolFailure, int_field, passed, text_field

_TOKEN = re.compile(r"[A-Za-z0-9_]+")
_NODE = ("SELECT s.qualified_name, s.kind, s.signature, s.module, f.path, s.start_line "
         "FROM symbols s JOIN files f ON f.id = s.file_id WHERE s.symbol_id = ?")


def required(request: dict[str, Any], key: str, operation: str) -> str:
    value = text_field(request, key)
    if not value:
        raise ToolFailure(f"{operation}: missing required field '{key}'")
    return value


def read_meta(resource: str) -> dict[str, str]:
    return {"resource_id": resource, "state_effect": "read"}


def exists(conn: sqlite3.Connection, symbol_id: str) -> bool:
    return conn.execute("SELECT 1 FROM symbols WHERE symbol_id = ?", (symbol_id,)).fetchone() is not None


def write_payload(repo: Path, folder: str, name: str, payload: dict[str, Any]) -> str | None:
    """The full payload under `<repo>/.murmur/<folder>/`; its path, or None when it cannot be written."""
    directory = repo / ".murmur" / folder
    try:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / name
        path.write_text(json.dumps(payload, indent=2))
    except OSError:
        return None
    return str(path)


def op_find_symbol(conn: sqlite3.Connection, repo: Path, request: dict[str, Any]) -> Result:
    query = required(request, "query", "find_symbol")
    limit = int_field(request, "limit", 20, 1, 500)
    tokens = _TOKEN.findall(query)
    matches: list[dict[str, Any]] = []
    if tokens:
        expression = " AND ".join(f'"{token}"*' for token in tokens)
        rows = conn.execute(
            "SELECT s.symbol_id, s.qualified_name, s.kind, s.signature, s.module, f.path, s.start_line, s.doc_comment "
            "FROM symbols_fts JOIN symbols s ON s.id = symbols_fts.rowid JOIN files f ON f.id = s.file_id "
            "WHERE symbols_fts MATCH ? ORDER BY rank LIMIT ?", (expression, limit)).fetchall()
        keys = ("symbol_id", "qualified_name", "kind", "signature", "module", "file", "start_line", "doc_comment")
        matches = [dict(zip(keys, row)) for row in rows]
    return passed(f"find_symbol: {len(matches)} match(es) for '{query}'",
                  {"query": query, "count": len(matches), "matches": matches},
                  metadata=read_meta(f"find:{repo}:{query}"))


def op_get_symbol(conn: sqlite3.Connection, repo: Path, request: dict[str, Any]) -> Result:
    symbol_id = required(request, "symbol_id", "get_symbol")
    row = conn.execute(
        "SELECT s.symbol_id, s.language, s.package, s.module, s.qualified_name, s.signature, s.kind, f.path, "
        "s.start_line, s.end_line, s.doc_comment, s.visibility, s.attributes FROM symbols s JOIN files f "
        "ON f.id = s.file_id WHERE s.symbol_id = ?", (symbol_id,)).fetchone()
    if row is None:
        raise ToolFailure(f"get_symbol: symbol not found: {symbol_id}")
    keys = ("symbol_id", "language", "package", "module", "qualified_name", "signature", "kind", "file",
            "start_line", "end_line", "doc_comment", "visibility", "attributes")
    detail: dict[str, Any] = dict(zip(keys, row))
    detail["callees"] = [r[0] for r in conn.execute(
        "SELECT DISTINCT dst_symbol_id FROM edges WHERE src_symbol_id = ? AND edge_kind = 'calls' "
        "AND dst_symbol_id IS NOT NULL ORDER BY dst_symbol_id", (symbol_id,))]
    detail["callers"] = [r[0] for r in conn.execute(
        "SELECT DISTINCT src_symbol_id FROM edges WHERE dst_symbol_id = ? AND edge_kind = 'calls' "
        "ORDER BY src_symbol_id", (symbol_id,))]
    return passed(f"get_symbol: {symbol_id}", detail, metadata=read_meta(symbol_id))


def _node(conn: sqlite3.Connection, symbol_id: str, depth: int) -> dict[str, Any]:
    row = conn.execute(_NODE, (symbol_id,)).fetchone() or ("<unresolved>", "", "", "", "", 0)
    return {"symbol_id": symbol_id, "qualified_name": row[0], "kind": row[1], "signature": row[2],
            "module": row[3], "file": row[4], "start_line": row[5], "depth": depth}


def op_slice_symbol(conn: sqlite3.Connection, repo: Path, request: dict[str, Any]) -> Result:
    symbol_id = required(request, "symbol_id", "slice_symbol")
    max_depth = int_field(request, "max_depth", 3, 0, 64)
    max_nodes = int_field(request, "max_nodes", 50, 1, 10_000)
    direction = text_field(request, "direction") or "callees"
    if direction not in ("callees", "callers"):
        raise ToolFailure("slice_symbol: direction must be 'callees' or 'callers'")
    if not exists(conn, symbol_id):
        raise ToolFailure(f"slice_symbol: symbol not found: {symbol_id}")
    step = ("SELECT e.dst_symbol_id, r.depth + 1 FROM reach r JOIN edges e ON e.src_symbol_id = r.sid "
            "WHERE e.dst_symbol_id IS NOT NULL AND r.depth < ?" if direction == "callees" else
            "SELECT e.src_symbol_id, r.depth + 1 FROM reach r JOIN edges e ON e.dst_symbol_id = r.sid "
            "WHERE r.depth < ?")
    rows = conn.execute(f"WITH RECURSIVE reach(sid, depth) AS (SELECT ?, 0 UNION {step}) "
                        "SELECT sid, MIN(depth) AS d FROM reach GROUP BY sid ORDER BY d, sid LIMIT ?",
                        (symbol_id, max_depth, max_nodes + 1)).fetchall()
    truncated = len(rows) > max_nodes
    rows = rows[:max_nodes]
    included = {sid for sid, _ in rows}
    nodes = [_node(conn, sid, depth) for sid, depth in rows]
    edges = [{"src": s, "dst": d, "kind": k} for s, d, k in conn.execute(
        "SELECT src_symbol_id, dst_symbol_id, edge_kind FROM edges WHERE dst_symbol_id IS NOT NULL ORDER BY id")
        if s in included and d in included]
    head = {"root": symbol_id, "direction": direction, "max_depth": max_depth, "max_nodes": max_nodes,
            "truncated": truncated, "node_count": len(nodes), "edge_count": len(edges)}
    name = f"slice-{hashlib.sha256(symbol_id.encode()).hexdigest()}.json"
    data_path = write_payload(repo, "slices", name, {**head, "nodes": nodes, "edges": edges})
    brief = [{"symbol_id": n["symbol_id"], "qualified_name": n["qualified_name"], "depth": n["depth"]} for n in nodes]
    cut = f", truncated at {max_nodes}" if truncated else ""
    return passed(f"slice_symbol: {len(nodes)} node(s), {len(edges)} edge(s), depth<={max_depth}{cut} ({direction})",
                  {**head, "nodes": brief, "data_path": data_path}, data_path=data_path,
                  metadata=read_meta(symbol_id))


def op_explain_path(conn: sqlite3.Connection, repo: Path, request: dict[str, Any]) -> Result:
    source = required(request, "from", "explain_path")
    target = required(request, "to", "explain_path")
    max_depth = int_field(request, "max_depth", 6, 1, 64)
    for end in (source, target):
        if not exists(conn, end):
            raise ToolFailure(f"explain_path: symbol not found: {end}")
    meta = read_meta(f"{source}=>{target}")
    if source == target:
        return passed("explain_path: from == to", {"from": source, "to": target, "found": True, "depth": 0,
                                                   "path": [source]}, metadata=meta)
    # Breadth-first over edges of every kind: the first arrival is a shortest, cycle-free path.
    parents: dict[str, str | None] = {source: None}
    frontier = deque([(source, 0)])
    while frontier:
        current, depth = frontier.popleft()
        if depth >= max_depth:
            continue
        for (nxt,) in conn.execute("SELECT DISTINCT dst_symbol_id FROM edges WHERE src_symbol_id = ? AND "
                                   "dst_symbol_id IS NOT NULL ORDER BY dst_symbol_id", (current,)):
            if nxt in parents:
                continue
            parents[nxt] = current
            if nxt == target:
                path = [nxt]
                while parents[path[-1]] is not None:
                    path.append(parents[path[-1]])  # type: ignore[arg-type]
                path.reverse()
                return passed(f"explain_path: found at depth {len(path) - 1}",
                              {"from": source, "to": target, "found": True, "depth": len(path) - 1, "path": path},
                              metadata=meta)
            frontier.append((nxt, depth + 1))
    return passed(f"explain_path: no path found within depth {max_depth}",
                  {"from": source, "to": target, "found": False, "depth": max_depth, "path": []}, metadata=meta)


def resolve_repo(request: dict[str, Any], operation: str) -> Path:
    """`repo_path` (default the CWD): an existing directory, canonicalised."""
    given = text_field(request, "repo_path") or "."
    path = Path(os.path.realpath(given))
    if not path.is_dir():
        raise ToolFailure(f"{operation}: repo_path is not a directory: {given}")
    return path
