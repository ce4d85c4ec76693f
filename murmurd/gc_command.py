"""`murmurd gc`: remove old session workdirs on request (docs/trace.md, "Keeping the disk")."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

DEFAULT_KEEP_SESSIONS = 20
"""`murmurd run --keep-sessions`: the session directories of its workdir it keeps (the newest)."""


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    gc = commands.add_parser(
        "gc", help="remove old session workdirs (trace's selectors; live sessions are never removed)",
        description="Remove session directories (ses_*) of a workdir. Pick them with session selectors "
                    "(id, id suffix, @N), --keep-last N and/or --older-than; with none of these nothing "
                    "is removed. A session a running serve or run still holds is left alone.")
    gc.add_argument("sessions", nargs="*", help="sessions to remove: id, id suffix, or @N (the N-th most recent)")
    gc.add_argument("--workdir", default="workdir", help="where the ses_* session directories are (default ./workdir)")
    gc.add_argument("--keep-last", type=int, metavar="N", help="remove every session but the N most recent")
    gc.add_argument("--older-than", metavar="AGE", help="remove sessions started more than <N>m, <N>h or <N>d ago")
    gc.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")
    gc.add_argument("--json", action="store_true", help="the same report as one JSON object")
    gc.set_defaults(handler=command)


def command(args: argparse.Namespace) -> int:
    from murmurd.traceview.errors import ReadError
    from murmurd.workdir_gc import collect, select

    try:
        root, picked = select(Path(args.workdir), list(args.sessions), args.keep_last, args.older_than)
        done = collect(root, picked, dry_run=args.dry_run)
    except ReadError as exc:  # as `murmurd trace`: error[CODE] on stderr, exit 1
        print(str(exc), file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"murmurd gc: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"workdir": str(root), "dry_run": args.dry_run, "removed": done.removed,
                          "in_use": done.in_use, "failed": [{"session": n, "error": e} for n, e in done.failed],
                          "freed_bytes": done.freed_bytes}))
    else:
        verb = "would remove" if args.dry_run else "removed"
        for name in done.removed:
            print(f"{verb} {name}")
        for name in done.in_use:
            print(f"kept {name}: a running session holds it")
        for name, why in done.failed:
            print(f"could not remove {name}: {why}", file=sys.stderr)
        print(f"{verb} {len(done.removed)} session(s), {done.freed_bytes / 1e6:.1f} MB, in {root}")
    return 1 if done.failed else 0
