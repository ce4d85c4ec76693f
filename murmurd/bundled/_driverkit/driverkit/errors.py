"""The failures a driver reports as an `error` tool-result instead of trapping."""

from __future__ import annotations

import json


class DriverFailure(Exception):
    """Anything that ends a driver call without a model answer; the message is user-facing."""


class ConfigError(DriverFailure):
    """The driver's configuration or request cannot be used."""


class TransportError(DriverFailure):
    """No HTTP response: the connection was refused, reset or timed out (WASI `error-code`)."""

    def __init__(self, message: str, retryable: bool = True) -> None:
        self.retryable = retryable
        super().__init__(message)


class StreamError(DriverFailure):
    """The provider's event stream broke the API's wire format (bad JSON, an early end)."""


class ProviderError(DriverFailure):
    """The provider answered with an error status or an error event."""

    def __init__(self, status: int | None, message: str) -> None:
        self.status = status
        super().__init__(f"HTTP {status}: {message}" if status is not None else message)


def error_message(body: bytes) -> str:
    """A provider error body as `<type>: <message>`; both APIs nest it under `error`.

    A body that is not the documented JSON is quoted (cut to 300 characters) rather than lost.
    """
    text = body.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return text[:300] or "(empty body)"
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        kind = error.get("type") or error.get("code")
        message = error.get("message") or json.dumps(error)[:300]
        return f"{kind}: {message}" if kind else str(message)
    if isinstance(error, str):
        return error
    return text[:300]
