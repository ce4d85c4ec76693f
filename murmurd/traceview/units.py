"""How numbers read in `murmurd trace`: durations, counts with thousands commas, rates.

A trace is a file a component could have written: any integer field may hold 400 digits. Every
rule here takes such a number without an OverflowError (`finite` turns it into +/-inf, shown
`∞`), so one absurd line never stops a reader.
"""

from __future__ import annotations

import math

OUT_OF_RANGE = "∞"


def finite(value: float) -> float:
    """`value` as a float: an integer beyond a float's range is +/-inf, never an OverflowError."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def ratio(numerator: float, denominator: float) -> float:
    """`numerator / denominator` (exact for huge integers whose ratio fits), +/-inf beyond."""
    try:
        return numerator / denominator
    except OverflowError:
        return math.inf if (numerator > 0) == (denominator > 0) else -math.inf


def _out_of_range(value: float) -> str:
    return OUT_OF_RANGE if value > 0 else "-" + OUT_OF_RANGE


def duration(ms: float | None) -> str:
    if ms is None:
        return "—"
    shown = finite(ms)
    if not math.isfinite(shown):
        return _out_of_range(shown) if not math.isnan(shown) else "—"
    if shown < 1000:
        return f"{shown:.0f}ms" if shown.is_integer() else f"{shown:.1f}ms"
    if shown < 60_000:
        return f"{shown / 1000:.1f}s"
    minutes, seconds = divmod(shown / 1000, 60)
    return f"{int(minutes)}m{seconds:04.1f}s"


def count(value: float | None) -> str:
    if value is None:
        return "—"
    if isinstance(value, int):
        return f"{value:,}"
    if not math.isfinite(value):
        return _out_of_range(value) if not math.isnan(value) else "—"
    if value.is_integer():
        return f"{int(value):,}"
    return f"{value:,.1f}"


def percent(value: float | None) -> str:
    if value is None:
        return "—"
    shown = finite(value)
    if not math.isfinite(shown):
        return _out_of_range(shown) if not math.isnan(shown) else "—"
    return f"{shown:.0f}%" if shown.is_integer() else f"{shown:.1f}%"
