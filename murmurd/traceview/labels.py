"""Ids short enough to read and still told apart (pure). Session and task ids are UUIDv7:
their first digits are the time they were made, so ids of one afternoon share a long prefix
and a cut prefix (`ses_01a233b3…`) names them all alike. A label keeps the prefix and adds the
shortest tail that no other id of the same listing shares."""

from __future__ import annotations

HEAD = 12
MIN_TAIL = 6


def distinct_labels(ids: list[str], head: int = HEAD) -> dict[str, str]:
    """`ses_01a233b3…c63d2b11` for each id: `head` characters, `…`, the shortest tail (at least
    MIN_TAIL) that tells it from every other id given. An id short enough stays whole."""
    unique = list(dict.fromkeys(ids))
    labels: dict[str, str] = {}
    for value in unique:
        if len(value) <= head + MIN_TAIL + 1:
            labels[value] = value
            continue
        others = [o for o in unique if o != value]
        tail = MIN_TAIL
        while tail < len(value) - head and any(o.endswith(value[-tail:]) for o in others):
            tail += 1
        labels[value] = f"{value[:head]}…{value[-tail:]}"
    return labels
