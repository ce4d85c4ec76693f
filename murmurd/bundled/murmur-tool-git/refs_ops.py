"""murmur-tool-git: branches, remotes, tags, merges and worktrees (branch, checkout, switch,
reset, fetch, pull, push, clone, remote, tag, merge, worktree, create_worktree), as upstream's
table (default-artifacts §5.4)."""

from __future__ import annotations

import os
from typing import Any

from gitcore import (
    GitOut, check_allowed, check_remote, count, error, failed_run, flag, git, identity_config, kind, log_write, ok, positional,
    resolve_repo, text,
)
from nativekit.protocol import Result


def _any(out: GitOut, *markers: str) -> bool:
    return any(marker in out.combined for marker in markers)


def _current_branch(repo: str) -> str:
    return git("-C", repo, "branch", "--show-current").stdout.strip()


def _subcommand(op: dict[str, Any], choices: tuple[str, ...]) -> str:
    sub = text(op, "subcommand")
    if sub in choices:
        return sub
    if sub is None:
        raise _missing(f"subcommand ({'|'.join(choices)})")
    raise _missing(f"subcommand ({'|'.join(choices)}), not {sub!r}")


def _missing(what: str) -> Exception:
    from nativekit.protocol import ToolFailure

    return ToolFailure(f"missing required field: {what}", "error")


def op_branch(op: dict[str, Any], log: str | None) -> Result:
    repo = resolve_repo(op)
    sub = _subcommand(op, ("list", "create", "delete"))
    if sub == "list":
        out = git("-C", repo, "branch", "-vv", "--format=%(refname:short)|%(HEAD)|%(upstream:short)")
        if not out.success:
            raise failed_run("branch", out)
        branches = []
        for line in out.stdout.splitlines():
            name, current, upstream = (line.split("|", 2) + ["", ""])[:3]
            branches.append({"name": name, "current": current.strip() == "*", "upstream": upstream or None})
        return ok(f"{len(branches)} branch(es)", {"branches": branches})
    name = positional(op, "name", "branch", required=True)
    if sub == "create":
        start = positional(op, "from", "branch")
        log_write(log, f"branch create: repo={repo!r} name={name!r} from={start!r}")
        out = git("-C", repo, "branch", name, *([start] if start else []))
        if not out.success:
            if _any(out, "already exists"):
                raise kind("already_exists", f"branch '{name}' already exists")
            raise failed_run("branch", out)
        return ok(f"branch '{name}' created", {"name": name})
    log_write(log, f"branch delete: repo={repo!r} name={name!r} force={flag(op, 'force')}")
    out = git("-C", repo, "branch", "-D" if flag(op, "force") else "-d", name)
    if not out.success:
        if _any(out, "not found"):
            raise kind("not_found", f"branch '{name}' not found")
        if _any(out, "not fully merged"):
            raise kind("not_merged", f"branch '{name}' is not fully merged; delete it with force: true")
        raise failed_run("branch", out)
    return ok(f"branch '{name}' deleted", {"name": name})


def _switching(out: GitOut, what: str, target: str) -> None:
    if _any(out, "Your local changes", "would be overwritten"):
        raise kind("dirty_working_tree", f"local changes would be overwritten by {what} {target}; "
                                         "commit or stash them first")
    if _any(out, "already exists"):
        raise kind("already_exists", f"branch '{target}' already exists")


def op_checkout(op: dict[str, Any], log: str | None) -> Result:
    repo = resolve_repo(op)
    ref = positional(op, "ref", "checkout", required=True)
    log_write(log, f"checkout: repo={repo!r} ref={ref!r} create={flag(op, 'create')}")
    out = git("-C", repo, "checkout", *(["-b"] if flag(op, "create") else []), ref, "--")
    if not out.success:
        _switching(out, "checkout of", ref)
        if _any(out, "did not match", "invalid reference", "unknown revision"):
            raise kind("not_found", f"ref '{ref}' not found")
        raise failed_run("checkout", out)
    branch = _current_branch(repo)
    return ok(f"checked out {ref}", {"branch": branch, "detached": not branch})


