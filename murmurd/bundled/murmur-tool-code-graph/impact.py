"""impact_analysis (default-artifacts §5.5): the symbols an edited line range overlaps, walked
up the reverse call graph (calls edges only) with the weakest confidence along the way, then
classified into tests, routes, persistence operations and public APIs."""

from __future__ import annotations

import hashlib
import re
import sqlite3
from pathlib import Path
from typing import Any

from nativekit.protocol import Result, ToolFailure, int_field, passed
from queries import read_meta, required, write_payload

PERSISTENCE = ("execute", "execute_batch", "query", "query_row", "query_map", "prepare", "transaction", "commit",
               "rollback")
ROUTES = ("get(", "post(", "put(", "delete(", "patch(", "route(")
_RANK = {2: "definite", 1: "possible"}


def has_marker(attributes: str, marker: str) -> bool:
    """`marker` in the attributes at an identifier boundary."""
    return re.search(r"(?<![A-Za-z0-9_])" + re.escape(marker), attributes) is not None


def is_test(attributes: str, module: str, file: str, simple: str) -> bool:
    if any(m in attributes for m in ("#[test]", "tokio::test", "async_std::test")) or has_marker(attributes, "test("):
        return True
    if any(part in ("test", "tests") for part in re.split(r"[:.]", module)):
        return True
    last = file.rsplit("/", 1)[-1]
    if last == "tests.rs" or last.endswith(("_test.rs", "_tests.rs")):
        return True
    if last.endswith(".py") and (last.startswith("test_") or last.endswith("_test.py")):
        return True
    return simple.startswith("test") or file.startswith("tests/") or "/tests/" in file


def normalize(repo: Path, file: str) -> str:
    rel = file.replace("\\", "/")
    while rel.startswith("./"):
        rel = rel[2:]
    prefix = str(repo).rstrip("/") + "/"
    return rel[len(prefix):] if rel.startswith(prefix) else rel


def _integer(request: dict[str, Any], key: str) -> int:
    value = request.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ToolFailure(f"impact_analysis: missing required field '{key}'")
    return value


def op_impact_analysis(conn: sqlite3.Connection, repo: Path, request: dict[str, Any]) -> Result:
    file = required(request, "file", "impact_analysis")
    start, end = _integer(request, "start_line"), _integer(request, "end_line")
    if end < start:
        raise ToolFailure(f"impact_analysis: end_line ({end}) must be >= start_line ({start})")
    max_depth = int_field(request, "max_depth", 3, 0, 64)
    max_nodes = int_field(request, "max_nodes", 50, 1, 10_000)
    rel = normalize(repo, file)
    meta = read_meta(f"impact:{rel}:{start}-{end}")
    found = conn.execute("SELECT id FROM files WHERE path = ?", (rel,)).fetchone()
    if found is None:
        raise ToolFailure(f"impact_analysis: file not indexed: '{rel}' (run index_repository first, or check the path)")
    roots = [r[0] for r in conn.execute("SELECT symbol_id FROM symbols WHERE file_id = ? AND start_line <= ? AND "
                                        "end_line >= ? ORDER BY symbol_id", (found[0], end, start))]
    head = {"file": rel, "start_line": start, "end_line": end, "max_depth": max_depth, "max_nodes": max_nodes}
    if not roots:
        return passed(f"impact_analysis: no symbol overlaps {rel}:{start}-{end}",
                      {**head, "truncated": False, "roots": [], "callers": [], "tests": [], "routes": [],
                       "persistence_operations": [], "public_apis": []}, metadata=meta)
    seed = " UNION ".join("SELECT ?, 0, 2" for _ in roots)
    rows = conn.execute(
        f"WITH RECURSIVE reach(sid, depth, conf) AS ({seed} UNION "
        "SELECT e.src_symbol_id, r.depth + 1, MIN(r.conf, CASE e.confidence WHEN 'definite' THEN 2 "
        "WHEN 'possible' THEN 1 ELSE 0 END) FROM reach r JOIN edges e ON e.dst_symbol_id = r.sid "
        "WHERE e.edge_kind = 'calls' AND r.depth < ?) "
        "SELECT sid, MIN(depth) AS d, MIN(conf) FROM reach GROUP BY sid ORDER BY d, sid LIMIT ?",
        (*roots, max_depth, max_nodes + 1)).fetchall()
    truncated = len(rows) > max_nodes
    placeholders = ",".join("?" for _ in PERSISTENCE)
    persistence_sources = {r[0] for r in conn.execute(
        f"SELECT DISTINCT src_symbol_id FROM edges WHERE edge_kind = 'calls' AND dst_name IN ({placeholders})",
        PERSISTENCE)}
    out: dict[str, list[dict[str, Any]]] = {k: [] for k in ("roots", "callers", "tests", "routes",
                                                            "persistence_operations", "public_apis")}
    root_set = set(roots)
    for sid, depth, rank in rows[:max_nodes]:
        detail = conn.execute("SELECT s.qualified_name, s.kind, f.path, s.start_line, s.visibility, s.attributes, "
                              "s.module FROM symbols s JOIN files f ON f.id = s.file_id WHERE s.symbol_id = ?",
                              (sid,)).fetchone() or ("<unresolved>", "", "", 0, "", "", "")
        is_root = sid in root_set
        entry = {"symbol_id": sid, "qualified_name": detail[0], "kind": detail[1], "file": detail[2],
                 "start_line": detail[3], "depth": 0 if is_root else depth,
                 "confidence": "definite" if is_root else _RANK.get(rank, "heuristic")}
        out["roots" if is_root else "callers"].append(entry)
        if detail[4] == "pub":
            out["public_apis"].append(entry)
        if is_test(detail[5], detail[6], detail[2], detail[0].rsplit("::", 1)[-1]):
            out["tests"].append(entry)
        if any(has_marker(detail[5], m) for m in ROUTES):
            out["routes"].append(entry)
        if sid in persistence_sources:
            out["persistence_operations"].append(entry)
    full = {**head, "truncated": truncated, "root_count": len(out["roots"]), "caller_count": len(out["callers"]),
            **out}
    name = f"impact-{hashlib.sha256(f'{rel}:{start}-{end}'.encode()).hexdigest()}.json"
    data_path = write_payload(repo, "impacts", name, full)
    cut = f", truncated at {max_nodes}" if truncated else ""
    summary = (f"impact_analysis: {len(out['roots'])} root(s), {len(out['callers'])} caller(s); {len(out['tests'])} "
               f"test(s), {len(out['routes'])} route(s), {len(out['persistence_operations'])} persistence, "
               f"{len(out['public_apis'])} public api(s){cut}")
    return passed(summary, {**full, "data_path": data_path}, data_path=data_path, metadata=meta)
