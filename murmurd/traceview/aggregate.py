"""`trace report`: several sessions summed up (fact sheet §5): mean, population standard
deviation, min and max per metric, the exit-status distribution and per-task averages."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass
from typing import Any

from murmurd.traceview import units
from murmurd.traceview.metrics import SessionMetrics


@dataclass(frozen=True)
class Stat:
    metric: str
    mean: float
    stddev: float
    minimum: float
    maximum: float
    n: int

    def to_json(self) -> dict[str, Any]:
        return {"metric": self.metric, "mean": self.mean, "stddev": self.stddev, "min": self.minimum,
                "max": self.maximum, "n": self.n}


def stat(metric: str, values: list[float]) -> Stat | None:
    if not values:
        return None
    floats = [units.finite(v) for v in values]  # a 400-digit field: inf, never an OverflowError
    try:
        spread = statistics.pstdev(floats)
    except (OverflowError, ValueError):
        spread = math.nan
    return Stat(metric, statistics.fmean(floats), spread, min(values), max(values), len(values))


_ROWS: list[tuple[str, Any]] = [
    ("turns", lambda m: m.turns),
    ("duration (ms)", lambda m: m.duration_ms),
    ("input tokens", lambda m: m.input_tokens),
    ("output tokens", lambda m: m.output_tokens),
    ("tool calls", lambda m: len(m.tools)),
    ("tool success (%)", lambda m: m.tool_success_rate),  # None (no tool calls): left out
    ("skill calls", lambda m: len(m.skills)),  # murmurd's row: skills never count as tool calls
    ("shell calls", lambda m: len(m.shells)),
    ("redundant calls", lambda m: len(m.redundant)),
]

_TASK_ROWS: list[tuple[str, Any]] = [
    ("turns", lambda t: t.turns),
    ("duration (ms)", lambda t: t.duration_ms),
    ("input tokens", lambda t: t.input_tokens),
    ("output tokens", lambda t: t.output_tokens),
    ("tool calls", lambda t: t.tool_calls),
    ("reopens", lambda t: t.reopen_count),
]


@dataclass
class Report:
    sessions: list[SessionMetrics]
    stats: list[Stat]
    exit_statuses: list[tuple[str, int, float]]  # status, count, percent
    per_task: list[Stat] | None  # when any session ran more than one task

    def to_json(self) -> dict[str, Any]:
        return {
            "sessions": [{"session_id": m.session_id, "path": m.path, "duration_ms": m.duration_ms,
                          "turns": m.turns, "exit_status": m.exit_status, "tool_calls": len(m.tools),
                          "tool_ok": m.tool_ok, "skill_calls": len(m.skills),
                          "skill_ok": sum(1 for c in m.skills if c.ok), "shell_calls": len(m.shells),
                          "shell_exit_codes": [c.exit_code for c in m.shells],
                          "redundant_calls": [r.to_json() for r in m.redundant],
                          "avg_tool_latency_ms": m.avg_tool_ms} for m in self.sessions],
            "stats": [s.to_json() for s in self.stats],
            "exit_status": [{"status": s, "count": c, "percent": p} for s, c, p in self.exit_statuses],
            "per_task": None if self.per_task is None else [s.to_json() for s in self.per_task],
        }


def build_report(sessions: list[SessionMetrics]) -> Report:
    stats = []
    for name, value in _ROWS:
        values = [v for v in (value(m) for m in sessions) if v is not None]
        row = stat(name, values)
        if row is not None:
            stats.append(row)
    counts = Counter(m.exit_status for m in sessions)
    statuses = [(s, c, 100.0 * c / len(sessions)) for s, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    per_task = None
    if any(len(m.tasks) > 1 for m in sessions):
        tasks = [t for m in sessions for t in m.tasks]
        per_task = [s for s in (stat(name, [value(t) for t in tasks]) for name, value in _TASK_ROWS) if s is not None]
    return Report(sessions, stats, statuses, per_task)