def op_switch(op: dict[str, Any], log: str | None) -> Result:
    repo = resolve_repo(op)
    branch = positional(op, "branch", "switch", required=True)
    log_write(log, f"switch: repo={repo!r} branch={branch!r} create={flag(op, 'create')}")
    out = git("-C", repo, "switch", *(["-c"] if flag(op, "create") else []), branch)
    if not out.success:
        _switching(out, "switch to", branch)
        if _any(out, "invalid reference", "does not exist"):
            raise kind("not_found", f"branch '{branch}' not found")
        raise failed_run("switch", out)
    return ok(f"switched to {branch}", {"branch": _current_branch(repo)})


def op_reset(op: dict[str, Any], log: str | None) -> Result:
    repo = resolve_repo(op)
    mode = text(op, "mode")
    if mode not in ("soft", "mixed", "hard"):
        return error("missing required field: mode (soft|mixed|hard)")
    ref = positional(op, "ref", "reset", default="HEAD")
    log_write(log, f"reset: repo={repo!r} mode={mode} ref={ref!r}")
    out = git("-C", repo, "reset", f"--{mode}", ref, "--")
    if not out.success:
        raise failed_run("reset", out)
    return ok(f"reset {mode} to {ref}", {"ref": git("-C", repo, "rev-parse", "HEAD").stdout.strip()})


def _remote_missing(out: GitOut) -> bool:
    return _any(out, "does not appear to be a git repository", "Could not read from remote", "No such remote",
                "unknown remote")


def op_fetch(op: dict[str, Any], log: str | None) -> Result:
    repo = resolve_repo(op)
    remote = positional(op, "remote", "fetch", default="origin")
    branch = positional(op, "branch", "fetch")
    log_write(log, f"fetch: repo={repo!r} remote={remote!r} branch={branch!r}")
    check_remote(repo, remote)
    out = git("-C", repo, "fetch", remote, *([branch] if branch else []))
    if not out.success:
        if _remote_missing(out):
            raise kind("remote_not_found", f"remote '{remote}' not found or unreachable")
        raise failed_run("fetch", out)
    updated = [line.split("->", 1)[1].strip() for line in out.stderr.splitlines() if ".." in line and "->" in line]
    return ok(f"fetched {remote}: {len(updated)} ref(s) updated", {"remote": remote, "updated_refs": updated})


def op_pull(op: dict[str, Any], log: str | None) -> Result:
    repo = resolve_repo(op)
    remote = positional(op, "remote", "pull", default="origin")
    branch = positional(op, "branch", "pull")
    log_write(log, f"pull: repo={repo!r} remote={remote!r} branch={branch!r} rebase={flag(op, 'rebase')}")
    check_remote(repo, remote)
    out = git("-C", repo, "pull", "--rebase" if flag(op, "rebase") else "--no-rebase", remote,
              *([branch] if branch else []), config=identity_config(repo))
    if not out.success:
        if _any(out, "no tracking information", "There is no tracking information", "no configured pull-branch"):
            raise kind("no_tracking_branch", "the current branch has no tracking branch; name the branch")
        if _any(out, "CONFLICT", "Automatic merge failed"):
            raise kind("conflict", "the pull conflicts; resolve the conflicts and commit, or reset")
        if _remote_missing(out):
            raise kind("remote_not_found", f"remote '{remote}' not found or unreachable")
        raise failed_run("pull", out)
    if _any(out, "Already up to date"):
        pulled = 0
    else:
        pulled = len([line for line in git("-C", repo, "log", "ORIG_HEAD..HEAD", "--oneline").stdout.splitlines()
                      if line])
    return ok(f"pulled {pulled} commit(s) from {remote}",
              {"remote": remote, "branch": branch or _current_branch(repo), "fast_forward": _any(out, "Fast-forward"),
               "commits_pulled": pulled})


