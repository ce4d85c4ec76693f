"""Why a call ended: wasmtime's errors turned into the host's typed errors."""

from __future__ import annotations

from wasmtime import WasmtimeError

from murmurd.host.context import CallContext
from murmurd.host.errors import (
    CallCancelled,
    CallTrap,
    DeadlineExceeded,
    HostError,
    HostImportError,
    InstantiationError,
    MemoryLimitExceeded,
)
from murmurd.host.wasi import CallGrant

_ALLOC_FAILURE_MARKERS = (b"memory allocation of", b"MemoryError", b"out of memory")
_MEMORY_LIMIT_MARKERS = ("exceeds memory limits", "memory minimum size")


def first_cause(message: str) -> str:
    """The innermost 'Caused by' line of a wasmtime error, else its first line."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    if "Caused by:" in lines:
        rest = lines[lines.index("Caused by:") + 1 :]
        if rest:
            return rest[-1].lstrip("0123456789: ").strip() or rest[-1]
    return lines[0] if lines else "unknown error"


def classify(artifact: str, exc: WasmtimeError, call: CallContext, grant: CallGrant) -> HostError:
    """Turn wasmtime's error into the typed error that says why the call ended."""
    guard = call.guard
    if guard.cause == "deadline":
        return DeadlineExceeded(artifact, (guard.expired or guard).deadline_seconds)
    if guard.cause == "cancelled":
        return CallCancelled(artifact, guard.cancel_reason or "cancelled")
    if call.import_failure is not None:
        failure = call.import_failure
        return HostImportError(artifact, f"host import failed: {failure}", failure)
    message = str(exc)
    cause = first_cause(message)
    tail = call.output.stderr_tail
    if any(marker in message for marker in _MEMORY_LIMIT_MARKERS) or any(m in tail for m in _ALLOC_FAILURE_MARKERS):
        return MemoryLimitExceeded(artifact, grant.limits.memory_bytes, cause)
    if call.stage == "instantiate":
        return InstantiationError(artifact, f"cannot instantiate: {cause}")
    last_stderr = tail.decode("utf-8", "replace").strip().splitlines()[-1:] if tail else []
    detail = f" (stderr: {last_stderr[0]})" if last_stderr else ""
    return CallTrap(artifact, f"trap: {cause}{detail}")
