"""Monotonic time and sleeping through `wasi:clocks/monotonic-clock` (retry back-off)."""

from __future__ import annotations

from wit_world.imports import monotonic_clock


def now() -> float:
    return monotonic_clock.now() / 1_000_000_000


def sleep(seconds: float) -> None:
    if seconds <= 0:
        return
    with monotonic_clock.subscribe_duration(int(seconds * 1_000_000_000)) as pollable:
        pollable.block()
