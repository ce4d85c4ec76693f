"""`inference.transport: process` with the real CLIs (issue 27): Claude Code and codex, each
against a loopback stand-in of its provider that scripts the model, reaching the capsule's WASM
tool over murmurd's per-session MCP server."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

import clikit
from conftest import EXAMPLES
from murmurd import ids
from murmurd.host import ComponentHost
from murmurd.manifest.writing import dump_yaml
from murmurd.session.session import Session, TaskOutcome, TaskSpec
from murmurd.staging.stage import StagedCapsule, StagingError, stage_capsule

pytestmark = [pytest.mark.anyio, pytest.mark.skipif(clikit.missing_reason() is not None,
                                                     reason=str(clikit.missing_reason()))]

ECHO = {"name": "echo", "runtime": "tool", "source": str(EXAMPLES / "echo"), "local_source": True}
ARGS = {"text": "hello from the model"}


def process_capsule(root: Path, command: str, *, max_turns: int = 6, artifacts: list[dict] | None = None,
                    model: str | None = None, **extra: Any) -> Path:
    directory = root / "capsule"
    directory.mkdir(parents=True, exist_ok=True)
    inference: dict[str, Any] = {"transport": "process", "command": command, "max_turns": max_turns}
    if model:
        inference["model"] = model
    manifest = {"name": "cli-agent", "version": "0.1.0", "artifacts": artifacts if artifacts is not None else [ECHO],
                "inference": inference, **extra}
    (directory / "murmur.yaml").write_text(dump_yaml(manifest))
    return directory


async def run_task(capsule: Path, env: dict[str, str], host: ComponentHost, workdir: Path,
                   text: str = "Echo something, then tell me what the tool said.") -> tuple[StagedCapsule, TaskOutcome]:
    staged = stage_capsule(capsule, host=host, workdir=workdir, env=env)
    session = Session(staged, host)
    await session.open()
    try:
        outcome = await session.run_task(TaskSpec(ids.new_task_id(), text, context_id=ids.new_context_id()))
    finally:
        await session.close()
    return staged, outcome


def trace(staged: StagedCapsule) -> list[dict[str, Any]]:
    path = staged.workdir.root / staged.workdir.book("trace.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def cli_setup(tmp_path: Path, script: clikit.ModelScript, dialect: str) -> tuple[dict[str, str], str]:
    bin_dir = tmp_path / "bin"
    target = clikit.claude_binary() if dialect == "claude" else clikit.codex_binary()
    clikit.linked_bin(bin_dir, dialect, target)
    return clikit.cli_env(tmp_path / "home", script, bin_dir), dialect


@pytest.mark.parametrize("dialect", ["claude", "codex"])
async def test_the_model_calls_a_wasm_tool_over_mcp_and_its_answer_is_the_result(
        tmp_path: Path, host: ComponentHost, dialect: str) -> None:
    with clikit.model_standin(clikit.ModelScript("echo", ARGS)) as script:
        env, command = cli_setup(tmp_path, script, dialect)
        model = clikit.CODEX_MODEL if dialect == "codex" else None
        staged, outcome = await run_task(process_capsule(tmp_path, command, model=model), env, host, tmp_path / "wd")
    assert outcome.ok, (outcome.error, script.problems)
    assert outcome.result_text.startswith(clikit.ANSWER_PREFIX)
    assert "hello from the model" in outcome.result_text  # the tool's output came back to the model
    assert (staged.workdir.root / staged.workdir.book("out/result.txt")).read_text() == outcome.result_text
    events = trace(staged)
    kinds = [e["event_type"] for e in events]
    assert kinds[0] == "task_start" and kinds[-1] == "task_end"
    calls = [e for e in events if e["event_type"] == "tool_call"]
    assert [(c["tool_name"], c["status"], c["input"]) for c in calls] == [("echo", "ok", ARGS)]
    inferences = [e for e in events if e["event_type"] == "inference"]
    assert [i["decision"] for i in inferences] == ["tool_call", "end_turn"]
    assert all(i["input_tokens"] == 0 and i["output_tokens"] == 0 for i in inferences)
    start = next(e for e in events if e["event_type"] == "session_start")
    assert start["tools_declared"] == ["echo"]
    end = next(e for e in events if e["event_type"] == "session_end")
    assert end["exit_status"] == "ok" and end["total_input_tokens"] == 0
