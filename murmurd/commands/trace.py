"""`murmurd trace show|steps|diff|report`: reading session traces (murmurd/traceview/)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_trace(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    trace = commands.add_parser("trace", help="read session traces: show, steps, diff, report")
    sub = trace.add_subparsers(dest="trace_command", required=True)
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument("--workdir", default="workdir", help="where the ses_* session directories are (default ./workdir)")
    where.add_argument("--json", action="store_true", help="the same content as JSON")
    selector = "a session: id, id suffix, or a trace path (default: the latest)"
    show = sub.add_parser("show", parents=[where], help="one session's sections")
    show.add_argument("session", nargs="?", help=selector)
    show.add_argument("--html", metavar="FILE", help="write a self-contained HTML timeline of the session to FILE")
    steps = sub.add_parser("steps", parents=[where], help="one row per inference turn")
    steps.add_argument("session", nargs="?", help=selector)
    steps.add_argument("-v", "--verbose", action="store_true", help="add the first string of each turn's input")
    diff = sub.add_parser("diff", parents=[where], help="two sessions side by side (default @2 @1)")
    diff.add_argument("sessions", nargs="*", help="two sessions (also @N: the N-th most recent)")
    report = sub.add_parser("report", parents=[where], help="statistics over several sessions")
    report.add_argument("sessions", nargs="*", help="sessions (default: every session)")
    report.add_argument("--last", type=int, help="the N most recent sessions")
    report.add_argument("--since", help="sessions started within <N>m, <N>h or <N>d")
    trace.set_defaults(handler=cmd_trace)


def cmd_trace(args: argparse.Namespace) -> int:
    from murmurd.traceview import commands

    console, workdir = commands.Console(), Path(args.workdir)
    if args.trace_command == "show":
        return commands.show(console, workdir, args.session, as_json=args.json,
                             html=Path(args.html) if args.html else None)
    if args.trace_command == "steps":
        return commands.steps(console, workdir, args.session, verbose=args.verbose, as_json=args.json)
    if args.trace_command == "diff":
        return commands.diff(console, workdir, args.sessions, as_json=args.json)
    return commands.report(console, workdir, args.sessions, last=args.last, since=args.since, as_json=args.json)
