"""The seed's usage members, taken from a provider's own usage object; absent stays absent."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def pick(source: Any, path: str) -> int | None:
    """The non-negative integer at a dotted `path` of nested objects, or None (never a made-up 0)."""
    value = source
    for key in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def report(source: Any, mapping: Mapping[str, str]) -> dict[str, int]:
    """`{member: provider path}` -> the members the provider reported."""
    found = {member: pick(source, path) for member, path in mapping.items()}
    return {member: value for member, value in found.items() if value is not None}
