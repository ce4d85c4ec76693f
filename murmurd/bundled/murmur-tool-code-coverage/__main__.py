"""murmur-tool-code-coverage 0.1.0 (native): spectrum-based fault localization (Ochiai,
Tarantula) from per-test LCOV files over the code graph murmur-tool-code-graph built, scores
written onto its `symbols` table (default-artifacts §2.2, §2.4, §5.6). It never runs tests."""

from __future__ import annotations

import hashlib
import json
import math
import os
import sqlite3
from pathlib import Path
from typing import Any

from lcov import parse_lcov
from nativekit.graphdb import db_path, open_db, stable_id
from nativekit.protocol import Result, ToolFailure, int_field, main, passed, text_field

SCORE_COLUMNS = (("suspicion_ef", "INTEGER"), ("suspicion_ep", "INTEGER"), ("suspicion_ochiai", "REAL"),
                 ("suspicion_tarantula", "REAL"))

MAX_LCOV_BYTES = 64 * 1024 * 1024  # one test's LCOV file; past it the file is skipped unread


def ochiai(ef: int, ep: int, failing: int) -> float:
    return 0.0 if ef == 0 else ef / math.sqrt(failing * (ef + ep))


def tarantula(ef: int, ep: int, failing: int, passing: int) -> float:
    if ef == 0:
        return 0.0
    fail_ratio = ef / failing
    pass_ratio = ep / passing if passing else 0.0
    return fail_ratio / (fail_ratio + pass_ratio) if fail_ratio + pass_ratio else 0.0


def repo_relative(repo: Path, source: str) -> str:
    """An LCOV `SF:` path as repo-relative `/` text. A relative path is looked up under the repo
    first (coverage tools write paths relative to where they ran, usually the repo root), then
    under the process CWD (upstream's only base)."""
    path = source.replace("\\", "/")
    while path.startswith("./"):
        path = path[2:]
    candidates = [Path(path)] if os.path.isabs(path) else [repo / path, Path.cwd() / path]
    for candidate in candidates:
        real = Path(os.path.realpath(candidate))
        if real.is_relative_to(repo) and real.exists():
            return real.relative_to(repo).as_posix()
    return path


def _ensure_columns(conn: sqlite3.Connection) -> None:
    have = {row[1] for row in conn.execute("PRAGMA table_info(symbols)")}
    for column, kind in SCORE_COLUMNS:
        if column not in have:
            conn.execute(f"ALTER TABLE symbols ADD COLUMN {column} {kind}")


def _failing_tests(request: dict[str, Any]) -> list[str]:
    value = request.get("failing_tests")
    names = [n for n in value if isinstance(n, str) and n] if isinstance(value, list) else []
    if not names:
        raise ToolFailure("localize: missing or empty required field 'failing_tests' (array of test names)")
    return names


def op_localize(request: dict[str, Any], _log: str | None) -> Result:
    given = text_field(request, "repo_path") or "."
    if not os.path.isdir(given):
        raise ToolFailure(f"localize: repo_path is not a directory: {given}")
    repo = Path(os.path.realpath(given))
    coverage = text_field(request, "coverage_dir")
    if not coverage:
        raise ToolFailure("localize: missing required field 'coverage_dir'")
    if not os.path.isdir(coverage):
        raise ToolFailure(f"localize: coverage_dir is not a directory: {coverage}")
    failing_tests = _failing_tests(request)
    limit = int_field(request, "limit", 50, 1, 10_000)
    if not os.path.isfile(db_path(str(repo))):
        raise ToolFailure(f"localize: code graph db not found at {db_path(str(repo))} — run murmur-tool-code-graph "
                          "index_repository first")
    try:
        conn = open_db(str(repo), create=False)
    except sqlite3.Error as exc:
        raise ToolFailure(f"localize: failed to open/migrate code graph db: {exc}", "error") from None
    try:
        return _localize(conn, repo, coverage, failing_tests, limit)
    except sqlite3.Error as exc:
        raise ToolFailure(f"localize: {exc}", "error") from None
    finally:
        conn.close()


