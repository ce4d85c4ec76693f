"""`murmurd run`: stage a capsule, run one task from `task.md`, stream the answer to stdout."""

from __future__ import annotations

import asyncio
import secrets
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from murmurd.host import ComponentHost
from murmurd.session.events import TaskEvents
from murmurd.session.session import Session, TaskOutcome, TaskSpec
from murmurd.staging.stage import StagedCapsule, stage_capsule


class PrintingEvents(TaskEvents):
    """Streams the answer text to stdout as chunks arrive; tool results go to stderr."""

    def __init__(self, out: Callable[[str], None], err: Callable[[str], None]) -> None:
        self.out, self.err = out, err
        self.wrote_text = False

    def text_chunk(self, text: str) -> None:
        self.wrote_text = True
        self.out(text)

    def tool_chunk(self, text: str) -> None:
        self.err(text if text.endswith("\n") else text + "\n")

    def tool_result(self, tool_name: str, content: str) -> None:
        first = content.strip().splitlines()[0] if content.strip() else ""
        self.err(f"[{tool_name}] {first[:200]}\n")

    def turn_finished(self, streamed: bool, text: str) -> None:
        if not streamed and text:
            self.wrote_text = True
            self.out(text)


@dataclass
class RunResult:
    staged: StagedCapsule
    outcome: TaskOutcome


def new_task_id() -> str:
    return "tsk_" + secrets.token_hex(16)


async def run_once(
    capsule_dir: Path,
    task_text: str,
    *,
    host: ComponentHost,
    workdir: Path | None = None,
    progress: Callable[[str], None] | None = None,
    events: TaskEvents | None = None,
) -> RunResult:
    """Stage, then run `task_text` as the one task of a fresh session (the session writes `task.md`)."""
    staged = await asyncio.to_thread(
        stage_capsule, capsule_dir, host=host, workdir=workdir, progress=progress
    )
    session = Session(staged, host)
    await session.open()
    try:
        outcome = await session.run_task(TaskSpec(new_task_id(), task_text, source="task_md"), events)
    finally:
        await session.close()
    return RunResult(staged, outcome)


def stdout_writer(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()
