"""JSON a provider's stream carries, checked: an event's data object and a tool call's arguments."""

from __future__ import annotations

import json
from typing import Any

from driverkit.errors import StreamError


def parse_arguments(name: Any, raw: str) -> dict[str, Any]:
    """A tool call's JSON arguments (empty is `{}`); the model writing something else is a clear failure."""
    raw = raw.strip()
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        raise StreamError(f"the model's arguments for tool {name!r} are not JSON: {raw[:120]!r}") from None
    if not isinstance(value, dict):
        raise StreamError(f"the model's arguments for tool {name!r} are not a JSON object: {raw[:120]!r}")
    return value


def parse_event(data: str, where: str) -> dict[str, Any]:
    """An SSE event's data as a JSON object; `where` names the event in the error."""
    try:
        value = json.loads(data)
    except ValueError:
        raise StreamError(f"malformed stream: {where} data is not JSON: {data[:120]!r}") from None
    if not isinstance(value, dict):
        raise StreamError(f"malformed stream: {where} data is not an object")
    return value
