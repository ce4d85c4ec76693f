"""The session workdir (runtime-notes §5): its id, its layout, and the names of the files in it.

The layout speaks in workdir-relative names (`out/result.txt`); `murmurd.workdir_fs` opens
them beneath `root` without following a symlink. An id from the wire reaches a name only
through `workdir_fs.storage_name`, an artifact or log name only through `component`.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from pathlib import Path

from murmurd import ids, workdir_fs
from murmurd.workdir_fs import UnsafePathError

SESSION_PREFIX = "ses_"
RUNTIME_DIR = ".murmur"  # `--workdir DIR`: runtime bookkeeping under DIR/.murmur/<session-id>
# What staging lays down, as upstream does (`create_dir_all(workdir/tools)`, then the manifests):
# the root and the bookkeeping's `tools/`. The rest appears when first written, each beneath the
# root without following a symlink (`workdir_fs` makes a file's parents): `out/` with a result,
# `logs/` with a log, `contexts/` with a history, `.capsule-home` with a shell's HOME,
# `checkpoints/` when the capsule makes it (issue 29: a context session's inodes, each costly on
# a file system that allocates them slowly; `docs/decisions.md`).
STAGED_DIRS = ("tools",)
# The accessible names made later: in a reused operator workdir, a symlink or a file at one is refused at launch.
LATER_DIRS = ("out", "logs", "checkpoints", ".capsule-home")

TASK = "task.md"
TASK_FALLBACK = "input.txt"  # upstream reads it when there is no task.md
MAX_TASK_BYTES = 10 * 1024 * 1024
RESULT = "out/result.txt"
COMPACTION_SUMMARIES = "out/compaction-summaries.jsonl"  # inference.compaction.dump_summaries
TRACE = "trace.jsonl"
EVAL = "eval.jsonl"  # murmur-hook-eval's records, beside the trace when its scope is "."
INVENTORY = "MURMUR.md"

# How much of a file a guest can reach the runtime reads back (`workdir_fs` requires a limit:
# a tool may truncate any file it can reach to terabytes, sparse and free until read). Past
# the limit the read fails that call or task alone, naming the file and the limit.
MAX_RESULT_BYTES = 10 * 1024 * 1024  # a script capsule's out/result.txt: as much as a data-path result
MAX_SKILL_BYTES = 1024 * 1024  # a skill's text: as much as a manifest's prompt file
MAX_HISTORY_BYTES = 16 * 1024 * 1024  # a threaded context's history.json, which grows with the context


def new_session_id() -> str:
    """`ses_` + a UUIDv7 as 32 lowercase hex digits: later sessions sort after earlier ones."""
    return ids.new_session_id()


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
    absolute path (for display and for wasmtime), `workdir_fs` the one way to open it.

    Upstream's two places: the *accessible* workdir (the root: `task.md`, `.capsule-home`,
    `logs/shell-*`, `checkpoints/`) and the runtime's bookkeeping (`MURMUR.md`, `trace.jsonl`,
    `out/`, the other `logs/`, `tools/`, `contexts/`), at `runtime_rel` beneath the root. By
    default both are the root; `murmurd run --workdir DIR` puts bookkeeping in
    `DIR/.murmur/<session-id>`. `book(rel)` names a bookkeeping file beneath the root."""

    root: Path
    runtime_rel: str = ""

    def book(self, rel: str) -> str:
        """The root-relative name of bookkeeping file `rel` (`trace.jsonl` -> `.murmur/<id>/trace.jsonl`)."""
        return f"{self.runtime_rel}/{rel}" if self.runtime_rel else rel

    @property
    def runtime(self) -> Path:
        """Where the runtime's bookkeeping lives (the root unless `--workdir` split them)."""
        return self.path(self.runtime_rel or ".")

    def path(self, rel: str) -> Path:
        """`rel` beneath the root (`.` and `./` name the root); `..`, absolute and NUL are refused."""
        if all(part in ("", ".") for part in rel.split("/")):
            return self.root
        return workdir_fs.under(self.root, rel)

    @property
    def tools(self) -> Path:
        return self.path(self.book("tools"))

    @property
    def logs(self) -> Path:
        return self.path(self.book("logs"))

    @property
    def out(self) -> Path:
        return self.path(self.book("out"))

    @property
    def contexts(self) -> Path:
        return self.path(self.book("contexts"))

    @property
    def home(self) -> Path:
        return self.path(".capsule-home")

    @property
    def trace(self) -> Path:
        return self.path(self.book(TRACE))

    @property
    def inventory(self) -> Path:
        return self.path(self.book(INVENTORY))

    @property
    def task(self) -> Path:
        return self.path(TASK)

    @property
    def result(self) -> Path:
        return self.path(self.book(RESULT))

    def create(self) -> None:
        """The root (with its parents: an operator's path) and the staged directories. A root
        that was there already (`--workdir DIR` reused) holding a symlink or a file where murmurd
        would make a directory later is refused now, before anything runs."""
        self.root.mkdir(parents=True, exist_ok=True)
        for sub in LATER_DIRS:
            workdir_fs.expect_directory(self.root, sub)
        for sub in STAGED_DIRS:
            workdir_fs.make_dirs(self.root, self.book(sub))


def read_task_input(workdir: Workdir) -> str | None:
    """The task waiting in the accessible workdir, as upstream reads it: `task.md`, else
    `input.txt` (None when neither is there). A symlink on the way is refused (OSError)."""
    for name in (TASK, TASK_FALLBACK):
        try:
            return workdir_fs.read_text(workdir.root, name, max_bytes=MAX_TASK_BYTES, errors="replace")
        except FileNotFoundError:
            continue
    return None


def default_workdir(manifest_dir: Path, session_id: str) -> Workdir:
    return Workdir(manifest_dir / "workdir" / session_id)


def operator_workdir(directory: Path, session_id: str) -> Workdir:
    """`--workdir DIR`: DIR is the capsule's `.`; bookkeeping goes to `DIR/.murmur/<session-id>`."""
    return Workdir(Path(directory).resolve(), f"{RUNTIME_DIR}/{component(session_id)}")
