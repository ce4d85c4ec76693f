"""Normalise a driver's reported token `usage` (seed: "Reported token usage").

The report is recorded, never acted on, and a malformed report degrades to no report rather
than failing the call: a `usage` that is not an object records nothing; a member that is not
a non-negative integer, or that the runtime does not define, records nothing for that member
while its well-formed siblings are kept. An absent member stays absent (never `0`): a `0`
reads as a genuine cache miss on the trace.
"""

from __future__ import annotations

from collections.abc import Mapping

# The members the runtime defines, in the order they are recorded.
USAGE_MEMBERS: tuple[str, ...] = ("input_tokens", "output_tokens", "cached_tokens", "cache_write_tokens")


def is_token_count(value: object) -> bool:
    """A non-negative integer. `True`, `3.0` and `"3"` are not."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def normalize_usage(raw: object) -> dict[str, int]:
    """The well-formed members of a `usage` value, in `USAGE_MEMBERS` order; `{}` for a non-object."""
    if not isinstance(raw, Mapping):
        return {}
    return {name: int(raw[name]) for name in USAGE_MEMBERS if name in raw and is_token_count(raw[name])}
