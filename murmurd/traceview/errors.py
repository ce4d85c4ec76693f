"""The errors `murmurd trace` and `murmurd eval` report: `error[CODE]: message`, exit 1."""

from __future__ import annotations


class ReadError(Exception):
    """A trace (or eval file) that cannot be selected, read or parsed; `code` is upstream's."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"error[{self.code}]: {self.message}"


BAD_TRACE = "E-TRC-001"  # a line that does not decode, an empty file, no session_start/session_end
BAD_SELECTOR = "E-TRC-002"  # no session matches, several match, `@N` out of range, misused arguments
IO_ERROR = "E-IO-001"  # a workdir or file that does not exist or cannot be read
