"""The session workdir (runtime-notes §5): its id and its layout."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

SESSION_PREFIX = "ses_"
_SUBDIRS = ("out", "logs", "tools", "contexts", "checkpoints", ".capsule-home")


def new_session_id() -> str:
    """`ses_` + 32 lowercase hex digits."""
    return SESSION_PREFIX + secrets.token_hex(16)


@dataclass(frozen=True)
class Workdir:
    """Paths of one session's workdir. The root is the capsule's `.`."""

    root: Path

    @property
    def tools(self) -> Path:
        return self.root / "tools"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def out(self) -> Path:
        return self.root / "out"

    @property
    def contexts(self) -> Path:
        return self.root / "contexts"

    @property
    def home(self) -> Path:
        return self.root / ".capsule-home"

    @property
    def trace(self) -> Path:
        return self.root / "trace.jsonl"

    @property
    def inventory(self) -> Path:
        return self.root / "MURMUR.md"

    @property
    def task(self) -> Path:
        return self.root / "task.md"

    @property
    def result(self) -> Path:
        return self.out / "result.txt"

    def tool_dir(self, name: str) -> Path:
        return self.tools / name

    def create(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        for sub in _SUBDIRS:
            (self.root / sub).mkdir(exist_ok=True)


def default_workdir(manifest_dir: Path, session_id: str) -> Workdir:
    return Workdir(manifest_dir / "workdir" / session_id)
