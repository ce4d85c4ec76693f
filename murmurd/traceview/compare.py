"""`trace diff`: two sessions side by side, with upstream's delta rules (fact sheet §5).

A delta is `=` when the values are equal (floats within 0.05), else the signed B − A and which
run is better: lower is better for every number but the tool success rate. Values that are not
numbers (compaction, exit status) or are missing in either run get `—` unless equal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from murmurd.traceview import units
from murmurd.traceview.metrics import SessionMetrics

FLOAT_EPSILON = 0.05


@dataclass(frozen=True)
class Row:
    metric: str
    a: Any
    b: Any
    shown_a: str
    shown_b: str
    delta: str
    better: str | None  # "A" | "B" | None

    def to_json(self) -> dict[str, Any]:
        return {"metric": self.metric, "a": self.a, "b": self.b, "delta": self.delta, "better": self.better}


def _compaction(m: SessionMetrics) -> str:
    return "none" if m.compaction is None else f"turn {m.compaction[0]}"


# metric -> (value of a session, how to show it, higher is better)
_METRICS: list[tuple[str, Any, Any, bool]] = [
    ("turns", lambda m: m.turns, units.count, False),
    ("duration", lambda m: m.duration_ms, units.duration, False),
    ("input tokens", lambda m: m.input_tokens, units.count, False),
    ("output tokens", lambda m: m.output_tokens, units.count, False),
    ("input/turn (avg)", lambda m: m.per_turn(m.input_tokens), units.count, False),
    ("output/turn (avg)", lambda m: m.per_turn(m.output_tokens), units.count, False),
    ("tool calls", lambda m: len(m.tools), units.count, False),
    ("tool success rate", lambda m: m.tool_success_rate, units.percent, True),
    ("avg tool latency", lambda m: m.avg_tool_ms, units.duration, False),
    ("skill calls", lambda m: len(m.skills), units.count, False),
    ("shell calls", lambda m: len(m.shells), units.count, False),
    ("avg shell latency", lambda m: m.avg_shell_ms, units.duration, False),
    ("compaction", _compaction, str, False),
    ("exit status", lambda m: m.exit_status, str, False),
]


def _signed(value: float, show: Any) -> str:
    sign = "+" if value > 0 else "-"
    return sign + show(abs(value))


def delta(a: Any, b: Any, show: Any, higher_better: bool) -> tuple[str, str | None]:
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b))
    if not numeric:
        return ("=", None) if a is not None and a == b else ("—", None)
    difference = b - a
    equal = difference == 0 if isinstance(a, int) and isinstance(b, int) else abs(difference) <= FLOAT_EPSILON
    if equal:
        return "=", None
    b_better = difference > 0 if higher_better else difference < 0
    better = "B" if b_better else "A"
    return f"{_signed(difference, show)} ({better} better)", better


def diff_rows(a: SessionMetrics, b: SessionMetrics) -> list[Row]:
    rows = []
    for name, value, show, higher in _METRICS:
        va, vb = value(a), value(b)
        shown, better = delta(va, vb, show, higher)
        rows.append(Row(name, va, vb, show(va) if va is not None else "—", show(vb) if vb is not None else "—",
                        shown, better))
    return rows
