"""Write-file tool: a `tool` artifact with a filesystem side effect.

Demonstrates WASI filesystem access from a tool (the host preopens the granted directory
as `.`, so paths are relative to the current directory), the three result statuses
(ERROR for bad input, FAILED for an OSError, PASSED otherwise), `data-path`, and the
`state_effect` / `resource_id` metadata a mutating tool reports.
"""

from __future__ import annotations

import json
import os

from wit_world import exports
from wit_world.exports import run


class BadInput(Exception):
    """Input that does not describe a file write; reported as an ERROR result."""


def _parse(data: str | None) -> tuple[str, str]:
    """The (path, content) pair the input asks to write."""
    if data is None:
        raise BadInput('missing input: expected {"path": ..., "content": ...}')
    try:
        request = json.loads(data)
    except ValueError as exc:
        raise BadInput(f"input is not valid JSON: {exc}") from exc
    if not isinstance(request, dict):
        raise BadInput("input must be a JSON object")
    missing = [key for key in ("path", "content") if key not in request]
    if missing:
        raise BadInput(f"missing key(s): {', '.join(missing)}")
    path, content = request["path"], request["content"]
    if not isinstance(path, str) or not path:
        raise BadInput('"path" must be a non-empty string')
    if not isinstance(content, str):
        raise BadInput('"content" must be a string')
    if os.path.isabs(path):
        raise BadInput(f'"path" must be relative to the granted directory, got {path!r}')
    return path, content


def _result(
    status: run.Status,
    summary: str,
    data_path: str | None = None,
    metadata: list[tuple[str, str]] | None = None,
) -> run.ToolResult:
    return run.ToolResult(
        status=status,
        summary=summary,
        data=None,
        data_path=data_path,
        truncated=False,
        metadata=metadata or [],
    )


class Run(exports.Run):
    def run(self, input: run.ToolInput) -> run.ToolResult:
        try:
            path, content = _parse(input.data)
        except BadInput as exc:
            return _result(run.Status.ERROR, str(exc))
        encoded = content.encode("utf-8")
        try:
            parent = os.path.dirname(path)
            if parent:
                os.makedirs(parent, exist_ok=True)
            with open(path, "wb") as handle:
                handle.write(encoded)
        except OSError as exc:
            return _result(run.Status.FAILED, f"cannot write {path}: {exc}")
        return _result(
            run.Status.PASSED,
            f"wrote {len(encoded)} bytes to {path}",
            data_path=path,
            metadata=[("state_effect", "mutate"), ("resource_id", f"file:{path}")],
        )
