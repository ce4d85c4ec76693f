"""Typed failures of the component host. Each names the artifact and the cause."""

from __future__ import annotations


class HostError(Exception):
    """A component could not be loaded or a call did not complete."""

    def __init__(self, artifact: str, cause: str) -> None:
        super().__init__(f"{artifact}: {cause}")
        self.artifact = artifact
        self.cause = cause


class ContractError(HostError):
    """The component does not match the contract this host serves (role, interface, version)."""


class CompileError(HostError):
    """The bytes are not a valid component for this engine."""


class InstantiationError(HostError):
    """The component could not be instantiated (a missing import, a limit at start-up)."""


class CallTrap(HostError):
    """The guest trapped during the call."""


class DeadlineExceeded(CallTrap):
    def __init__(self, artifact: str, seconds: float) -> None:
        super().__init__(artifact, f"deadline exceeded after {seconds:g} s")
        self.seconds = seconds


class MemoryLimitExceeded(CallTrap):
    def __init__(self, artifact: str, limit_bytes: int, detail: str = "") -> None:
        mib = limit_bytes / (1024 * 1024)
        cause = f"memory limit of {mib:g} MiB exceeded"
        super().__init__(artifact, f"{cause}: {detail}" if detail else cause)
        self.limit_bytes = limit_bytes


class CallCancelled(CallTrap):
    def __init__(self, artifact: str, reason: str = "cancelled") -> None:
        super().__init__(artifact, reason)


class HostImportError(CallTrap):
    """A host import failed in a way the guest could not be told about (it trapped)."""

    def __init__(self, artifact: str, cause: str, failure: BaseException | None = None) -> None:
        super().__init__(artifact, cause)
        self.failure = failure


class HookError(HostError):
    """A hook handler returned the WIT `err` arm: the hook ran and reported a failure itself.

    Not a `CallTrap`: the instance is intact and keeps its state. `message` is the hook's text."""

    def __init__(self, artifact: str, message: str, handler: str | None = None) -> None:
        super().__init__(artifact, f"{handler} returned err: {message}" if handler else message)
        self.message = message
        self.handler = handler
