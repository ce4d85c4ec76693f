"""One error type carrying upstream's diagnostic code, message and hint."""

from __future__ import annotations


class RegistryError(RuntimeError):
    """A refusal with upstream's code (`E-REG-002`, `E-IO-003`, ...), printed as
    `error[<code>]: <message>` and, when there is one, `  hint: <hint>`."""

    def __init__(self, code: str, message: str, hint: str | None = None) -> None:
        super().__init__(f"error[{code}]: {message}" + (f"\n  hint: {hint}" if hint else ""))
        self.code = code
        self.message = message
        self.hint = hint


class NotFound(RegistryError):
    """Nothing of that name and version here; the next store or source is tried."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__("E-REG-001", message, hint)
