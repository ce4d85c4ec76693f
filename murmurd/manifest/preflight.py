"""The process transport's pre-flight (process-transport.md §2, §3): the CLI a manifest names
must be on PATH before anything is staged. Pure but for the file lookup."""

from __future__ import annotations

import os
from pathlib import PurePath

DEFAULT_COMMAND = "claude"
PREFLIGHT_CODE = "E-RUN-006"
INSTALL_HINTS = {
    "claude": "https://claude.ai/download",
    "codex": "https://developers.openai.com/codex/cli",
}


def dialect_of(command: str) -> str:
    """`codex` when the command's file stem is codex (any case), else `claude` (§3)."""
    return "codex" if PurePath(command).stem.lower() == "codex" else "claude"


def find_on_path(command: str, path: str | None) -> str | None:
    """The file the command names: joined to each PATH directory, the first regular file; an
    absolute command is itself (joining replaces the directory), as upstream's pre-flight."""
    if not command:
        return None
    if os.path.isabs(command):
        return command if os.path.isfile(command) else None
    for directory in (path or "").split(os.pathsep):
        if not directory:
            continue
        candidate = os.path.join(directory, command)
        if os.path.isfile(candidate):
            return candidate
    return None


def preflight_error(command: str) -> str:
    """Upstream's E-RUN-006 text. Its hint names the CLI the command selects (upstream always
    names claude's page; murmurd names codex's for a codex command, as the docs promise)."""
    return (f"error[{PREFLIGHT_CODE}]: inference.command '{command}' not found on PATH\n"
            f"  hint: install the {dialect_of(command)} CLI from {INSTALL_HINTS[dialect_of(command)]}")
