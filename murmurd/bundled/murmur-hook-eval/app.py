"""murmur-hook-eval 0.3.0, as published: the session scored at its end into `./eval.jsonl`.

`on-session-start` reads `MURMUR_EVAL_CONFIG` (the manifest's `observability.eval` as JSON),
`MURMUR_CASE_ID` and `MURMUR_DATASET_ID`. With no config, or no scorer in it, it appends a
warning to `./logs/hook-murmur-hook-eval.log` and stays inactive for the session. `on-tool-call`
(the observation, after the call) records the tool's name; `on-session-end` scores the totals
(scoring.py) and writes one `event_score` per scorer and one `dataset_run`, truncating the file;
a failed write is `err`. Grant `filesystem: {scope: "."}` so the file lands beside `trace.jsonl`.

Upstream also POSTs the scores as OTLP logs to `MURMUR_OTEL_ENDPOINT`, best effort (a failure is
a stderr warning); this hook does not export them (docs/decisions.md, issue 28).
"""

from __future__ import annotations

import os
import sys
import time

from componentize_py_types import Err
from scoring import PREFIX, Scorer, Session, line, parse_scorers, records
from wit_world import exports
from wit_world.imports import lifecycle

NONE = lifecycle.HookOutput_None_()
EVAL_FILE = "./eval.jsonl"
WARNING_LOG = "./logs/hook-murmur-hook-eval.log"


class _State:
    def __init__(self, scorers: list[Scorer], case_id: str | None, dataset_id: str | None) -> None:
        self.scorers, self.case_id, self.dataset_id = scorers, case_id, dataset_id
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


def _silent(_self: object, _event: object) -> lifecycle.HookOutput:
    return NONE


class Lifecycle(exports.Lifecycle):
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
        _state = _State(scorers, _env("MURMUR_CASE_ID"), _env("MURMUR_DATASET_ID"))
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
        return NONE

    # Every other handler is silent: the WIT requires each export, this hook has nothing to say there.
    on_stage = on_task_start = on_inference = on_shell = on_compaction = on_task_end = _silent
