"""OpenTelemetry spans shaped exactly as upstream murmur emits them (observability fact sheet §4).

Span names and attribute keys are upstream's, bare (no project prefix), so dashboards, Tempo
queries and `mur topology` built for upstream read murmurd's spans unchanged:

- `capsule.session` per agent-loop attempt (as upstream: the first run of a task and each reopen,
  between a `session_start` and its `session_end`), attribute `exit_status`. Each opens a
  **fresh trace**; a caller's W3C `traceparent` contributes only its
  span id, as the session span's `parentSpanId` (a cross-trace link, what topology draws as an
  edge). Outgoing peer messages carry `00-<this trace>-<this session span>-01`.
- `capsule.inference`, `capsule.tool_call` (also for skill calls, as upstream's source does),
  `capsule.shell`, `capsule.compaction` (a fixed 1 ms span), children of the session span, with
  the attributes of `span_attributes`. Every span is INTERNAL with status OK.
- Resource attributes `service.name` and `service.version` only; scope `murmur-capsule-runtime`.

Spans go out through a `BatchSpanProcessor` on its own thread (OTLP/HTTP protobuf), so exporting
never stalls the event loop; export failures are logged to `logs/otel.log`.
"""

from __future__ import annotations

import logging
import secrets
import time
from typing import Any, TextIO

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, Status, StatusCode, TraceFlags

SCOPE_NAME = "murmur-capsule-runtime"
SPAN_NAMES = {
    "inference": "capsule.inference",
    "tool_call": "capsule.tool_call",
    "skill_call": "capsule.tool_call",
    "shell": "capsule.shell",
    "compaction": "capsule.compaction",
}
COMMAND_CHARS = 200  # `capsule.shell` carries the command's first 200 characters
COMPACTION_SPAN_NS = 1_000_000


def caller_span_id(traceparent: str | None) -> int | None:
    """The span id of a valid W3C `traceparent` (`00-<32hex>-<16hex>-<2hex>`), else None."""
    if not traceparent:
        return None
    parts = traceparent.strip().split("-")
    if len(parts) != 4 or [len(p) for p in parts] != [2, 32, 16, 2]:
        return None
    try:
        trace_id, span_id = int(parts[1], 16), int(parts[2], 16)
        int(parts[0], 16), int(parts[3], 16)
    except ValueError:
        return None
    return span_id if trace_id and span_id else None


def traceparent_of(span: Span) -> str:
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-01"


def span_attributes(event: dict[str, Any]) -> dict[str, Any]:
    """The attributes upstream puts on the span of one trace event (keys bare)."""
    kind = event["event_type"]
    if kind == "inference":
        attributes = {k: event[k] for k in ("turn", "input_tokens", "output_tokens", "decision")}
        if event.get("tool_name") is not None:
            attributes["tool_name"] = event["tool_name"]
        if event.get("origin") is not None:
            attributes["origin"] = event["origin"]
            if event.get("model") is not None:
                attributes["model"] = event["model"]
        for member, value in (event.get("usage") or {}).items():  # seed: reported usage only
            attributes[f"usage.{member}"] = value
        return attributes
    if kind == "tool_call":
        return {k: event[k] for k in ("tool_name", "input_bytes", "output_bytes", "duration_ms", "status")}
    if kind == "skill_call":
        return {"tool_name": event["skill_name"], "output_bytes": event["output_bytes"],
                "duration_ms": event["duration_ms"], "status": event["status"]}
    if kind == "shell":
        return {"command": str(event["command"])[:COMMAND_CHARS],
                "exit_code": int(event["exit_code"]) & 0xFFFFFFFF,  # upstream casts to unsigned
                "duration_ms": event["duration_ms"]}
    if kind == "compaction":
        return {"tokens_before": event["tokens_before"], "tokens_after": event["tokens_after"]}
    return {}


class SessionSpans:
    """The spans of one session. `SessionSpans.disabled()` records nothing."""

    def __init__(self, provider: TracerProvider | None, handler: logging.StreamHandler | None = None) -> None:
        self._provider = provider
        self._tracer = provider.get_tracer(SCOPE_NAME) if provider is not None else None
        self._handler = handler
        self._session: Span | None = None

    @property
    def enabled(self) -> bool:
        """Spans are exported (`shutdown` then blocks while it flushes them)."""
        return self._provider is not None or self._handler is not None

    @classmethod
    def disabled(cls) -> SessionSpans:
        return cls(None)

    @classmethod
    def exporting(cls, endpoint: str, capsule_name: str, capsule_version: str, log: TextIO) -> SessionSpans:
        """Spans exported to `endpoint`; the exporter's own complaints go to `log` (closed with the spans)."""
        # The bare constructor: no SDK defaults (telemetry.sdk.*) beside upstream's two attributes.
        resource = Resource({"service.name": capsule_name, "service.version": capsule_version})
        provider = TracerProvider(resource=resource)
        exporter = OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces", timeout=5)
        provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=1000))
        handler = logging.StreamHandler(log)
        logging.getLogger("opentelemetry").addHandler(handler)
        return cls(provider, handler)

    def attempt_started(self, caller_traceparent: str | None) -> None:
        """Open this attempt's `capsule.session` span in a fresh trace, linked to the caller's span."""
        if self._tracer is None:
            return
        self.attempt_ended("failed")  # never two open at once
        parent_span = caller_span_id(caller_traceparent)
        context = Context()  # a root: never the ambient span, never the caller's trace
        if parent_span is not None:
            # A remote parent in a trace of our own: the span gets a fresh trace id and the
            # caller's span id as its parentSpanId.
            trace_id = int.from_bytes(secrets.token_bytes(16), "big") or 1
            remote = SpanContext(trace_id, parent_span, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
            context = trace.set_span_in_context(NonRecordingSpan(remote), context)
        self._session = self._tracer.start_span("capsule.session", context=context)

    def attempt_ended(self, exit_status: str) -> None:
        if self._session is not None:
            self._session.set_attribute("exit_status", exit_status)
            self._session.set_status(Status(StatusCode.OK))
            self._session.end()
            self._session = None

    def current_traceparent(self) -> str | None:
        """The running session span as a W3C traceparent, when tracing is on."""
        return traceparent_of(self._session) if self._session is not None else None

    def mirror(self, event: dict[str, Any]) -> None:
        """Turn one trace event into a child span of the running session, when it is a timed step."""
        name = SPAN_NAMES.get(event["event_type"])
        if self._tracer is None or name is None or self._session is None:
            return
        context = trace.set_span_in_context(self._session)
        end_ns = time.time_ns()
        duration_ns = (COMPACTION_SPAN_NS if event["event_type"] == "compaction"
                       else int(event.get("duration_ms") or 0) * 1_000_000)
        span = self._tracer.start_span(name, context=context, start_time=end_ns - duration_ns,
                                       attributes=span_attributes(event))
        span.set_status(Status(StatusCode.OK))
        span.end(end_time=end_ns)

    def shutdown(self, exit_status: str) -> None:
        """End any open span and flush (blocking, bounded): call it off the event loop."""
        self.attempt_ended(exit_status)
        if self._provider is not None:
            self._provider.shutdown()
        if self._handler is not None:
            logging.getLogger("opentelemetry").removeHandler(self._handler)
            self._handler.close()
            self._handler.stream.close()
