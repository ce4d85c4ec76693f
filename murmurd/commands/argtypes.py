"""argparse value types shared by the subcommands: each names the rule a bad value broke."""

from __future__ import annotations

import argparse
from pathlib import Path

MANIFEST_FILE = "murmur.yaml"


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds, got {text}")
    return value


def ticket_ttl(text: str) -> float:
    """`--stream-ticket-ttl`: positive seconds, at most an hour (a ticket is meant to be short-lived)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most 3600 seconds, not {text}")
    return value


def capsule_dir(text: str) -> str:
    """A capsule directory, or the path of its `murmur.yaml` (then its directory).

    Any other file is refused here, naming what was expected, instead of failing later with a
    `NotADirectoryError`. A path that does not exist is passed on: the command reports it
    (`E-MAN-001` names the missing manifest)."""
    path = Path(text)
    if not path.is_file():
        return text
    if path.name == MANIFEST_FILE:
        return str(path.parent) if str(path.parent) else "."
    raise argparse.ArgumentTypeError(
        f"{text} is a file; give the capsule's directory or its {MANIFEST_FILE}")
