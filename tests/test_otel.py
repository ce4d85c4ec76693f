"""OpenTelemetry spans mirror the trace, exported over OTLP/HTTP to a collector on loopback."""

from __future__ import annotations

import json
import signal
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from a2akit import chaos_capsule, orchestrator_capsule, serving
from conftest import EXAMPLES
from loopkit import driver_capsule, local, run_tasks, stage, trace_events
from murmurd.session.session import TaskSpec


class Collector:
    """A minimal OTLP/HTTP trace receiver: keeps every span it is sent."""

    def __init__(self) -> None:
        self.spans: list[dict] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest.FromString(body)
                for resource_spans in request.resource_spans:
                    resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                    for scope in resource_spans.scope_spans:
                        for span in scope.spans:
                            collector.spans.append({
                                "name": span.name, "trace_id": span.trace_id.hex(), "span_id": span.span_id.hex(),
                                "parent": span.parent_span_id.hex(), "resource": resource,
                                "attributes": {a.key: a.value for a in span.attributes},
                            })
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def named(self, name: str) -> list[dict]:
        return [s for s in self.spans if s["name"] == name]

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture
def collector():
    running = Collector()
    yield running
    running.close()


pytestmark = pytest.mark.anyio

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


async def test_session_task_and_step_spans_nest_under_the_caller(tmp_path: Path, host, collector) -> None:
    responses = [
        {"stop_reason": "tool_call", "content": [{"type": "tool_call", "id": "c1", "name": "echo", "input": {"text": "x"}}]},
        {"stop_reason": "tool_call", "content": [{"type": "tool_call", "id": "c2", "name": "printf", "input": {"command": "ok"}}]},
        {"stop_reason": "end_turn", "content": [{"type": "text", "text": "done"}]},
    ]
    directory = driver_capsule(tmp_path, "scripted-driver", {"responses": responses}, name="traced",
                               extra_artifacts=[local("echo", "tool", EXAMPLES / "echo")],
                               capabilities={"shell": {"allow": ["printf"]}},
                               observability={"otel_endpoint": collector.url})
    staged = stage(directory, host, tmp_path)
    spec = TaskSpec("tsk_" + "a" * 32, "go", traceparent=f"00-{CALLER_TRACE}-{CALLER_SPAN}-01")
    (outcome,) = await run_tasks(staged, host, spec)
    assert outcome.exit_status == "ok"

    (session,) = collector.named("capsule.session")
    (task,) = collector.named("capsule.task")
    assert session["resource"]["service.name"] == "traced" and session["resource"]["service.version"] == "0.3.0"
    assert (task["trace_id"], task["parent"]) == (CALLER_TRACE, CALLER_SPAN)
    inference = collector.named("capsule.inference")
    assert len(inference) == 3 and all(s["parent"] == task["span_id"] for s in inference)
    (tool,) = collector.named("capsule.tool_call")
    (shell,) = collector.named("capsule.shell")
    assert tool["parent"] == task["span_id"] and tool["attributes"]["murmur.tool_name"].string_value == "echo"
    assert shell["parent"] == task["span_id"] and shell["attributes"]["murmur.exit_code"].int_value == 0
    events = [e["event_type"] for e in trace_events(staged)]
    assert events.count("inference") == 3  # the trace is unchanged by tracing


async def test_an_unreachable_collector_never_fails_the_session(tmp_path: Path, host) -> None:
    directory = driver_capsule(tmp_path, "scripted-driver",
                               {"responses": [{"stop_reason": "end_turn", "content": [{"type": "text", "text": "ok"}]}]},
                               observability={"otel_endpoint": "http://127.0.0.1:9"})
    staged = stage(directory, host, tmp_path)
    (outcome,) = await run_tasks(staged, host, "go")
    assert outcome.exit_status == "ok" and outcome.result_text == "ok"
    assert (staged.workdir.logs / "otel.log").exists()


def test_a_peer_message_carries_the_senders_task_span(tmp_path: Path, artifacts, collector) -> None:
    for name in ("chaos-driver", "ask"):
        artifacts.fixture(name)
    artifacts.example("echo")
    with serving(chaos_capsule(tmp_path, "worker"), tmp_path / "worker-state") as worker:
        orchestrator_dir = orchestrator_capsule(tmp_path, artifacts.fixture("pull-capsule"), worker,
                                                observability={"otel_endpoint": collector.url})
        with serving(orchestrator_dir, tmp_path / "orch-state") as orchestrator:
            task = orchestrator.send(json.dumps({"send": [worker.url, "traced hello"]}))
            orchestrator.wait_state(task["id"], "completed")
            assert orchestrator.stop(signal.SIGTERM) == 0  # flushes the spans
        received = [e for e in worker.trace() if e["event_type"] == "a2a_task_received"]
    (span,) = collector.named("capsule.task")
    assert received[-1]["traceparent_from_caller"].startswith(f"00-{span['trace_id']}-{span['span_id']}-")
