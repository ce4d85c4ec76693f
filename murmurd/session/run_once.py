"""`murmurd run`: stage a capsule, run one task from `task.md`, stream the answer to stdout."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from murmurd import ids
from murmurd.terminal import terminal_text
from murmurd.host import ComponentHost
from murmurd.session.events import TaskEvents
from murmurd.session.session import Session, TaskOutcome, TaskSpec
from murmurd.staging.stage import StagedCapsule, StagingError, stage_capsule
from murmurd.workdir import TASK, TASK_FALLBACK, read_task_input


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


async def run_once(
    capsule_dir: Path,
    task_text: str | None,
    *,
    host: ComponentHost,
    workdir: Path | None = None,
    progress: Callable[[str], None] | None = None,
    events: TaskEvents | None = None,
    env: Mapping[str, str] | None = None,
    system_prompt: str | None = None,
    on_staged: Callable[[StagedCapsule], None] | None = None,
) -> RunResult:
    """Stage, then run `task_text` as the one task of a fresh session (the session writes `task.md`).

    `task_text` None: the task waiting in the workdir (`--workdir DIR`), `task.md` else `input.txt`
    as upstream reads it; StagingError when there is none.
    Like `mur run --task`, the task gets fresh task and context ids, so two runs of one capsule
    send different `prompt_cache_key`s. `system_prompt` is `--system-prompt` (None: not given).
    """
    staged = await asyncio.to_thread(
        stage_capsule, capsule_dir, host=host, workdir=workdir, progress=progress,
        env=os.environ if env is None else env,
    )
    if task_text is None:
        try:
            task_text = await asyncio.to_thread(read_task_input, staged.workdir)
        except OSError as exc:
            raise StagingError([f"cannot read the task in {staged.workdir.root}: {exc}"]) from None
        if task_text is None:
            raise StagingError([f"no task: pass --task, or put {TASK} (or {TASK_FALLBACK}) in the --workdir "
                                f"({staged.workdir.root})"])
    if on_staged is not None:
        on_staged(staged)
    session = Session(staged, host, cli_system_prompt=system_prompt)
    await session.open()
    try:
        spec = TaskSpec(ids.new_task_id(), task_text, context_id=ids.new_context_id(), source="task_md")
        outcome = await session.run_task(spec, events)
    finally:
        await session.close()
    return RunResult(staged, outcome)


def stdout_writer(text: str) -> None:
    """The answer as it streams: the bytes themselves into a pipe or file, escaped on a terminal."""
    sys.stdout.write(terminal_text(sys.stdout, text))
    sys.stdout.flush()


def stderr_writer(text: str) -> None:
    """Tool output and results (a component's text) onto stderr, escaped on a terminal."""
    sys.stderr.write(terminal_text(sys.stderr, text))
    sys.stderr.flush()
