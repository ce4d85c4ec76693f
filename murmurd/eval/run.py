"""`murmurd eval run`: every case of a task set as a fresh session of the capsule, scored by the
capsule's own `murmur-hook-eval` (fact sheet §6).

Cases run one after another, each staged anew with `MURMUR_CASE_ID` in the environment its
hooks see; the case's verdict is the `dataset_run.overall` its session's `eval.jsonl` holds
(`no_scores` without one, `stage_failed` when the capsule does not launch). The command exits 0
whatever the cases scored; a missing, empty or malformed task set or a manifest with errors
exits 1 before anything runs. It does not add the eval hook: the capsule declares it.
"""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from murmurd import workdir_fs
from murmurd.eval.dataset import Case, load_dataset
from murmurd.eval.records import parse_eval, score_value
from murmurd.manifest.reading import UnreadableFile, read_text_file
from murmurd.workdir import EVAL
from murmurd.traceview.commands import Console
from murmurd.traceview.errors import ReadError
from murmurd.terminal import safe

MAX_EVAL_BYTES = 64 * 1024 * 1024


@dataclass
class CaseResult:
    case_id: str
    overall: str
    session_id: str | None = None
    workdir: str | None = None
    scores: dict[str, float] = field(default_factory=dict)


def _note(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _task_text(case: Case) -> str:
    if case.task is not None:
        return case.task
    assert case.task_path is not None
    try:
        return read_text_file(case.task_path)
    except (OSError, UnreadableFile) as exc:
        _note(f"warning: case {case.case_id}: cannot read task {case.task_path}: "
              f"{getattr(exc, 'strerror', None) or exc}; running it with an empty task")
        return ""


def _scored(root: Path, result: CaseResult) -> None:
    """The session's `eval.jsonl` verdict into `result` (`no_scores` when there is none)."""
    try:
        parsed = parse_eval(workdir_fs.read_bytes(root, EVAL, max_bytes=MAX_EVAL_BYTES), str(root / EVAL))
    except FileNotFoundError:
        return
    except (OSError, ReadError) as exc:
        _note(f"warning: case {result.case_id}: {exc}")
        return
    run = parsed.dataset_run or {}
    if isinstance(run.get("overall"), str):
        result.overall = run["overall"]
    result.scores = {str(k): score_value(v) for k, v in (run.get("scores") or {}).items()}


async def _run_case(capsule_dir: Path, case: Case, env: dict[str, str], host: object) -> CaseResult:
    from murmurd.session.run_once import run_once
    from murmurd.staging.stage import StagingError
    from murmurd.trace.writer import TraceWriteError

    result = CaseResult(case.case_id, "no_scores")
    try:
        ran = await run_once(capsule_dir, _task_text(case), host=host, progress=_note,  # type: ignore[arg-type]
                             env={**env, "MURMUR_CASE_ID": case.case_id})
    except (StagingError, TraceWriteError) as exc:
        _note(f"case {case.case_id}: cannot launch: {exc}")
        result.overall = "stage_failed"
        return result
    root = ran.staged.workdir.root
    result.session_id, result.workdir = ran.staged.session_id, str(root)
    await asyncio.to_thread(_scored, root, result)
    return result


def _environment(capsule_dir: Path, no_env_file: bool) -> dict[str, str]:
    from murmurd.dotenv import with_dotenv

    return dict(os.environ) if no_env_file else with_dotenv(capsule_dir, os.environ)


def run_cases(console: Console, capsule_dir: Path, dataset: Path, *, no_env_file: bool = False) -> int:
    from murmurd.dotenv import DotenvError
    from murmurd.host import ComponentHost
    from murmurd.manifest.validate import load_capsule

    try:
        cases = load_dataset(dataset)
        env = _environment(capsule_dir, no_env_file)
    except ReadError as exc:
        return console.error(exc)
    except DotenvError as exc:
        _note(f"murmurd eval run: {exc}")
        return 1
    manifest, report = load_capsule(capsule_dir, env)
    if manifest is None:
        _note(report.to_text())
        return 1
    console.print(f"Running {len(cases)} case(s) …")
    results: list[CaseResult] = []
    host = ComponentHost()
    try:
        for case in cases:
            console.print(f"  case: {safe(case.case_id)}")
            result = asyncio.run(_run_case(capsule_dir, case, env, host))
            console.print(f"    result: {safe(result.overall)}  session: {safe(result.session_id or '—')}")
            results.append(result)
    finally:
        host.close()
    passed = sum(1 for r in results if r.overall == "pass")
    console.print(f"── Summary ──\npass: {passed}/{len(results)}")
    for r in results:
        pairs = " ".join(f"{safe(k)}={v:g}" for k, v in sorted(r.scores.items()))
        console.print(f"  {safe(r.case_id)}  {safe(r.overall)}  {pairs or '—'}  {safe(r.workdir or '—')}")
    return 0
