"""Echo tool: the smallest `tool` artifact.

Demonstrates the `murmur:tool/run` export (returning a `tool-result` record), result
metadata, and streaming a chunk through the `murmur:text/chunks` import. The input is
returned verbatim; a JSON object input may carry `"metadata"` (string -> string pairs, echoed
back as the result's metadata) and `"text"` (echoed as one `echo: ...` chunk).
"""

from __future__ import annotations

import json
from typing import Any

from wit_world import exports
from wit_world.exports import run
from wit_world.imports import chunks

DEFAULT_METADATA: list[tuple[str, str]] = [("state_effect", "read")]


def _parse_object(data: str | None) -> dict[str, Any] | None:
    """`data` as a JSON object, or None when it is absent or not an object."""
    if data is None:
        return None
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _metadata(obj: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The input's `"metadata"` pairs in order, when it is an object of strings."""
    if obj is None:
        return list(DEFAULT_METADATA)
    meta = obj.get("metadata")
    if isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values()):
        return [(key, value) for key, value in meta.items()]
    return list(DEFAULT_METADATA)


class Run(exports.Run):
    def run(self, input: run.ToolInput) -> run.ToolResult:
        obj = _parse_object(input.data)
        if obj is not None and isinstance(obj.get("text"), str):
            chunks.emit_chunk(f"echo: {obj['text']}")
        size = len(input.data.encode("utf-8")) if input.data is not None else 0
        return run.ToolResult(
            status=run.Status.PASSED,
            summary=f"echoed {size} bytes",
            data=input.data,
            data_path=None,
            truncated=False,
            metadata=_metadata(obj),
        )
