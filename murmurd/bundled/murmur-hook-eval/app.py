"""murmur-hook-eval 0.3.0, as published: the session scored at its end into `./eval.jsonl`.

`on-session-start` reads `MURMUR_EVAL_CONFIG` (the manifest's `observability.eval` as JSON),
`MURMUR_CASE_ID` and `MURMUR_DATASET_ID`. With no config, or no scorer in it, it appends a
warning to `./logs/hook-murmur-hook-eval.log` and stays inactive for the session. `on-tool-call`
(the observation, after the call) records the tool's name; `on-session-end` scores the totals
(scoring.py) and writes one `event_score` per scorer and one `dataset_run`, truncating the file;
a failed write is `err`. Grant `filesystem: {scope: "."}` so the file lands beside `trace.jsonl`.

With `MURMUR_OTEL_ENDPOINT` set (the manifest's `observability.otel_endpoint`) and at least one
score, the scores also go as OTLP/JSON logs to `<endpoint>/v1/logs` (otlp.py), best effort: a
failure is a stderr warning. The POST goes through `wasi:http`, so it reaches only what the
hook's own `capabilities.network.allow` grants (upstream writes plain HTTP on a raw socket).
"""

from __future__ import annotations

import json
import os
import sys
import time

from componentize_py_types import Err
from driverkit.errors import DriverFailure
from driverkit.wasi_http import post
from hookkit import NONE, Silent
from otlp import logs_request, logs_url, trace_id_of
from scoring import PREFIX, Scorer, Session, line, parse_scorers, records
from wit_world.imports import lifecycle

EVAL_FILE = "./eval.jsonl"
WARNING_LOG = "./logs/hook-murmur-hook-eval.log"
EXPORT_TIMEOUT_SECONDS = 30.0


class _State:
    def __init__(self, session_id: str, scorers: list[Scorer], case_id: str | None, dataset_id: str | None,
                 otel_endpoint: str | None) -> None:
        self.session_id, self.scorers, self.case_id, self.dataset_id = session_id, scorers, case_id, dataset_id
        self.otel_endpoint = otel_endpoint
        self.tools: list[str] = []


_state: _State | None = None


def _env(name: str) -> str | None:
    value = os.environ.get(name)
    return value if value else None


def write_hook_warning(message: str) -> None:
    """Best effort, as upstream: the directory and the line, errors ignored."""
    try:
        os.makedirs("./logs", exist_ok=True)
        with open(WARNING_LOG, "a", encoding="utf-8") as handle:
            handle.write(message + "\n")
    except OSError:
        pass


def write_eval_jsonl(lines: list[str]) -> None:
    try:
        with open(EVAL_FILE, "w", encoding="utf-8") as handle:
            handle.write("".join(text + "\n" for text in lines))
    except OSError as exc:
        raise Err(f"{PREFIX} failed to write eval.jsonl: {exc.strerror or exc}") from None


class ExportFailed(Exception):
    pass


def export(endpoint: str, payload: dict[str, object]) -> None:
    url = logs_url(endpoint)
    body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    try:
        response = post(url, {"content-type": "application/json", "content-length": str(len(body))}, body,
                        EXPORT_TIMEOUT_SECONDS)
    except DriverFailure as exc:
        raise ExportFailed(f"POST {url}: {exc}") from None
    if not 200 <= response.status < 300:
        detail = response.read_all(512).decode("utf-8", "replace").strip()
        raise ExportFailed(f"OTLP endpoint {url} returned HTTP {response.status}: {detail[:200]}")


class Lifecycle(Silent):
    def on_session_start(self, ctx: lifecycle.SessionContext) -> lifecycle.HookOutput:
        global _state
        _state = None
        config = os.environ.get("MURMUR_EVAL_CONFIG")
        if config is None or not config.strip():
            write_hook_warning(f"{PREFIX} MURMUR_EVAL_CONFIG is not set \u2014 no eval scores will be written for "
                               "this session")
            return NONE
        scorers, notes = parse_scorers(config)
        for note in notes:
            print(note, file=sys.stderr)
        if not scorers:
            write_hook_warning(f"{PREFIX} no valid scorers configured \u2014 eval.jsonl will not be written")
            return NONE
        endpoint = os.environ.get("MURMUR_OTEL_ENDPOINT")
        _state = _State(ctx.session_id, scorers, _env("MURMUR_CASE_ID"), _env("MURMUR_DATASET_ID"),
                        endpoint if endpoint and endpoint.strip() else None)
        return NONE

    def on_tool_call(self, event: lifecycle.ToolEvent) -> lifecycle.HookOutput:
        if _state is not None and event.outcome is not None:  # the observation; 0.5.0 has no decision point
            _state.tools.append(event.tool_name)
        return NONE

    def on_session_end(self, event: lifecycle.SessionEndEvent) -> lifecycle.HookOutput:
        global _state
        state, _state = _state, None
        if state is None:
            return NONE
        session = Session(event.exit_status, event.total_turns, event.total_input_tokens, event.total_output_tokens)
        scored, run = records(state.scorers, session, state.tools, ts=time.time_ns() // 1_000_000,
                              case_id=state.case_id, dataset_id=state.dataset_id)
        write_eval_jsonl([line(r) for r in scored] + [line(run)])
        if state.otel_endpoint is not None and run["scores"]:
            try:
                export(state.otel_endpoint, logs_request(scored, trace_id_of(state.session_id), state.case_id,
                                                         time.time_ns()))
            except ExportFailed as exc:
                print(f"{PREFIX} OTLP log export failed: {exc}", file=sys.stderr)
        return NONE
