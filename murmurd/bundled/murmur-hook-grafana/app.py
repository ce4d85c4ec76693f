"""murmur-hook-grafana: the session's lifecycle as OpenTelemetry spans, POSTed to Tempo at its end.

murmur's published hook (0.3.0; every event, async, commits nothing). At `on-session-start` it
reads `MURMUR_OTEL_ENDPOINT` (the runtime sets it from `observability.otel_endpoint`); without
one it says so on stderr and does nothing for the session. Then each inference, tool call, shell
call and compaction is buffered as a child span of the session's root span, in the published
hook's names and attributes (`spans`), and at `on-session-end` the root `capsule.session` span
is added and the whole trace is POSTed as OTLP/JSON to `<endpoint>/v1/traces`.

The POST goes through `wasi:http` (the published hook writes HTTP/1.1 on a raw socket), so it
reaches only what the hook's own `capabilities.network.allow` grants, and an `https://`
endpoint gets TLS. A refused or failed export, or a status other than 2xx, is the hook's `err`
arm naming why: logged and traced by the runtime, never fatal.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from componentize_py_types import Err
from driverkit.errors import DriverFailure
from driverkit.wasi_http import post
from hookkit import NONE, Silent
from spans import Trace, otlp_request, traces_url
from wit_world.imports import lifecycle

EXPORT_TIMEOUT_SECONDS = 10.0
_trace: Trace | None = None


def _now() -> int:
    return time.time_ns()


def _add(name: str, duration_ms: int, attributes: list[tuple[str, Any]], ok: bool) -> lifecycle.HookOutput:
    if _trace is not None:
        end = _now()
        _trace.add(name, end - duration_ms * 1_000_000, end, attributes, ok)
    return NONE


def export(trace: Trace, body: bytes) -> None:
    url = traces_url(trace.endpoint)
    try:
        headers = {"content-type": "application/json", "content-length": str(len(body))}
        response = post(url, headers, body, EXPORT_TIMEOUT_SECONDS)
    except DriverFailure as exc:
        raise Err(f"[murmur-hook-grafana] OTLP export to {url} failed: {exc}") from None
    status = response.status
    detail = response.read_all(512).decode("utf-8", "replace").strip()
    if not 200 <= status < 300:
        raise Err(f"[murmur-hook-grafana] OTLP endpoint {url} returned HTTP {status}: {detail[:200]}")


class Lifecycle(Silent):
    def on_session_start(self, ctx: lifecycle.SessionContext) -> lifecycle.HookOutput:
        global _trace
        endpoint = (os.environ.get("MURMUR_OTEL_ENDPOINT") or "").strip()
        if not endpoint:
            _trace = None
            print("[murmur-hook-grafana] MURMUR_OTEL_ENDPOINT is not set (observability.otel_endpoint): "
                  "no spans will be exported for this session", file=sys.stderr)
            return NONE
        _trace = Trace(endpoint, ctx.capsule_name, ctx.capsule_version, ctx.session_id, ctx.model, _now())
        return NONE

    def on_inference(self, event: lifecycle.InferenceEvent) -> lifecycle.HookOutput:
        attributes: list[tuple[str, Any]] = [
            ("turn", event.turn), ("gen_ai.usage.input_tokens", str(event.input_tokens)),
            ("gen_ai.usage.output_tokens", str(event.output_tokens)), ("decision", event.decision)]
        for key, value in (("tool_name", event.tool_name), ("gen_ai.request.tools", event.tools),
                           ("gen_ai.prompt", event.prompt), ("gen_ai.completion", event.output)):
            if value is not None:
                attributes.append((key, value))
        return _add("capsule.inference", 1, attributes, True)

    def on_tool_call(self, event: lifecycle.ToolEvent) -> lifecycle.HookOutput:
        outcome = event.outcome
        if outcome is None:  # a decision point: never dispatched to a hook that commits nothing
            return NONE
        return _add("capsule.tool_call", outcome.duration_ms, [
            ("turn", event.turn), ("tool_name", event.tool_name), ("input_bytes", str(event.input_bytes)),
            ("output_bytes", str(outcome.output_bytes)), ("duration_ms", str(outcome.duration_ms)),
            ("status", outcome.status)], outcome.status == "ok")

    def on_shell(self, event: lifecycle.ShellEvent) -> lifecycle.HookOutput:
        outcome = event.outcome
        if outcome is None:
            return NONE
        attributes: list[tuple[str, Any]] = [
            ("turn", event.turn), ("command", event.command[:200]), ("exit_code", outcome.exit_code),
            ("duration_ms", str(outcome.duration_ms)), ("stdout", outcome.stdout[:4096])]
        if outcome.stderr:
            attributes.append(("stderr", outcome.stderr[:4096]))
        return _add("capsule.shell", outcome.duration_ms, attributes, outcome.exit_code == 0)

    def on_compaction(self, event: lifecycle.CompactionEvent) -> lifecycle.HookOutput:
        return _add("capsule.compaction", 1, [
            ("session_tokens", str(event.session_tokens)), ("threshold", event.threshold),
            ("message_count", len(event.messages))], True)

    def on_session_end(self, event: lifecycle.SessionEndEvent) -> lifecycle.HookOutput:
        global _trace
        trace, _trace = _trace, None
        if trace is None:
            return NONE
        attributes: list[tuple[str, Any]] = [
            ("service.name", trace.capsule_name), ("service.version", trace.capsule_version),
            ("model", trace.model), ("exit_status", event.exit_status), ("murmur.session_id", trace.session_id),
            ("total_turns", event.total_turns), ("total_input_tokens", str(event.total_input_tokens)),
            ("total_output_tokens", str(event.total_output_tokens))]
        formation = os.environ.get("MURMUR_FORMATION_ID")
        if formation:
            attributes.append(("murmur.formation_id", formation))
        root = trace.root(_now(), attributes, event.exit_status == "ok")
        export(trace, json.dumps(otlp_request(trace, root), ensure_ascii=False).encode("utf-8"))
        return NONE
