"""The component host: wasmtime engine, compile cache, limits, WASI, host imports, worker pool."""

from murmurd.host.context import AbortTask, CallContext, ImportFailed, SessionContext
from murmurd.host.errors import (
    CallCancelled,
    CallTrap,
    CompileError,
    ContractError,
    DeadlineExceeded,
    HostError,
    HookError,
    HostImportError,
    InstantiationError,
    MemoryLimitExceeded,
)
from murmurd.host.hook_instance import HookInstance
from murmurd.host.host import ComponentHost
from murmurd.host.loaded import LoadedComponent
from murmurd.host.interrupt import CallGuard
from murmurd.host.limits import DEFAULT_LIMITS, HOOK_LIMITS, Limits
from murmurd.host.values import ToolInput, ToolResult, ToolStatus
from murmurd.host.wasi import CallGrant

# The one place the host and the hook instance meet: `ComponentHost.hook_instance` builds these.
ComponentHost.hook_factory = HookInstance

__all__ = [
    "AbortTask", "HookError", "HookInstance", "HostImportError",
    "CallCancelled", "CallContext", "CallGrant", "CallGuard", "CallTrap", "CompileError",
    "ComponentHost", "ContractError", "DeadlineExceeded", "DEFAULT_LIMITS", "HOOK_LIMITS",
    "HostError", "ImportFailed", "InstantiationError", "Limits", "LoadedComponent",
    "MemoryLimitExceeded", "SessionContext", "ToolInput", "ToolResult", "ToolStatus",
]
