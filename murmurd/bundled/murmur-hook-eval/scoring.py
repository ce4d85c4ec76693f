"""The scorers of `observability.eval` (upstream's murmur-hook-eval), as pure functions.

`config` is the block as the runtime hands it (`MURMUR_EVAL_CONFIG`, JSON). A scorer returns
(passed, reason); `llm_judge` and unknown types score nothing (upstream notes them and goes on).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DEFAULT_MAX = {"max_turns": 10, "max_tokens": 100_000}


@dataclass(frozen=True)
class Session:
    """What the hook saw of the session: the `session-end` totals and the tools called, in order."""

    exit_status: str
    total_turns: int
    input_tokens: int
    output_tokens: int
    tools: tuple[str, ...]


def _max(scorer: dict[str, Any], kind: str) -> int:
    value = scorer.get("max")
    return value if isinstance(value, int) and not isinstance(value, bool) else DEFAULT_MAX[kind]


def is_subsequence(expected: list[str], observed: tuple[str, ...]) -> bool:
    remaining = iter(observed)
    return all(any(name == seen for seen in remaining) for name in expected)


def score(scorer: dict[str, Any], session: Session) -> tuple[bool, str] | None:
    """One scorer's verdict and reason; None when the type scores nothing."""
    kind = scorer.get("type")
    if kind == "exit_ok":
        return session.exit_status == "ok", f"exit_status={session.exit_status}"
    if kind == "max_turns":
        limit = _max(scorer, kind)
        return session.total_turns <= limit, f"turns={session.total_turns} max={limit}"
    if kind == "max_tokens":
        limit, used = _max(scorer, kind), session.input_tokens + session.output_tokens
        return used <= limit, f"tokens={used} max={limit}"
    if kind == "tool_sequence":
        expected = [str(name) for name in scorer.get("expected") or []]
        passed = is_subsequence(expected, session.tools)
        return passed, f"expected={','.join(expected)} observed={','.join(session.tools)}"
    return None


def scorers_of(config: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """The scorers that score, and a note for every one skipped."""
    items = config.get("scorers") if isinstance(config, dict) else None
    kept, notes = [], []
    for scorer in items if isinstance(items, list) else []:
        kind = scorer.get("type") if isinstance(scorer, dict) else None
        if kind == "llm_judge":
            notes.append("llm_judge: parsed, scores nothing")
        elif kind not in ("exit_ok", "max_turns", "max_tokens", "tool_sequence"):
            notes.append(f"unknown scorer type {kind!r}: skipped")
        else:
            kept.append(scorer)
    if not kept:
        notes.append("no scorers: nothing to score")
    return kept, notes


def records(config: Any, session: Session, *, ts: int, case_id: str | None,
            dataset_id: str | None) -> list[dict[str, Any]]:
    """One `event_score` per scorer, then one `dataset_run`; none without a scorer."""
    kept, _notes = scorers_of(config)
    if not kept:
        return []
    out: list[dict[str, Any]] = []
    scores: dict[str, float] = {}
    for scorer in kept:
        verdict = score(scorer, session)
        if verdict is None:
            continue
        passed, reason = verdict
        name = scorer.get("name") or scorer["type"]
        scores[name] = 1.0 if passed else 0.0
        out.append({"record_type": "event_score", "ts": ts, "turn": session.total_turns, "event_type": "session_end",
                    "scorer": name, "result": "pass" if passed else "fail", "score": scores[name], "reason": reason})
    overall = "no_scores" if not scores else "fail" if any(v < 1.0 for v in scores.values()) else "pass"
    out.append({"record_type": "dataset_run", "ts": ts, "dataset_id": dataset_id, "case_id": case_id,
                "overall": overall, "scores": scores})
    return out
