"""Where an editor call will write, found in an inference event's JSON (pure)."""

from __future__ import annotations

import json
from typing import Any

EDITOR = "murmur-tool-editor"
UPSTREAM_WRITES = {"write_file", "replace_in_file"}  # the published editor's `operation`
MURMURD_WRITES = {"write", "patch"}  # murmurd's bundled editor's `op`


def _parsed(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def path_in(value: Any) -> str | None:
    """The published search for an editor write's path in a JSON value."""
    if isinstance(value, dict):
        for key, writes in (("operation", UPSTREAM_WRITES), ("op", MURMURD_WRITES)):
            if isinstance(value.get(key), str):  # an operation object decides: a write, or nothing
                path = value.get("path")
                return path if value[key] in writes and isinstance(path, str) else None
        if "input" in value:
            found = path_in(value["input"])
            if found:
                return found
        data = value.get("data")
        inner = _parsed(data) if isinstance(data, str) else data if isinstance(data, (dict, list)) else None
        return path_in(inner) if inner is not None else None
    if isinstance(value, list):
        return next((p for p in map(path_in, value) if p), None)
    if isinstance(value, str):
        inner = _parsed(value)
        return path_in(inner) if inner is not None else None
    return None


def write_paths(output: str | None, tools: str | None, tool_name: str | None) -> list[str]:
    """The paths the editor calls of one inference will write, in call order: from each editor
    `tool_call` block of `output` (the response content); with none, the published search of
    `tools` then `output`, when the turn's first call is the editor's."""
    content = _parsed(output) if output else None
    blocks = content if isinstance(content, list) else []
    paths = [path_in(block.get("input")) for block in blocks
             if isinstance(block, dict) and block.get("type") == "tool_call" and block.get("name") == EDITOR]
    found = [p for p in paths if p]
    if not found and tool_name == EDITOR:
        sources = (_parsed(text) for text in (tools, output) if text)
        found = [next((p for p in map(path_in, sources) if p), None)]
    return [p[2:] if p.startswith("./") else p for p in found if p]