def _localize(conn: sqlite3.Connection, repo: Path, coverage: str, failing_tests: list[str], limit: int) -> Result:
    _ensure_columns(conn)
    by_file: dict[str, list[tuple[str, int, int]]] = {}
    detail: dict[str, tuple[str, str, str, int]] = {}
    for sid, start, end, qualified, kind, path, language in conn.execute(
            "SELECT s.symbol_id, s.start_line, s.end_line, s.qualified_name, s.kind, f.path, s.language "
            "FROM symbols s JOIN files f ON f.id = s.file_id"):
        # A Python `def` line runs when its module is imported, so in every test's coverage: a
        # function is covered by a hit in its body (upstream's whole-range test, made for Rust
        # coverage, would score every imported function as run by every test).
        body_start = start + 1 if language == "python" and kind == "function" and end > start else start
        by_file.setdefault(path, []).append((sid, body_start, end))
        detail[sid] = (qualified, kind, path, start)
    failing = set(failing_tests)
    ef: dict[str, int] = {}
    ep: dict[str, int] = {}
    covered_failing: set[str] = set()
    passing = 0
    skipped: list[str] = []
    for info in sorted(p for p in Path(coverage).iterdir() if p.suffix == ".info" and p.is_file()):
        try:
            if info.stat().st_size > MAX_LCOV_BYTES:  # a sparse giant is never read into memory
                raise OSError(f"{info.name}: larger than {MAX_LCOV_BYTES} bytes")
            sections = parse_lcov(info.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            sections = {}
        if not sections:
            skipped.append(info.name)
            continue
        covered = set()
        for source, lines in sections.items():
            for sid, start, end in by_file.get(repo_relative(repo, source), []):
                if any(start <= line <= end for line in lines):
                    covered.add(sid)
        counts = ef if info.stem in failing else ep
        if info.stem in failing:
            covered_failing.add(info.stem)
        else:
            passing += 1
        for sid in covered:
            counts[sid] = counts.get(sid, 0) + 1
    failing_count = len(covered_failing)
    if failing_count == 0:
        raise ToolFailure("localize: no failing-test coverage found — every failing test is absent from coverage_dir "
                          "or unparseable (F == 0)")
    suspects = []
    for sid in set(ef) | set(ep):
        e, p = ef.get(sid, 0), ep.get(sid, 0)
        qualified, kind, file, start = detail.get(sid, ("<unknown>", "", "", 0))
        suspects.append({"symbol_id": sid, "qualified_name": qualified, "kind": kind, "file": file,
                         "start_line": start, "ef": e, "ep": p, "suspicion_ochiai": ochiai(e, p, failing_count),
                         "suspicion_tarantula": tarantula(e, p, failing_count, passing)})
    suspects.sort(key=lambda s: (-s["suspicion_ochiai"], -s["suspicion_tarantula"], s["symbol_id"]))
    with conn:  # every run first resets all four columns repo-wide
        conn.execute("UPDATE symbols SET suspicion_ef = NULL, suspicion_ep = NULL, suspicion_ochiai = NULL, "
                     "suspicion_tarantula = NULL")
        conn.executemany("UPDATE symbols SET suspicion_ef = ?, suspicion_ep = ?, suspicion_ochiai = ?, "
                         "suspicion_tarantula = ? WHERE symbol_id = ?",
                         [(s["ef"], s["ep"], s["suspicion_ochiai"], s["suspicion_tarantula"], s["symbol_id"])
                          for s in suspects])
    body = {"repo_path": str(repo), "coverage_dir": coverage, "failing_test_count": failing_count,
            "passing_test_count": passing, "scored_symbols": len(suspects)}
    tail = {"failing_test_stable_ids": [{"test_name": n, "stable_id": stable_id(conn, n)} for n in failing_tests],
            "failing_tests_without_coverage": [n for n in failing_tests if n not in covered_failing],
            "skipped_files": skipped}
    truncated = len(suspects) > limit
    data_path = None
    if truncated:
        folder = repo / ".murmur" / "coverage"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            target = folder / f"localize-{hashlib.sha256(str(repo).encode()).hexdigest()}.json"
            target.write_text(json.dumps({**body, "truncated": False, "top_suspects": suspects, **tail}, indent=2))
            data_path = str(target)
        except OSError:
            data_path = None
    shown = f", top {limit} shown (full list at data_path)" if truncated else ""
    return passed(f"localize: {len(suspects)} symbol(s) scored over {failing_count} failing / {passing} passing "
                  f"test(s){shown}", {**body, "truncated": truncated, "top_suspects": suspects[:limit], **tail,
                                       "data_path": data_path},
                  data_path=data_path, metadata={"resource_id": f"coverage:{repo}", "state_effect": "mutate"})


if __name__ == "__main__":
    main({"localize": op_localize}, input_error_status="failed")
