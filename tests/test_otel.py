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
                    resource_keys = [a.key for a in resource_spans.resource.attributes]
                    for scope in resource_spans.scope_spans:
                        for span in scope.spans:
                            collector.spans.append({
                                "name": span.name, "trace_id": span.trace_id.hex(), "span_id": span.span_id.hex(),
                                "parent": span.parent_span_id.hex(), "resource": resource,
                                "resource_keys": resource_keys, "scope": scope.scope.name,
                                "kind": span.kind, "status": span.status.code,
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


def _plain(value) -> object:
    """An OTLP AnyValue as a Python value."""
    return getattr(value, value.WhichOneof("value"))


def _attrs(span: dict) -> dict:
    return {k: _plain(v) for k, v in span["attributes"].items()}


async def test_span_names_and_attributes_are_upstreams_exactly(tmp_path: Path, host, collector) -> None:
    skill = tmp_path / "skills" / "tidy"
    skill.mkdir(parents=True)
    (skill / "skill.md").write_text("# Tidy\n")
    responses = [
        {"stop_reason": "tool_call", "content": [{"type": "tool_call", "id": "c1", "name": "echo", "input": {"text": "x"}}]},
        {"stop_reason": "tool_call", "content": [{"type": "tool_call", "id": "c2", "name": "printf", "input": {"command": "ok"}}]},
        {"stop_reason": "tool_call", "content": [{"type": "tool_call", "id": "c3", "name": "tidy", "input": {}}]},
        {"stop_reason": "end_turn", "usage": {"input_tokens": 5}, "content": [{"type": "text", "text": "done"}]},
    ]
    directory = driver_capsule(tmp_path, "scripted-driver", {"responses": responses}, name="traced",
                               extra_artifacts=[local("echo", "tool", EXAMPLES / "echo"), local("tidy", "skill", skill)],
                               capabilities={"shell": {"allow": ["printf"]}},
                               observability={"otel_endpoint": collector.url})
    staged = stage(directory, host, tmp_path)
    spec = TaskSpec("tsk_" + "a" * 32, "go", traceparent=f"00-{CALLER_TRACE}-{CALLER_SPAN}-01")
    (outcome,) = await run_tasks(staged, host, spec)
    assert outcome.exit_status == "ok"

    assert {s["name"] for s in collector.spans} == {
        "capsule.session", "capsule.inference", "capsule.tool_call", "capsule.shell"}
    (session,) = collector.named("capsule.session")
    assert session["resource"] == {"service.name": "traced", "service.version": "0.3.0"}
    assert sorted(session["resource_keys"]) == ["service.name", "service.version"]
    assert all(s["scope"] == "murmur-capsule-runtime" for s in collector.spans)
    assert all(s["kind"] == 1 and s["status"] == 1 for s in collector.spans)  # INTERNAL, OK
    # a fresh trace of its own; the caller's span is only its parent (a cross-trace link)
    assert session["trace_id"] != CALLER_TRACE and session["parent"] == CALLER_SPAN
    assert _attrs(session) == {"exit_status": "ok"}
    children = [s for s in collector.spans if s is not session]
    assert all(s["parent"] == session["span_id"] and s["trace_id"] == session["trace_id"] for s in children)

    inference = sorted(collector.named("capsule.inference"), key=lambda s: _attrs(s)["turn"])
    assert [_attrs(s)["turn"] for s in inference] == [0, 1, 2, 3]
    first = _attrs(inference[0])
    assert set(first) == {"turn", "input_tokens", "output_tokens", "decision", "tool_name"}
    assert first["decision"] == "tool_call" and first["tool_name"] == "echo"
    assert set(_attrs(inference[-1])) == {"turn", "input_tokens", "output_tokens", "decision", "usage.input_tokens"}
    tools = {_attrs(s)["tool_name"]: _attrs(s) for s in collector.named("capsule.tool_call")}
    assert set(tools) == {"echo", "printf", "tidy"}  # shell and skill calls get a tool span too
    assert set(tools["echo"]) == {"tool_name", "input_bytes", "output_bytes", "duration_ms", "status"}
    assert tools["echo"]["status"] == "ok" and tools["echo"]["input_bytes"] == len('{"text": "x"}')
    assert set(tools["tidy"]) == {"tool_name", "output_bytes", "duration_ms", "status"}
    (shell,) = collector.named("capsule.shell")
    assert _attrs(shell) == {"command": "ok", "exit_code": 0, "duration_ms": _attrs(shell)["duration_ms"]}
    events = [e["event_type"] for e in trace_events(staged)]
    assert events.count("inference") == 4  # the trace is unchanged by tracing


async def test_each_task_is_its_own_trace_and_a_bad_traceparent_is_no_parent(tmp_path: Path, host, collector) -> None:
    directory = driver_capsule(tmp_path, "scripted-driver",
                               {"responses": [{"stop_reason": "end_turn", "content": [{"type": "text", "text": "ok"}]}]},
                               observability={"otel_endpoint": collector.url})
    staged = stage(directory, host, tmp_path)
    await run_tasks(staged, host, TaskSpec("tsk_" + "b" * 32, "one", traceparent="00-zz-not-a-traceparent"),
                    TaskSpec("tsk_" + "c" * 32, "two"))
    sessions = collector.named("capsule.session")
    assert len(sessions) == 2 and sessions[0]["trace_id"] != sessions[1]["trace_id"]
    assert all(s["parent"] == "" for s in sessions)


def test_compaction_spans_last_one_millisecond_and_shell_exit_codes_wrap() -> None:
    from murmurd.trace.otel import span_attributes

    assert span_attributes({"event_type": "shell", "command": "x" * 300, "exit_code": -1, "duration_ms": 3}) == {
        "command": "x" * 200, "exit_code": 4294967295, "duration_ms": 3}
    assert span_attributes({"event_type": "compaction", "turn": 2, "tokens_before": 9, "tokens_after": 4}) == {
        "tokens_before": 9, "tokens_after": 4}
    assert span_attributes({"event_type": "task_start"}) == {}


async def test_an_unreachable_collector_never_fails_the_session(tmp_path: Path, host) -> None:
    directory = driver_capsule(tmp_path, "scripted-driver",
                               {"responses": [{"stop_reason": "end_turn", "content": [{"type": "text", "text": "ok"}]}]},
                               observability={"otel_endpoint": "http://127.0.0.1:9"})
    staged = stage(directory, host, tmp_path)
    (outcome,) = await run_tasks(staged, host, "go")
    assert outcome.exit_status == "ok" and outcome.result_text == "ok"
    assert (staged.workdir.logs / "otel.log").exists()


def test_a_peer_message_carries_the_senders_session_span(tmp_path: Path, artifacts, collector) -> None:
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
    (span,) = collector.named("capsule.session")
    assert received[-1]["traceparent_from_caller"] == f"00-{span['trace_id']}-{span['span_id']}-01"
