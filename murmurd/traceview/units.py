"""How numbers read in `murmurd trace`: durations, counts with thousands commas, rates."""

from __future__ import annotations


def duration(ms: float | None) -> str:
    if ms is None:
        return "—"
    if ms < 1000:
        return f"{ms:.0f}ms" if float(ms).is_integer() else f"{ms:.1f}ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f}s"
    minutes, seconds = divmod(ms / 1000, 60)
    return f"{int(minutes)}m{seconds:04.1f}s"


def count(value: float | None) -> str:
    if value is None:
        return "—"
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.1f}"


def percent(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f}%" if float(value).is_integer() else f"{value:.1f}%"
