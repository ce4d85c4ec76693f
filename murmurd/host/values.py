"""Host-side values of the `murmur:tool/run` types, and their conversion to wasmtime records.

wasmtime-py lifts a WIT record into an object whose attributes carry the WIT field names
(hyphens included) and lowers any object with those attributes. These helpers keep that
detail in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from wasmtime.component import Record


class ToolStatus(str, Enum):
    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"


@dataclass(frozen=True)
class ToolInput:
    data: str | None = None
    log_path: str | None = None


@dataclass
class ToolResult:
    status: ToolStatus
    summary: str | None = None
    data: str | None = None
    data_path: str | None = None
    truncated: bool = False
    metadata: list[tuple[str, str]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The WIT shape, with WIT field names, for printing and tracing."""
        return {
            "status": self.status.value,
            "summary": self.summary,
            "data": self.data,
            "data-path": self.data_path,
            "truncated": self.truncated,
            "metadata": [list(pair) for pair in self.metadata],
        }


def make_record(**fields: Any) -> Record:
    """A wasmtime record; Python names map to WIT names (`data_path` -> `data-path`)."""
    record = Record()
    for name, value in fields.items():
        setattr(record, name.replace("_", "-"), value)
    return record


def field_of(record: Any, name: str) -> Any:
    """Read WIT field `name` (written with hyphens) from a lifted record."""
    return getattr(record, name)


def tool_input_to_wasm(value: ToolInput) -> Record:
    return make_record(data=value.data, log_path=value.log_path)


def tool_input_from_wasm(record: Any) -> ToolInput:
    return ToolInput(data=field_of(record, "data"), log_path=field_of(record, "log-path"))


def tool_result_from_wasm(record: Any) -> ToolResult:
    return ToolResult(
        status=ToolStatus(field_of(record, "status")),
        summary=field_of(record, "summary"),
        data=field_of(record, "data"),
        data_path=field_of(record, "data-path"),
        truncated=bool(field_of(record, "truncated")),
        metadata=[(str(k), str(v)) for k, v in field_of(record, "metadata")],
    )


def tool_result_to_wasm(value: ToolResult) -> Record:
    return make_record(
        status=value.status.value,
        summary=value.summary,
        data=value.data,
        data_path=value.data_path,
        truncated=value.truncated,
        metadata=list(value.metadata),
    )