def op_push(op: dict[str, Any], log: str | None) -> Result:
    repo = resolve_repo(op)
    remote = positional(op, "remote", "push", default="origin")
    branch = positional(op, "branch", "push")
    args = ["-C", repo, "push", "--porcelain", *(["--force"] if flag(op, "force") else []),
            *(["-u"] if flag(op, "set_upstream") else []), remote, *([branch] if branch else [])]
    log_write(log, f"push: repo={repo!r} args={args[2:]!r}")
    check_remote(repo, remote, push=True)
    out = git(*args)
    if not out.success:
        if _any(out, "non-fast-forward", "[rejected]"):
            raise kind("non_fast_forward", "the push was rejected (non-fast-forward); pull first")
        if _any(out, "no upstream branch", "has no upstream"):
            raise kind("no_upstream", "the current branch has no upstream; push with set_upstream: true")
        if _remote_missing(out):
            raise kind("remote_not_found", f"remote '{remote}' not found or unreachable")
        raise failed_run("push", out)
    name = branch or _current_branch(repo)
    remote_ref = f"refs/heads/{name}"
    for line in out.stdout.splitlines():
        fields = line.split("\t")
        if len(fields) >= 2 and ":" in fields[1]:
            remote_ref = fields[1].split(":", 1)[1]
            break
    return ok(f"pushed {name} to {remote}", {"remote": remote, "branch": name, "remote_ref": remote_ref})


def op_clone(op: dict[str, Any], log: str | None) -> Result:
    url = positional(op, "url", "clone", required=True)
    dest = positional(op, "dest", "clone", required=True)
    branch = positional(op, "branch", "clone")
    check_allowed(os.path.dirname(os.path.abspath(dest)) or ".")
    if os.path.exists(dest):
        raise kind("dest_exists", f"destination '{dest}' already exists")
    depth = count(op, "depth", 0)
    log_write(log, f"clone: url={url!r} dest={dest!r} branch={branch!r} depth={depth}")
    check_remote(None, url)
    out = git("clone", *(["--branch", branch] if branch else []), *(["--depth", str(depth)] if depth else []),
              "--", url, dest)
    if not out.success:
        raise kind("clone_failed", f"git clone failed: {out.stderr or 'unknown error'}")
    default = git("-C", dest, "symbolic-ref", "--short", "HEAD").stdout.strip()
    return ok(f"cloned {url} into {dest}", {"dest": dest, "default_branch": default})


def op_remote(op: dict[str, Any], log: str | None) -> Result:
    repo = resolve_repo(op)
    sub = _subcommand(op, ("list", "add", "remove"))
    if sub == "list":
        out = git("-C", repo, "remote", "-v")
        if not out.success:
            raise failed_run("remote", out)
        remotes: dict[str, dict[str, str | None]] = {}
        for line in out.stdout.splitlines():
            name, _, rest = line.partition("\t")
            url, _, role = rest.rpartition(" ")
            entry = remotes.setdefault(name, {"name": name, "fetch_url": None, "push_url": None})
            entry["fetch_url" if role == "(fetch)" else "push_url"] = url
        listed = [remotes[name] for name in sorted(remotes)]
        return ok(f"{len(listed)} remote(s)", {"remotes": listed})
    name = positional(op, "name", "remote", required=True)
    if sub == "add":
        url = positional(op, "url", "remote", required=True)
        log_write(log, f"remote add: repo={repo!r} name={name!r} url={url!r}")
        out = git("-C", repo, "remote", "add", name, url)
        if not out.success:
            if _any(out, "already exists"):
                raise kind("already_exists", f"remote '{name}' already exists")
            raise failed_run("remote add", out)
        return ok(f"remote '{name}' added", {"name": name, "url": url})
    out = git("-C", repo, "remote", "remove", name)
    if not out.success:
        if _any(out, "No such remote", "does not exist"):
            raise kind("not_found", f"remote '{name}' not found")
        raise failed_run("remote remove", out)
    return ok(f"remote '{name}' removed", {"name": name})


def op_tag(op: dict[str, Any], log: str | None) -> Result:
    repo = resolve_repo(op)
    sub = _subcommand(op, ("list", "create"))
    if sub == "list":
        out = git("-C", repo, "tag", "-l", "--format=%(refname:short)|%(objectname:short)")
        if not out.success:
            raise failed_run("tag", out)
        tags = [dict(zip(("name", "ref"), line.split("|", 1))) for line in out.stdout.splitlines() if "|" in line]
        return ok(f"{len(tags)} tag(s)", {"tags": tags})
    name = positional(op, "name", "tag", required=True)
    ref = positional(op, "ref", "tag", default="HEAD")
    message = text(op, "message")
    log_write(log, f"tag create: repo={repo!r} name={name!r} ref={ref!r}")
    out = git("-C", repo, "tag", *(["-a", "-m", message] if message else []), name, ref,
              config=identity_config(repo) if message else ())
    if not out.success:
        if _any(out, "already exists"):
            raise kind("already_exists", f"tag '{name}' already exists")
        raise failed_run("tag", out)
    resolved = git("-C", repo, "rev-parse", "--short", name).stdout.strip()  # as tag list shows it
    return ok(f"tag '{name}' created", {"name": name, "ref": resolved})


