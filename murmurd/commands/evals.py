"""`murmurd eval show|diff|run`: reading a session's scores and running a task set (murmurd/eval/)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_eval(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    evals = commands.add_parser("eval", help="read and run evals: show, diff, run")
    sub = evals.add_subparsers(dest="eval_command", required=True)
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument("--workdir", default="workdir", help="where the ses_* session directories are (default ./workdir)")
    where.add_argument("--json", action="store_true", help="the same content as JSON")
    show = sub.add_parser("show", parents=[where], help="one session's eval.jsonl")
    show.add_argument("session", nargs="?", help="a session: id, id suffix, or an eval.jsonl path (default: the latest)")
    diff = sub.add_parser("diff", parents=[where], help="two sessions' pass rates per scorer")
    diff.add_argument("a", help="the first session")
    diff.add_argument("b", help="the second session")
    run = sub.add_parser("run", help="run every case of a task set and score it (sessions in <capsule-dir>/workdir)")
    run.add_argument("capsule_dir", metavar="capsule-dir", nargs="?", default=".", help="the capsule (default .)")
    run.add_argument("--dataset", default="eval.jsonl", help="the task set, JSON lines (default ./eval.jsonl)")
    run.add_argument("--no-env-file", action="store_true", help="do not load the project's .env")
    evals.set_defaults(handler=cmd_eval)


def cmd_eval(args: argparse.Namespace) -> int:
    from murmurd.eval import commands

    console = commands.Console()
    if args.eval_command == "show":
        return commands.show(console, Path(args.workdir), args.session, as_json=args.json)
    if args.eval_command == "diff":
        return commands.diff(console, Path(args.workdir), args.a, args.b, as_json=args.json)
    return commands.run(console, Path(args.capsule_dir), Path(args.dataset), no_env_file=args.no_env_file)
