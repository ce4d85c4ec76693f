"""Session workdir retention: `murmurd run --keep-sessions N` and `murmurd gc`.

A workdir's `ses_*` directories (or its `.murmur/ses_*`, where `run --workdir` keeps them) are
found and ordered as `murmurd trace` finds them (`traceview.sessions`: UUIDv7 time, oldest
first), and picked by trace's selectors: session ids, id suffixes, `@N` (the N-th newest),
`--keep-last N` (all but the newest N) and `--older-than <N>m|h|d` (`--since`'s grammar).

A directory a live session holds (`staging.session_hold`: a `serve` daemon's, another `run`'s)
is never removed, whatever selected it; nothing else is touched: no file outside a selected
`ses_*` directory, no symlink followed (`shutil.rmtree` works by file descriptor here).
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from murmurd.staging.session_hold import exclusive
from murmurd.traceview.errors import BAD_SELECTOR, ReadError
from murmurd.traceview.sessions import SessionDir, open_workdir, parse_since, resolve

@dataclass
class Collected:
    removed: list[str] = field(default_factory=list)
    in_use: list[str] = field(default_factory=list)  # selected, but a live session holds them
    failed: list[tuple[str, str]] = field(default_factory=list)  # (name, why)
    freed_bytes: int = 0


def select(workdir: Path, selectors: list[str], keep_last: int | None, older_than: str | None,
           now_ms: int | None = None) -> tuple[Path, list[SessionDir]]:
    """(where the sessions are, the sessions picked, oldest first). Selectors and the two
    policies combine as a union; with neither, nothing is picked (gc never guesses)."""
    if keep_last is not None and keep_last < 0:
        raise ReadError(BAD_SELECTOR, f"--keep-last {keep_last}: want 0 or more")
    found = open_workdir(workdir)
    picked: dict[str, SessionDir] = {}
    by_name = {s.name: s for s in found.sessions}
    for selector in selectors:
        if "/" in selector or selector.endswith(".jsonl"):
            raise ReadError(BAD_SELECTOR, f"{selector!r}: name a session (id, id suffix or @N), not a path")
        name = Path(resolve(workdir, selector, allow_at=True).rel).parts[0]
        picked[name] = by_name[name]
    if keep_last is not None:
        older = found.sessions[:-keep_last] if keep_last else found.sessions
        picked.update((s.name, s) for s in older)
    if older_than is not None:
        cutoff = (now_ms if now_ms is not None else int(time.time() * 1000)) - parse_since(older_than)
        picked.update((s.name, s) for s in found.sessions if s.time_ms < cutoff)
    return found.root, sorted(picked.values(), key=lambda s: (s.time_ms, s.name))


def _size(path: Path) -> int:
    """Bytes of the regular files beneath `path` (symlinks neither followed nor counted)."""
    total = 0
    for directory, _dirs, files in os.walk(path, followlinks=False):
        for name in files:
            try:
                info = os.lstat(os.path.join(directory, name))
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                total += info.st_size
    return total


def collect(root: Path, sessions: list[SessionDir], *, dry_run: bool = False) -> Collected:
    """Remove each of `sessions` beneath `root` that no live session holds."""
    if not shutil.rmtree.avoids_symlink_attacks:  # true on Linux: removal by file descriptor
        raise OSError("shutil.rmtree on this platform can follow symlinks; refusing to remove sessions")
    done = Collected()
    for session in sessions:
        path = root / session.name
        with exclusive(path) as free:
            if not free:
                if path.is_dir() and not path.is_symlink():
                    done.in_use.append(session.name)
                continue
            size = _size(path)
            if not dry_run:
                try:
                    shutil.rmtree(path)
                except OSError as exc:
                    done.failed.append((session.name, exc.strerror or str(exc)))
                    continue
            done.removed.append(session.name)
            done.freed_bytes += size
    return done


def keep_newest(workdir: Path, keep: int) -> Collected:
    """`run --keep-sessions N`: every session of `workdir` but the newest `keep` (0: keep all)."""
    if keep == 0:
        return Collected()
    root, sessions = select(workdir, [], keep, None)
    return collect(root, sessions)