def op_merge(op: dict[str, Any], log: str | None) -> Result:
    repo = resolve_repo(op)
    branch = positional(op, "branch", "merge", required=True)
    message = text(op, "message")
    before = git("-C", repo, "rev-parse", "HEAD").stdout.strip()
    args = ["-C", repo, "merge", *(["--ff-only"] if flag(op, "ff_only") else []),
            *(["-m", message] if message else ["--no-edit"]), branch]
    log_write(log, f"merge: repo={repo!r} args={args[2:]!r}")
    out = git(*args, config=identity_config(repo))
    if not out.success:
        if _any(out, "CONFLICT", "Automatic merge failed", "fix conflicts"):
            raise kind("conflict", f"merging {branch} conflicts; resolve the conflicts and commit, or abort")
        if _any(out, "Not possible to fast-forward", "cannot fast-forward", "fast-forward is not possible"):
            raise kind("ff_only_failed", f"{branch} cannot be fast-forwarded")
        raise failed_run("merge", out)
    fast_forward = _any(out, "Fast-forward")
    after = git("-C", repo, "rev-parse", "HEAD").stdout.strip()
    merged = None if fast_forward or after == before else after
    return ok(f"merged {branch}", {"merged_commit": merged, "fast_forward": fast_forward})


def _worktree_add(repo: str, op: dict[str, Any], log: str | None) -> Result:
    path = positional(op, "path", "worktree", required=True)
    branch = positional(op, "branch", "worktree", required=True)
    check_allowed(os.path.dirname(os.path.abspath(path)) or ".")
    log_write(log, f"worktree add: repo={repo!r} path={path!r} branch={branch!r}")
    out = git("-C", repo, "worktree", "add", path, branch)
    if not out.success:
        if _any(out, "already checked out", "already used by worktree"):
            raise kind("branch_conflict", f"branch '{branch}' is already checked out in another worktree")
        if _any(out, "already exists"):
            raise kind("already_exists", f"'{path}' already exists")
        raise failed_run("worktree add", out)
    return ok(f"worktree added: {path}", {"path": path, "branch": branch})


def op_worktree(op: dict[str, Any], log: str | None) -> Result:
    repo = resolve_repo(op)
    sub = _subcommand(op, ("add", "list", "remove"))
    if sub == "add":
        return _worktree_add(repo, op, log)
    if sub == "list":
        out = git("-C", repo, "worktree", "list", "--porcelain")
        if not out.success:
            raise failed_run("worktree list", out)
        trees: list[dict[str, Any]] = []
        for line in out.stdout.splitlines():
            word, _, value = line.partition(" ")
            if word == "worktree":
                trees.append({"path": value, "branch": None, "head": None, "bare": False})
            elif trees and word == "HEAD":
                trees[-1]["head"] = value
            elif trees and word == "branch":
                trees[-1]["branch"] = value.removeprefix("refs/heads/")
            elif trees and word == "bare":
                trees[-1]["bare"] = True
        return ok(f"{len(trees)} worktree(s)", {"worktrees": trees})
    path = positional(op, "path", "worktree", required=True)
    out = git("-C", repo, "worktree", "remove", *(["--force"] if flag(op, "force") else []), path)
    if not out.success:
        if _any(out, "is not a worktree", "not a working tree"):
            raise kind("not_found", f"'{path}' is not a worktree")
        if _any(out, "contains modified or untracked files", "unclean"):
            raise kind("dirty", f"worktree '{path}' has changes; remove it with force: true")
        raise failed_run("worktree remove", out)
    return ok(f"worktree removed: {path}", {"path": path})


def op_create_worktree(op: dict[str, Any], log: str | None) -> Result:
    return _worktree_add(resolve_repo(op), op, log)
