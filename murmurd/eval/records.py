"""`eval.jsonl` records (fact sheet §6) and what `eval show` / `eval diff` make of them.

Lines are `event_score` (one per scorer) and `dataset_run` (one, last); other record types and
unknown keys are ignored. A line that does not decode, or a known record without its fields, is
`E-EVAL-001` with `path:line`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from murmurd.traceview.errors import ReadError

BAD_EVAL = "E-EVAL-001"
NO_EVAL = "E-EVAL-002"
WORST_EVENTS = 5
EQUAL_RATES = 0.001  # pass rates (0..1) this close are shown `=`


@dataclass(frozen=True)
class EventScore:
    line: int
    scorer: str
    result: str  # pass | fail
    turn: int
    reason: str
    event_type: str

    @property
    def passed(self) -> bool:
        return self.result == "pass"


@dataclass
class EvalFile:
    path: str
    events: list[EventScore] = field(default_factory=list)
    dataset_run: dict[str, Any] | None = None  # the last one

    def scorers(self) -> dict[str, dict[str, Any]]:
        """name -> pass, fail, total, pass_rate (0..1), in first-seen order."""
        out: dict[str, dict[str, Any]] = {}
        for event in self.events:
            row = out.setdefault(event.scorer, {"pass": 0, "fail": 0, "total": 0, "pass_rate": 0.0})
            row["pass" if event.passed else "fail"] += 1
            row["total"] += 1
            row["pass_rate"] = row["pass"] / row["total"]
        return out

    @property
    def overall(self) -> str:
        """The dataset_run's verdict, else `no_scores` / `pass` (every scorer all-pass) / `fail`."""
        if self.dataset_run is not None and isinstance(self.dataset_run.get("overall"), str):
            return self.dataset_run["overall"]
        if not self.events:
            return "no_scores"
        return "pass" if all(e.passed for e in self.events) else "fail"

    def worst(self) -> list[EventScore]:
        failing = sorted((e for e in self.events if not e.passed), key=lambda e: (e.scorer, e.turn))
        return failing[:WORST_EVENTS]

    def to_json(self) -> dict[str, Any]:
        return {"overall": self.overall, "scorers": self.scorers(), "dataset_run": self.dataset_run}


def score_value(value: Any) -> float:
    """A dataset_run score as a float: an integer too large for one is +/-inf, never an
    OverflowError (a hook or a tool writes these numbers; `eval show` and `eval run` go on)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _line(raw: bytes, path: str, number: int, into: EvalFile) -> None:
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ReadError(BAD_EVAL, f"{path}:{number}: not a JSON line ({type(exc).__name__})") from None
    if not isinstance(value, dict):
        raise ReadError(BAD_EVAL, f"{path}:{number}: not a JSON object")
    kind = value.get("record_type")
    if kind == "event_score":
        scorer, result, turn = value.get("scorer"), value.get("result"), value.get("turn", 0)
        if not isinstance(scorer, str) or result not in ("pass", "fail") or not _int(turn):
            raise ReadError(BAD_EVAL, f"{path}:{number}: event_score needs scorer, result pass|fail and an integer turn")
        reason, trigger = value.get("reason"), value.get("event_type")
        into.events.append(EventScore(number, scorer, result, turn, reason if isinstance(reason, str) else "",
                                      trigger if isinstance(trigger, str) else ""))
    elif kind == "dataset_run":
        scores = value.get("scores", {})
        if not isinstance(scores, dict) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                   for v in scores.values()):
            raise ReadError(BAD_EVAL, f"{path}:{number}: dataset_run.scores must map names to numbers")
        into.dataset_run = value


def parse_eval(data: bytes, path: str) -> EvalFile:
    parsed = EvalFile(path)
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if raw.strip():
            _line(raw, path, number, parsed)
    return parsed


@dataclass(frozen=True)
class DiffRow:
    scorer: str
    a: float | None  # pass rate 0..1, None: not in that run
    b: float | None
    delta: str

    def to_json(self) -> dict[str, Any]:
        return {"scorer": self.scorer, "a": self.a, "b": self.b, "delta": self.delta}


def diff_rows(a: EvalFile, b: EvalFile) -> list[DiffRow]:
    """Per scorer of either run: pass rates and the change in percentage points."""
    rates_a = {k: v["pass_rate"] for k, v in a.scorers().items()}
    rates_b = {k: v["pass_rate"] for k, v in b.scorers().items()}
    rows = []
    for name in [*rates_a, *(n for n in rates_b if n not in rates_a)]:
        ra, rb = rates_a.get(name), rates_b.get(name)
        if ra is None:
            delta = "(B only)"
        elif rb is None:
            delta = "(A only)"
        elif abs(rb - ra) <= EQUAL_RATES:
            delta = "="
        else:
            delta = f"{(rb - ra) * 100:+.1f}pp"
        rows.append(DiffRow(name, ra, rb, delta))
    return rows
