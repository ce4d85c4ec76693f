"""Resource limits applied to every call."""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024 * 1024
DEFAULT_DEADLINE_SECONDS = 600.0
HOOK_DEADLINE_SECONDS = 30.0


@dataclass(frozen=True)
class Limits:
    memory_bytes: int = 512 * MIB
    table_elements: int = 100_000
    instances: int = 1_000
    deadline_seconds: float = DEFAULT_DEADLINE_SECONDS


DEFAULT_LIMITS = Limits()
HOOK_LIMITS = Limits(deadline_seconds=HOOK_DEADLINE_SECONDS)
