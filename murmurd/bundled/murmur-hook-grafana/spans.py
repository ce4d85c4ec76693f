"""The published grafana hook's trace: its ids, its spans and their OTLP/JSON encoding (pure)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

FNV_OFFSET = 14695981039346656037
FNV_PRIME = 1099511628211
SCOPE = "murmur-hook-grafana"
SCOPE_VERSION = "0.3.0"


def _fnv1a(data: bytes) -> int:
    h = FNV_OFFSET
    for byte in data:
        h = ((h ^ byte) * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h


def trace_id_of(session_id: str) -> str:
    """FNV-1a-64 of the session id, then of that hash's 8 little-endian bytes: 32 hex digits
    (the same id murmur-hook-eval stamps on its logs)."""
    h1 = _fnv1a(session_id.encode("utf-8"))
    h2 = _fnv1a(h1.to_bytes(8, "little"))
    return f"{h1:016x}{h2:016x}"


@dataclass
class Span:
    span_id: str
    parent_span_id: str
    name: str
    start_ns: int
    end_ns: int
    attributes: list[tuple[str, Any]]
    ok: bool


@dataclass
class Trace:
    """One session's spans, buffered until its end."""

    endpoint: str
    capsule_name: str
    capsule_version: str
    session_id: str
    model: str
    start_ns: int
    trace_id: str = ""
    spans: list[Span] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.trace_id = trace_id_of(self.session_id)

    @property
    def root_span_id(self) -> str:
        return f"{self.trace_id[:12]}0000"

    def add(self, name: str, start_ns: int, end_ns: int, attributes: list[tuple[str, Any]], ok: bool) -> None:
        """A child span, its start clamped to the session's: a span dated back from its end by a
        whole-millisecond duration (inference is always 1 ms) would otherwise start before its
        parent, which a trace viewer draws as a child outside its root."""
        child = f"{self.trace_id[:12]}{(len(self.spans) + 1) & 0xFFFF:04x}"
        start = min(max(self.start_ns, start_ns), end_ns)
        self.spans.append(Span(child, self.root_span_id, name, start, end_ns, attributes, ok))

    def root(self, end_ns: int, attributes: list[tuple[str, Any]], ok: bool) -> Span:
        return Span(self.root_span_id, "", "capsule.session", self.start_ns, end_ns, attributes, ok)


def any_value(value: Any) -> dict[str, Any]:
    """A string as `stringValue`, an integer as `intValue` (its decimal text, as OTLP/JSON writes
    int64), a float as `doubleValue`, anything else (a bool, a list) as its JSON text."""
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, bool):
        return {"stringValue": "true" if value else "false"}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    import json

    return {"stringValue": json.dumps(value)}


def _span_json(trace_id: str, span: Span) -> dict[str, Any]:
    encoded: dict[str, Any] = {
        "traceId": trace_id, "spanId": span.span_id, "name": span.name, "kind": 1,
        "startTimeUnixNano": str(span.start_ns), "endTimeUnixNano": str(span.end_ns),
        "attributes": [{"key": key, "value": any_value(value)} for key, value in span.attributes],
        "status": {"code": 1 if span.ok else 2},
    }
    if span.parent_span_id:
        encoded["parentSpanId"] = span.parent_span_id
    return encoded


def otlp_request(trace: Trace, root: Span) -> dict[str, Any]:
    """The ExportTraceServiceRequest, as OTLP/JSON, the root span first."""
    resource = [("service.name", trace.capsule_name), ("service.version", trace.capsule_version),
                ("telemetry.sdk.name", SCOPE)]
    return {"resourceSpans": [{
        "resource": {"attributes": [{"key": k, "value": {"stringValue": v}} for k, v in resource]},
        "scopeSpans": [{"scope": {"name": SCOPE, "version": SCOPE_VERSION},
                        "spans": [_span_json(trace.trace_id, span) for span in [root, *trace.spans]]}],
    }]}


def traces_url(endpoint: str) -> str:
    """`<endpoint>/v1/traces`, the endpoint's trailing `/` dropped (OTLP/HTTP's signal path)."""
    return endpoint.strip().rstrip("/") + "/v1/traces"
