"""The scorers of murmur-hook-eval 0.3.0 (`MURMUR_EVAL_CONFIG`), as pure functions, as published.

A scorer is `{type, name? (default: the type), max?, expected?}`. `exit_ok`, `max_turns` (default
10), `max_tokens` (input + output, default 100000) and `tool_sequence` (a greedy in-order match
of `expected` against the tools called: score matched/len(expected), a pass only when all
matched, an empty `expected` passes) score 1.0 or 0.0; `llm_judge` is accepted and scores
nothing; an unknown type is skipped. Records are written as serde_json writes a `json!` object:
keys sorted, no spaces.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

PREFIX = "[murmur-hook-eval]"
U32, U64 = 2**32 - 1, 2**64 - 1


@dataclass(frozen=True)
class Scorer:
    name: str
    kind: str
    max: int = 0
    expected: tuple[str, ...] = ()


@dataclass(frozen=True)
class Session:
    """The `session-end` totals the scorers read."""

    exit_status: str
    total_turns: int
    input_tokens: int
    output_tokens: int


def _u64(value: Any) -> int | None:
    """serde's `as_u64`: a non-negative integer (a float or a bool is not one)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= U64 else None


def parse_scorers(config_json: str) -> tuple[list[Scorer], list[str]]:
    """The scorers, and the warnings upstream prints to stderr while parsing."""
    try:
        config = json.loads(config_json)
    except ValueError as exc:
        return [], [f"{PREFIX} failed to parse MURMUR_EVAL_CONFIG: {exc}"]
    items = config.get("scorers") if isinstance(config, dict) else None
    if not isinstance(items, list):
        return [], [f"{PREFIX} MURMUR_EVAL_CONFIG.scorers is missing or not an array"]
    scorers: list[Scorer] = []
    notes: list[str] = []
    for item in items:
        item = item if isinstance(item, dict) else {}
        kind = item.get("type") if isinstance(item.get("type"), str) else "unknown"
        name = item.get("name") if isinstance(item.get("name"), str) else kind
        if kind == "exit_ok":
            scorers.append(Scorer(name, kind))
        elif kind in ("max_turns", "max_tokens"):
            limit = _u64(item.get("max"))
            if limit is None:
                limit = 10 if kind == "max_turns" else 100_000
            scorers.append(Scorer(name, kind, limit & U32 if kind == "max_turns" else limit))  # `as u32`
        elif kind == "tool_sequence":
            expected = item.get("expected")
            names = tuple(v for v in expected if isinstance(v, str)) if isinstance(expected, list) else ()
            scorers.append(Scorer(name, kind, expected=names))
        elif kind == "llm_judge":
            notes.append(f"{PREFIX} scorer '{name}' type 'llm_judge' is not yet implemented \u2014 scoring nothing")
            scorers.append(Scorer(name, kind))
        else:
            notes.append(f"{PREFIX} unknown scorer type '{kind}' for scorer '{name}' \u2014 skipping")
    return scorers, notes


def tool_sequence(observed: list[str], expected: tuple[str, ...]) -> tuple[bool, float]:
    if not expected:
        return True, 1.0
    matched = 0
    for tool in observed:
        if matched < len(expected) and tool == expected[matched]:
            matched += 1
    return matched == len(expected), matched / len(expected)


def _debug_list(values: Any) -> str:
    """Rust's `{:?}` of a `Vec<String>`: `["a", "b"]`."""
    return "[" + ", ".join(json.dumps(v, ensure_ascii=False) for v in values) + "]"


def _verdict(scorer: Scorer, session: Session, observed: list[str]) -> tuple[bool, float, str] | None:
    if scorer.kind == "exit_ok":
        passed = session.exit_status == "ok"
        return passed, float(passed), f"exit_status={session.exit_status}"
    if scorer.kind == "max_turns":
        passed = session.total_turns <= scorer.max
        return passed, float(passed), f"turns={session.total_turns} max={scorer.max}"
    if scorer.kind == "max_tokens":
        used = session.input_tokens + session.output_tokens
        return used <= scorer.max, float(used <= scorer.max), f"tokens={used} max={scorer.max}"
    if scorer.kind == "tool_sequence":
        passed, score = tool_sequence(observed, scorer.expected)
        return passed, score, f"observed={_debug_list(observed)} expected={_debug_list(scorer.expected)}"
    return None  # llm_judge


def records(scorers: list[Scorer], session: Session, observed: list[str], *, ts: int,
            case_id: str | None, dataset_id: str | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One `event_score` per scoring scorer, and the `dataset_run`."""
    scored: list[dict[str, Any]] = []
    scores: dict[str, float] = {}
    any_fail = False
    for scorer in scorers:
        verdict = _verdict(scorer, session, observed)
        if verdict is None:
            continue
        passed, score, reason = verdict
        any_fail = any_fail or not passed
        scores[scorer.name] = score
        scored.append({"record_type": "event_score", "ts": ts, "turn": session.total_turns,
                       "event_type": "session_end", "scorer": scorer.name, "result": "pass" if passed else "fail",
                       "score": score, "reason": reason})
    overall = "fail" if any_fail else "no_scores" if not scores else "pass"
    run = {"record_type": "dataset_run", "ts": ts, "dataset_id": dataset_id, "case_id": case_id,
           "overall": overall, "scores": scores}
    return scored, run


def line(record: dict[str, Any]) -> str:
    return json.dumps(record, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
