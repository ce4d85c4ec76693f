"""The `tool/run` of a bundled driver: request JSON in, response JSON (or a clear error) out.

Every failure, expected or not, is an `error` tool-result naming the provider, so a driver
never traps: the task fails with a message the operator can act on.
"""

from __future__ import annotations

import json
import os
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from wit_world.exports import run

from driverkit.errors import DriverFailure
from driverkit.settings import Settings, load_settings


@dataclass
class Answer:
    """A driver protocol response and the result metadata that goes with it."""

    response: dict[str, Any]
    metadata: list[tuple[str, str]] = field(default_factory=list)


Handler = Callable[[dict[str, Any], Settings], Answer]


def handle(provider: str, default_endpoint: str, data: str | None, handler: Handler) -> run.ToolResult:
    try:
        request = parse_request(data)
        settings = load_settings(os.environ, default_endpoint)
        answer = handler(request, settings)
    except DriverFailure as exc:
        return failure(f"{provider}: {exc}")
    except Exception as exc:  # a driver bug: report it, never trap the call
        print(traceback.format_exc())
        return failure(f"{provider}: internal driver error: {type(exc).__name__}: {exc}")
    return run.ToolResult(
        status=run.Status.PASSED, summary=None, data=json.dumps(answer.response, ensure_ascii=False),
        data_path=None, truncated=False, metadata=answer.metadata,
    )


def parse_request(data: str | None) -> dict[str, Any]:
    if not data:
        raise DriverFailure("no request data")
    try:
        request = json.loads(data)
    except ValueError as exc:
        raise DriverFailure(f"request is not JSON: {exc}") from None
    if not isinstance(request, dict) or not isinstance(request.get("messages", []), list):
        raise DriverFailure("request is not a driver request object")
    return request


def failure(message: str) -> run.ToolResult:
    return run.ToolResult(status=run.Status.ERROR, summary=message, data=message, data_path=None,
                          truncated=False, metadata=[])
