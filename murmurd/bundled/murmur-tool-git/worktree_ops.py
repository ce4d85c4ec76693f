"""murmur-tool-git: the working tree, history and commits (status, add, diff, restore, stash,
log, show, symbol_history, commit, cherry_pick), as upstream's table (default-artifacts §5.4)."""

from __future__ import annotations

import os
import sqlite3
from typing import Any

from gitcore import (
    count, error, failed_run, flag, git, head, identity_config, kind, log_write, ok, paths, positional,
    resolve_repo, text,
)
from nativekit.protocol import Result

_STATUS_WORDS = {"M": "modified", "A": "added", "D": "deleted", "R": "renamed", "C": "copied", "U": "unmerged"}
LOG_FORMAT = "--format=%H|%h|%an|%aI|%s"


def status_word(xy: str) -> str:
    """The porcelain XY code as a word; the staged letter wins over the unstaged one."""
    x, y = (xy + "  ")[0], (xy + "  ")[1]
    if x == "?" and y == "?":
        return "untracked"
    if x == "!" and y == "!":
        return "ignored"
    code = x if x not in (" ", "?", "!") else y
    return _STATUS_WORDS.get(code, "unknown")


def op_status(op: dict[str, Any], log: str | None) -> Result:
    repo = resolve_repo(op, alias="path")
    log_write(log, f"status: repo={repo!r}")
    out = git("-C", repo, "status", "--porcelain=v1")
    log_write(log, f"stdout: {out.stdout}\nstderr: {out.stderr}")
    if not out.success:
        raise failed_run("status", out)
    entries = [{"path": line[3:], "status": status_word(line[:2]), "status_code": line[:2]}
               for line in out.stdout.splitlines() if line]
    return ok(f"{len(entries)} changed file(s)" if entries else "working tree clean", {"entries": entries})


def op_add(op: dict[str, Any], log: str | None) -> Result:
    repo = resolve_repo(op)
    staged = paths(op)
    log_write(log, f"add: repo={repo!r} paths={staged!r}")
    out = git("-C", repo, "add", "--", *staged)
    if not out.success:
        raise failed_run("add", out)
    return ok(f"staged {len(staged)} path(s)", {"staged": staged})


def op_diff(op: dict[str, Any], log: str | None) -> Result:
    repo = resolve_repo(op)
    path = text(op, "path")
    log_write(log, f"diff: repo={repo!r} staged={flag(op, 'staged')} path={path!r}")
    out = git("-C", repo, "diff", *(["--staged"] if flag(op, "staged") else []), *(["--", path] if path else []))
    if not out.success:
        raise failed_run("diff", out)
    return ok("diff complete", {"diff": out.stdout})


def op_restore(op: dict[str, Any], log: str | None) -> Result:
    repo = resolve_repo(op)
    restored = paths(op)
    log_write(log, f"restore: repo={repo!r} staged={flag(op, 'staged')} paths={restored!r}")
    out = git("-C", repo, "restore", *(["--staged"] if flag(op, "staged") else []), "--", *restored)
    if not out.success:
        raise failed_run("restore", out)
    return ok(f"restored {len(restored)} path(s)", {"restored": restored})


def _stash_branch(subject: str) -> str:
    for prefix in ("WIP on ", "On "):
        if subject.startswith(prefix):
            return subject[len(prefix):].split(":", 1)[0]
    return ""


def op_stash(op: dict[str, Any], log: str | None) -> Result:
    repo = resolve_repo(op)
    sub = text(op, "subcommand")
    if sub == "push":
        message = text(op, "message")
        log_write(log, f"stash push: repo={repo!r} message={message!r}")
        out = git("-C", repo, "stash", "push", *(["-m", message] if message else []))
        if "No local changes to save" in out.combined:
            raise kind("nothing_to_stash", "nothing to stash: working tree is clean")
        if not out.success:
            raise failed_run("stash push", out)
        return ok("stash pushed", {"stash_ref": "stash@{0}"})
    if sub == "pop":
        index = count(op, "index", 0)
        log_write(log, f"stash pop: repo={repo!r} index={index}")
        out = git("-C", repo, "stash", "pop", f"stash@{{{index}}}")
        if not out.success:
            raise failed_run("stash pop", out)
        return ok("stash popped")
    if sub == "list":
        log_write(log, f"stash list: repo={repo!r}")
        out = git("-C", repo, "stash", "list", "--format=%gd|%gs")
        if not out.success:
            raise failed_run("stash list", out)
        entries = []
        for line in out.stdout.splitlines():
            ref, sep, subject = line.partition("|")
            if not sep:
                continue
            number = ref.removeprefix("stash@{").removesuffix("}")
            entries.append({"index": int(number) if number.isdigit() else 0, "message": subject,
                            "branch": _stash_branch(subject)})
        return ok(f"{len(entries)} stash entry/entries", {"entries": entries})
    if sub is None:
        return error("missing required field: subcommand (push|pop|list)")
    return error(f"unknown stash subcommand: {sub}; expected push|pop|list")


def parse_commits(stdout: str) -> list[dict[str, str]]:
    commits = []
    for line in stdout.splitlines():
        parts = line.split("|", 4)
        if len(parts) == 5:
            commits.append(dict(zip(("hash", "short_hash", "author", "date_iso", "subject"), parts)))
    return commits


