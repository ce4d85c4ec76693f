"""`murmurd run`: stage a capsule, run one task, stream the answer; what it prints at launch, and the
workdir's older sessions removed after it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from murmurd import gc_command
from murmurd.commands.argtypes import capsule_dir, non_negative_int
from murmurd.commands.common import eprint, run_env, task_text
from murmurd.commands.scope import containment_check


def add_run(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    run = commands.add_parser("run", help="stage a capsule and run one task, streaming the answer")
    run.add_argument("capsule_dir", metavar="capsule-dir", type=capsule_dir, help="the capsule's directory, or its murmur.yaml")
    run.add_argument("--task", help="the task text, or a file holding it (default: task.md, else input.txt, "
                                    "in --workdir)")
    run.add_argument("--workdir", help="session workdir (default <capsule-dir>/workdir/<session-id>)")
    run.add_argument("--system-prompt", help="replace the manifest's system prompt for this run (blank clears it)")
    run.add_argument("--json", action="store_true",
                     help="print exactly one JSON line on stdout (session, workdir, task, result); no streamed text")
    run.add_argument("-v", "--verbose", action="store_true", help="also print workdir, manifest, driver and skills")
    run.add_argument("--no-env-file", action="store_true", help="do not load the project's .env")
    run.add_argument("--containment", choices=["advisory", "scoped", "sealed"],
                     help="a containment floor (can only raise the manifest's); refused when murmurd cannot meet it")
    run.add_argument("--explain-scope", action="store_true",
                     help="print the containment and every effective grant (with --json: one JSON line), then exit")
    run.add_argument("--keep-sessions", type=non_negative_int, default=gc_command.DEFAULT_KEEP_SESSIONS, metavar="N",
                     help="keep the N newest session directories of the workdir, remove older ones "
                          "(default 20; 0 keeps every one; a session still running is never removed)")
    run.set_defaults(handler=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    import asyncio
    import os

    from murmurd.host import ComponentHost
    from murmurd.manifest.validate import load_capsule
    from murmurd.session.events import TaskEvents
    from murmurd.session.run_once import PrintingEvents, run_once, stderr_writer, stdout_writer
    from murmurd.staging.stage import StagingError
    from murmurd.trace.writer import TraceWriteError

    env = run_env(args, "run")
    if env is None:
        return 1
    refused = containment_check(args, env, "run")
    if refused is not None:
        return refused
    if args.system_prompt is not None:
        manifest, _ = load_capsule(Path(args.capsule_dir), env)
        if manifest is not None and manifest.inference is None:
            eprint("murmurd run: E-IO-003: --system-prompt needs an inference: block; "
                    f"{args.capsule_dir} is a script capsule")
            return 1
    quiet_stdout = args.json  # --json: stdout carries exactly one line, the summary
    events: TaskEvents = PrintingEvents(
        (lambda _text: None) if quiet_stdout else stdout_writer,
        stderr_writer,
    )

    def on_staged(staged: object) -> None:
        if not args.json:
            for line in _launch_lines(staged, args.verbose):
                eprint(line)

    host = ComponentHost()
    try:
        result = asyncio.run(run_once(
            Path(args.capsule_dir), task_text(args.task) if args.task is not None else None, host=host,
            workdir=Path(args.workdir) if args.workdir else None, progress=eprint, events=events,
            env=env, system_prompt=args.system_prompt, on_staged=on_staged,
        ))
    except StagingError as exc:
        eprint(f"murmurd run: cannot launch {args.capsule_dir}:\n{exc}")
        return 1
    except TraceWriteError as exc:  # the session's trace or OTel log is refused (a symlink in --workdir)
        eprint(f"murmurd run: cannot open the session: {exc}")
        return 1
    finally:
        host.close()
    outcome, staged = result.outcome, result.staged
    _keep_sessions(staged.workdir.runtime.parent, args.keep_sessions)
    if args.json:
        print(json.dumps({
            "pid": os.getpid(), "session_id": staged.session_id, "name": staged.manifest.name,
            "version": staged.manifest.version, "workdir": str(staged.workdir.root),
            "task_id": outcome.task_id, "context_id": outcome.context_id, "exit_status": outcome.exit_status,
            "result": outcome.result_text if outcome.delivered else None, "error": outcome.error,
        }), flush=True)
    else:
        assert isinstance(events, PrintingEvents)
        if events.wrote_text:
            print(flush=True)
        eprint(f"workdir: {staged.workdir.root}")
        eprint(f"status:  {outcome.exit_status}")
    if not outcome.ok:
        eprint(f"murmurd run: task ended {outcome.exit_status}: {outcome.error}")
    return 0 if outcome.ok else 1


def _launch_lines(staged: object, verbose: bool) -> list[str]:
    """What `mur run` prints at launch: the session always; with -v the workdir, manifest,
    driver and installed skills."""
    from murmurd.staging.stage import StagedCapsule

    assert isinstance(staged, StagedCapsule)
    lines = [f"session: {staged.session_id}"]
    if not verbose:
        return lines
    manifest = staged.manifest
    lines += [f"workdir: {staged.workdir.root}", f"manifest: {manifest.name} v{manifest.version}"]
    inference = manifest.inference
    if inference is not None and inference.driver is not None:
        lines.append(f"driver: {inference.driver.artifact} ({inference.model or 'default model'})")
    elif inference is not None and inference.transport == "process":  # upstream: `<cmd> process (<model>)`
        lines.append(f"driver: {inference.command} process ({inference.model or 'default model'})")
    skills = sum(1 for a in staged.artifacts.values() if a.kind == "skill")
    if skills:
        lines.append(f"skills: {skills} installed")
    return lines


def _keep_sessions(where: Path, keep: int) -> None:
    """`run --keep-sessions N`: the workdir's older sessions go (a live one never does)."""
    from murmurd.traceview.errors import ReadError
    from murmurd.workdir_gc import keep_newest

    try:
        done = keep_newest(where, keep)
    except (OSError, ReadError) as exc:
        eprint(f"murmurd run: old sessions not removed: {exc}")
        return
    for name, why in done.failed:
        eprint(f"murmurd run: could not remove old session {name}: {why}")
