"""murmur-tool-code-graph 0.2.0 (native): indexes Rust and Python into a SQLite symbol/call
graph (tree-sitter's Python bindings) and answers six structural queries (default-artifacts
§2.2, §2.4, §5.5). Bad input and unknown symbols are `failed`; SQLite faults are `error`."""

from __future__ import annotations

import sqlite3
from typing import Any

from impact import op_impact_analysis
from indexer import index_repository
from nativekit.graphdb import open_db
from nativekit.protocol import Result, ToolFailure, main, passed
from queries import op_explain_path, op_find_symbol, op_get_symbol, op_slice_symbol, resolve_repo

QUERIES = {"find_symbol": op_find_symbol, "get_symbol": op_get_symbol, "slice_symbol": op_slice_symbol,
           "explain_path": op_explain_path, "impact_analysis": op_impact_analysis}


def op_index(request: dict[str, Any], _log: str | None) -> Result:
    repo = resolve_repo(request, "index_repository")
    try:
        conn = open_db(str(repo), create=True)
        try:
            stats = index_repository(conn, repo)
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise ToolFailure(f"index_repository: {exc}", "error") from None
    changed = stats["changed_files"] or stats["removed_files"]
    return passed(f"index_repository: {stats['changed_files']} changed, {stats['unchanged_files']} unchanged, "
                  f"{stats['removed_files']} removed; {stats['total_symbols']} symbol(s), {stats['total_edges']} "
                  "edge(s)", {"repo_path": str(repo), **stats},
                  metadata={"resource_id": f"repo:{repo}", "state_effect": "mutate" if changed else "read"})


def _query(name: str):
    def run(request: dict[str, Any], _log: str | None) -> Result:
        repo = resolve_repo(request, name)
        try:
            conn = open_db(str(repo), create=False)
        except FileNotFoundError:
            raise ToolFailure(f"{name}: no code graph at {repo}/.murmur/code-graph.db; "
                              "run index_repository first") from None
        except sqlite3.Error as exc:
            raise ToolFailure(f"{name}: {exc}", "error") from None
        try:
            return QUERIES[name](conn, repo, request)
        except sqlite3.Error as exc:
            raise ToolFailure(f"{name}: {exc}", "error") from None
        finally:
            conn.close()
    return run


if __name__ == "__main__":
    main({"index_repository": op_index, **{name: _query(name) for name in QUERIES}}, input_error_status="failed")
