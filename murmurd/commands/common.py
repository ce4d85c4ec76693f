"""What several commands share: stderr lines, the launch environment (the project `.env`), the
`--task` text."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def eprint(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_env(args: argparse.Namespace, command: str) -> dict[str, str] | None:
    """The environment the capsule launches with: the process's, plus the project `.env`
    (never overriding) unless `--no-env-file`. None after reporting a malformed `.env`."""
    import os

    from murmurd.dotenv import DotenvError, with_dotenv

    if args.no_env_file:
        return dict(os.environ)
    try:
        return with_dotenv(Path(args.capsule_dir), os.environ)
    except DotenvError as exc:
        eprint(f"murmurd {command}: {exc}")
        return None


def task_text(value: str) -> str:
    """`--task` is a file path when such a file exists, else the task text itself."""
    candidate = Path(value)
    try:
        if candidate.is_file():
            return candidate.read_text(encoding="utf-8")
    except OSError:
        pass
    return value
