"""The session workdir (runtime-notes §5): its id, its layout, and the names of the files in it.

The layout speaks in workdir-relative names (`out/result.txt`); `murmurd.workdir_fs` opens
them beneath `root` without following a symlink. An id from the wire reaches a name only
through `workdir_fs.storage_name`, an artifact or log name only through `component`.
"""

from __future__ import annotations

import errno
import secrets
from dataclasses import dataclass
from pathlib import Path

from murmurd import workdir_fs
from murmurd.workdir_fs import UnsafePathError

SESSION_PREFIX = "ses_"
_SUBDIRS = ("out", "logs", "tools", "contexts", "checkpoints", ".capsule-home")

TASK = "task.md"
RESULT = "out/result.txt"
TRACE = "trace.jsonl"
INVENTORY = "MURMUR.md"

# How much of a file a guest can reach the runtime reads back (`workdir_fs` requires a limit:
# a tool may truncate any file it can reach to terabytes, sparse and free until read). Past
# the limit the read fails that call or task alone, naming the file and the limit.
MAX_RESULT_BYTES = 10 * 1024 * 1024  # a script capsule's out/result.txt: as much as a data-path result
MAX_SKILL_BYTES = 1024 * 1024  # a skill's text: as much as a manifest's prompt file
MAX_HISTORY_BYTES = 16 * 1024 * 1024  # a threaded context's history.json, which grows with the context


def new_session_id() -> str:
    """`ses_` + 32 lowercase hex digits."""
    return SESSION_PREFIX + secrets.token_hex(16)


def component(name: str) -> str:
    """`name` as one path component (an artifact or log name); refuses `/`, `..`, NUL, empty."""
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\x00" in name:
        raise UnsafePathError(name, "is not a plain file name", errno.EINVAL)
    return name


def log_file(name: str) -> str:
    return f"logs/{component(name)}"


def tool_file(artifact: str, file: str) -> str:
    return f"tools/{component(artifact)}/{component(file)}"


def task_result_file(task_id: str) -> str:
    """`out/result_<task-id>.txt`; a task id a client chose is mapped by `storage_name`."""
    return f"out/result_{workdir_fs.storage_name(task_id)}.txt"


def history_file(context_id: str) -> str:
    """`contexts/<context-id>/history.json`; the context id comes from the wire."""
    return f"contexts/{workdir_fs.storage_name(context_id)}/history.json"


@dataclass(frozen=True)
class Workdir:
    """One session's workdir. The root is the capsule's `.`; `path` is the one way to a file's
    absolute path (for display and for wasmtime), `workdir_fs` the one way to open it."""

    root: Path

    def path(self, rel: str) -> Path:
        """`rel` beneath the root (`.` and `./` name the root); `..`, absolute and NUL are refused."""
        if all(part in ("", ".") for part in rel.split("/")):
            return self.root
        return workdir_fs.under(self.root, rel)

    @property
    def tools(self) -> Path:
        return self.path("tools")

    @property
    def logs(self) -> Path:
        return self.path("logs")

    @property
    def out(self) -> Path:
        return self.path("out")

    @property
    def contexts(self) -> Path:
        return self.path("contexts")

    @property
    def home(self) -> Path:
        return self.path(".capsule-home")

    @property
    def trace(self) -> Path:
        return self.path(TRACE)

    @property
    def inventory(self) -> Path:
        return self.path(INVENTORY)

    @property
    def task(self) -> Path:
        return self.path(TASK)

    @property
    def result(self) -> Path:
        return self.path(RESULT)

    def tool_dir(self, name: str) -> Path:
        return self.path(f"tools/{component(name)}")

    def create(self) -> None:
        """The root (with its parents: an operator's path) and the layout's directories."""
        self.root.mkdir(parents=True, exist_ok=True)
        for sub in _SUBDIRS:
            workdir_fs.make_dirs(self.root, sub)


def default_workdir(manifest_dir: Path, session_id: str) -> Workdir:
    return Workdir(manifest_dir / "workdir" / session_id)
