"""OpenTelemetry spans mirroring `trace.jsonl` (runtime-notes §7), exported in the background.

When `observability.otel_endpoint` is set, a session gets a `capsule.session` span, each task a
`capsule.task` span (the child of the caller's `traceparent` when one came with the task), and
every `inference`, `tool_call`, `skill_call`, `shell` and `compaction` trace event a span of its
own under the task, timed from the event's `duration_ms`. Spans go out through a
`BatchSpanProcessor` on its own thread, so exporting never stalls the event loop; export
failures are logged to `logs/otel.log`. Without an endpoint every method is a no-op.
"""

from __future__ import annotations

import logging
import time
from typing import Any, TextIO

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Span
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

SPAN_NAMES = {
    "inference": "capsule.inference",
    "tool_call": "capsule.tool_call",
    "skill_call": "capsule.tool_call",
    "shell": "capsule.shell",
    "compaction": "capsule.compaction",
}
_ATTRIBUTE_TYPES = (str, bool, int, float)
_propagator = TraceContextTextMapPropagator()


def _context_from(traceparent: str | None):  # type: ignore[no-untyped-def]
    if not traceparent:
        return None
    return _propagator.extract({"traceparent": traceparent})


def traceparent_of(span: Span) -> str:
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def _attributes(fields: dict[str, Any], prefix: str = "murmur.") -> dict[str, Any]:
    attributes: dict[str, Any] = {}
    for key, value in fields.items():
        if isinstance(value, _ATTRIBUTE_TYPES):
            attributes[prefix + key] = value
        elif isinstance(value, dict):
            attributes.update(_attributes(value, f"{prefix}{key}."))
    return attributes


class SessionSpans:
    """The spans of one session. `SessionSpans.disabled()` records nothing."""

    def __init__(self, provider: TracerProvider | None, handler: logging.StreamHandler | None = None) -> None:
        self._provider = provider
        self._tracer = provider.get_tracer("murmurd") if provider is not None else None
        self._handler = handler
        self._session: Span | None = None
        self._task: Span | None = None

    @classmethod
    def disabled(cls) -> SessionSpans:
        return cls(None)

    @classmethod
    def exporting(cls, endpoint: str, capsule_name: str, capsule_version: str, log: TextIO) -> SessionSpans:
        """Spans exported to `endpoint`; the exporter's own complaints go to `log` (closed with the spans)."""
        resource = Resource.create({"service.name": capsule_name, "service.version": capsule_version})
        provider = TracerProvider(resource=resource)
        exporter = OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces", timeout=5)
        provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=1000))
        handler = logging.StreamHandler(log)
        logging.getLogger("opentelemetry").addHandler(handler)
        return cls(provider, handler)

    def session_started(self, session_id: str) -> None:
        if self._tracer is not None:
            self._session = self._tracer.start_span("capsule.session", attributes={"murmur.session_id": session_id})

    def task_started(self, task_id: str, caller_traceparent: str | None) -> None:
        if self._tracer is None:
            return
        parent = _context_from(caller_traceparent)
        if parent is None and self._session is not None:
            parent = trace.set_span_in_context(self._session)
        self._task = self._tracer.start_span("capsule.task", context=parent, attributes={"murmur.task_id": task_id})

    def task_ended(self, exit_status: str) -> None:
        if self._task is not None:
            self._task.set_attribute("murmur.exit_status", exit_status)
            self._task.end()
            self._task = None

    def current_traceparent(self) -> str | None:
        """The running task's span (else the session's) as a W3C traceparent, when tracing is on."""
        span = self._task or self._session
        return traceparent_of(span) if span is not None else None

    def mirror(self, event: dict[str, Any]) -> None:
        """Turn one trace event into a span under the running task, when it is a timed step."""
        name = SPAN_NAMES.get(event["event_type"])
        if self._tracer is None or name is None:
            return
        parent_span = self._task or self._session
        context = trace.set_span_in_context(parent_span) if parent_span is not None else None
        end_ns = time.time_ns()
        start_ns = end_ns - int(event.get("duration_ms", 0)) * 1_000_000
        fields = {k: v for k, v in event.items() if k not in ("event_type", "session_id", "timestamp")}
        span = self._tracer.start_span(name, context=context, start_time=start_ns, attributes=_attributes(fields))
        span.end(end_time=end_ns)

    def shutdown(self, exit_status: str) -> None:
        """End the session span and flush (blocking, bounded): call it off the event loop."""
        self.task_ended("failed")
        if self._session is not None:
            self._session.set_attribute("murmur.exit_status", exit_status)
            self._session.end()
            self._session = None
        if self._provider is not None:
            self._provider.shutdown()
        if self._handler is not None:
            logging.getLogger("opentelemetry").removeHandler(self._handler)
            self._handler.close()
            self._handler.stream.close()