def op_log(op: dict[str, Any], log: str | None) -> Result:
    repo = resolve_repo(op)
    author, since, path = text(op, "author"), text(op, "since"), text(op, "path")
    args = ["-C", repo, "log", "-n", str(count(op, "n", 20)), LOG_FORMAT]
    args += [f"--author={author}"] if author else []
    args += [f"--since={since}"] if since else []
    args += ["--", path] if path else []
    log_write(log, f"log: repo={repo!r} args={args[2:]!r}")
    out = git(*args)
    if not out.success:
        raise failed_run("log", out)
    commits = parse_commits(out.stdout)
    return ok(f"{len(commits)} commit(s)", {"commits": commits})


def op_show(op: dict[str, Any], log: str | None) -> Result:
    repo = resolve_repo(op)
    ref = positional(op, "ref", "show", default="HEAD")
    log_write(log, f"show: repo={repo!r} ref={ref!r}")
    meta = git("-C", repo, "show", "--no-patch", "--format=%H|%an|%aI|%s|%b", ref, "--")
    if not meta.success:
        if any(marker in meta.stderr for marker in ("bad object", "unknown revision", "not a valid object",
                                                     "bad revision")):
            raise kind("not_found", f"ref '{ref}' not found")
        raise failed_run("show", meta)
    parts = (meta.stdout.split("|", 4) + [""] * 5)[:5]
    commit = {"hash": parts[0], "author": parts[1], "date_iso": parts[2], "subject": parts[3],
              "body": parts[4].strip()}
    diff = git("-C", repo, "show", "--stat", "-p", ref, "--")
    return ok(f"show {ref}", {"commit": commit, "diff": diff.stdout})


def _symbol_location(repo: str, symbol_id: str) -> tuple[str, int, int]:
    """The symbol's current file and line range from code-graph's db (opened read-only)."""
    db = os.path.join(repo, ".murmur", "code-graph.db")
    if not os.path.isfile(db):
        raise kind("not_indexed", f"no code graph at {db}: run murmur-tool-code-graph index_repository first")
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            row = conn.execute("SELECT f.path, s.start_line, s.end_line FROM symbols s JOIN files f "
                               "ON f.id = s.file_id WHERE s.symbol_id = ?", (symbol_id,)).fetchone()
    except sqlite3.Error as exc:
        raise kind("not_indexed", f"the code graph at {db} cannot be read: {exc}") from None
    if row is None:
        raise kind("not_found", f"symbol '{symbol_id}' not found in the code graph")
    return str(row[0]), int(row[1]), int(row[2])


def op_symbol_history(op: dict[str, Any], log: str | None) -> Result:
    repo = resolve_repo(op)
    symbol_id = text(op, "symbol_id")
    if not symbol_id:
        return error("missing required field: symbol_id")
    file, start, end = _symbol_location(repo, symbol_id)
    log_write(log, f"symbol_history: repo={repo!r} symbol_id={symbol_id!r} file={file!r} lines={start}-{end}")
    found = {"symbol_id": symbol_id, "file": file, "start_line": start, "end_line": end}
    if not git("-C", repo, "cat-file", "-e", f"HEAD:{file}").success:
        return ok(f"{file} is not in HEAD: no history", {**found, "commits": []})
    out = git("-C", repo, "log", "-n", str(count(op, "n", 1)), LOG_FORMAT, "--no-patch", f"-L{start},{end}:{file}")
    if not out.success:
        raise failed_run("log -L", out)
    commits = parse_commits(out.stdout)
    return ok(f"{len(commits)} commit(s) touched {symbol_id}", {**found, "commits": commits})


def op_commit(op: dict[str, Any], log: str | None) -> Result:
    repo = resolve_repo(op)
    message = text(op, "message")
    if not message:
        return error("missing required field: message")
    log_write(log, f"commit: repo={repo!r} allow_empty={flag(op, 'allow_empty')}")
    out = git("-C", repo, "commit", "-m", message, *(["--allow-empty"] if flag(op, "allow_empty") else []),
              config=identity_config(repo))
    if not out.success:
        if "nothing to commit" in out.combined or "no changes added to commit" in out.combined:
            raise kind("nothing_to_commit", "nothing to commit: stage changes with add first")
        raise failed_run("commit", out)
    full, short, subject = head(repo)
    return ok("commit created", {"hash": full, "short_hash": short, "subject": subject})


def op_cherry_pick(op: dict[str, Any], log: str | None) -> Result:
    repo = resolve_repo(op)
    ref = positional(op, "ref", "cherry_pick", required=True)
    log_write(log, f"cherry_pick: repo={repo!r} ref={ref!r}")
    out = git("-C", repo, "cherry-pick", ref, config=identity_config(repo))
    if not out.success:
        if "CONFLICT" in out.combined or "after resolving the conflicts" in out.combined:
            raise kind("conflict", f"cherry-pick of {ref} conflicts; resolve the conflicts, or abort")
        raise failed_run("cherry-pick", out)
    full, short, subject = head(repo)
    return ok(f"cherry-picked {ref}", {"hash": full, "short_hash": short, "subject": subject})
