"""Finding session traces on disk: upstream's selectors (fact sheet §5) over a workdir.

Session directories are `ses_*` entries of the workdir (or of its `.murmur/`, where
`murmurd run --workdir` keeps them). Ids are UUIDv7, so a session's time is in its name; a
session from before murmurd minted UUIDv7 (random hex) has none, and sorts by its directory's
mtime instead, so an old random id never poses as the latest session.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from murmurd import workdir_fs
from murmurd.workdir import RUNTIME_DIR, SESSION_PREFIX, TRACE
from murmurd.traceview.errors import BAD_SELECTOR, BAD_TRACE, IO_ERROR, ReadError
from murmurd.traceview.parse import Trace, parse_trace

MAX_TRACE_BYTES = 256 * 1024 * 1024  # a trace with include_tool_output can be large, never unbounded
FULL_ID = re.compile(r"ses_[0-9a-f]{32}")
_AT = re.compile(r"@([0-9]{1,9})")
_SINCE = re.compile(r"([0-9]{1,9})([mhd])")
_UNIT_MS = {"m": 60_000, "h": 3_600_000, "d": 86_400_000}


def uuid7_ms(session_name: str) -> int | None:
    """The Unix-ms timestamp a UUIDv7 session id opens with; None for any other id."""
    hex_part = session_name[len(SESSION_PREFIX):]
    if not re.fullmatch(r"[0-9a-f]{32}", hex_part) or hex_part[12] != "7" or hex_part[16] not in "89ab":
        return None
    return int(hex_part[:12], 16)


@dataclass(frozen=True)
class SessionDir:
    name: str
    time_ms: int  # from the id, else the directory's mtime


@dataclass(frozen=True)
class Source:
    """A trace to read: `root`/`rel` (read without following a symlink), `shown` in messages."""

    root: Path
    rel: str
    shown: str
    literal: bool = False  # an operator-given path, not a session directory


def _listing(directory: Path) -> list[SessionDir]:
    found = []
    with os.scandir(directory) as entries:
        for entry in entries:
            if not entry.name.startswith(SESSION_PREFIX) or not entry.is_dir(follow_symlinks=False):
                continue
            stamp = uuid7_ms(entry.name)
            if stamp is None:
                stamp = int(entry.stat(follow_symlinks=False).st_mtime * 1000)
            found.append(SessionDir(entry.name, stamp))
    return sorted(found, key=lambda s: (s.time_ms, s.name))


@dataclass(frozen=True)
class Workdir:
    given: Path  # as the operator named it
    root: Path  # where the ses_* directories are
    sessions: list[SessionDir]  # oldest first

    def source(self, name: str, file: str = TRACE) -> Source:
        return Source(self.root, f"{name}/{file}", str(self.root / name / file))


def open_workdir(given: Path) -> Workdir:
    """`E-IO-001` when `given` is not a readable directory. Without `ses_*` entries of its own,
    its `.murmur/` is looked at (where `murmurd run --workdir DIR` puts sessions)."""
    try:
        info = os.stat(given)
    except OSError as exc:
        hint = ""
        if exc.errno == errno.ENOENT:
            hint = ("; sessions are kept in <capsule-dir>/workdir: run this from the capsule's directory "
                    "or pass --workdir <capsule-dir>/workdir")
        raise ReadError(IO_ERROR, f"workdir {given}: {exc.strerror}{hint}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise ReadError(IO_ERROR, f"workdir {given}: not a directory")
    try:
        sessions = _listing(given)
        root = given
        runtime = given / RUNTIME_DIR
        if not sessions and runtime.is_dir() and not runtime.is_symlink():
            sessions, root = _listing(runtime), runtime
    except OSError as exc:
        raise ReadError(IO_ERROR, f"workdir {given}: {exc.strerror}") from None
    return Workdir(given, root, sessions)


def _literal(selector: str, file: str) -> Source:
    path = Path(selector)
    if path.is_dir():
        path = path / file
    return Source(path.parent, path.name, selector, literal=True)


def resolve(workdir: Path, selector: str | None, *, allow_at: bool = False, file: str = TRACE) -> Source:
    """One session's `file` (its trace unless said otherwise). `E-TRC-002` when the selector
    names no session (or several), `E-IO-001` when the workdir is missing."""
    if selector is not None and ("/" in selector or selector.endswith(".jsonl")):
        return _literal(selector, file)
    found = open_workdir(workdir)
    names = [s.name for s in found.sessions]
    if selector is None:
        if not names:
            raise ReadError(BAD_SELECTOR, f"no sessions in {workdir}")
        return found.source(names[-1], file)
    if allow_at and selector.startswith("@"):
        match = _AT.fullmatch(selector)
        n = int(match.group(1)) if match else 0
        if not 1 <= n <= len(names):
            raise ReadError(BAD_SELECTOR, f"{selector!r}: want @1 (newest) to @{len(names)} in {workdir}")
        return found.source(names[-n], file)
    if FULL_ID.fullmatch(selector):
        if selector not in names:
            raise ReadError(BAD_SELECTOR, f"no session {selector} in {workdir}")
        return found.source(selector, file)
    hits = [n for n in names if n.lower().endswith(selector.lower())]
    if len(hits) != 1:
        what = "no session ends with" if not hits else f"{len(hits)} sessions end with"
        listed = "" if not hits else ": " + ", ".join(hits)
        raise ReadError(BAD_SELECTOR, f"{what} {selector!r} in {workdir}{listed}")
    return found.source(hits[0], file)


def read_trace(source: Source, *, allow_open: bool = False) -> Trace:
    """The parsed trace. A literal path that cannot be read is `E-IO-001`; a session directory
    without a readable trace is an incomplete session, `E-TRC-001`."""
    try:
        data = workdir_fs.read_bytes(source.root, source.rel, max_bytes=MAX_TRACE_BYTES)
    except (OSError, workdir_fs.UnsafePathError) as exc:
        code = IO_ERROR if source.literal or getattr(exc, "errno", None) not in (errno.ENOENT, None) else BAD_TRACE
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ReadError(code, f"{source.shown}: {reason}") from None
    return parse_trace(data, source.shown, allow_open=allow_open)


def parse_since(text: str) -> int:
    """`--since 30m|6h|7d` as a window in ms; `E-TRC-002` for anything else."""
    match = _SINCE.fullmatch(text)
    if match is None:
        raise ReadError(BAD_SELECTOR, f"--since {text!r}: want <N>m, <N>h or <N>d")
    return int(match.group(1)) * _UNIT_MS[match.group(2)]


def select_many(workdir: Path, selectors: list[str], last: int | None, since: str | None,
                now_ms: int | None = None) -> list[Source]:
    """`report`'s sessions: the selectors, or `--last N` / `--since` (not both kinds), or all."""
    if selectors and (last is not None or since is not None):
        raise ReadError(BAD_SELECTOR, "session selectors cannot be combined with --last or --since")
    if last is not None and last < 1:
        raise ReadError(BAD_SELECTOR, f"--last {last}: want 1 or more")
    window = parse_since(since) if since is not None else None
    if selectors:
        return [resolve(workdir, s) for s in selectors]
    found = open_workdir(workdir)
    sessions = found.sessions
    if window is not None:
        cutoff = (now_ms if now_ms is not None else int(time.time() * 1000)) - window
        sessions = [s for s in sessions if s.time_ms >= cutoff]
    if last is not None:
        sessions = sessions[-last:]
    return [found.source(s.name) for s in sessions]
