"""murmur-tool-git's plumbing: running `git -C <repo> ...`, resolving the repository, the
caller-driven argument check, the log, and the result helpers (default-artifacts §5.4)."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from typing import Any

from nativekit.protocol import Result, ToolFailure, passed, result

# Every git call: no automatic gc/maintenance (a child git the containment may not let run),
# no pager, no prompt for credentials, no editor; no system config (/etc/gitconfig: unreadable
# under the shell containment, which git treats as fatal) and no global one (HOME is the capsule's
# own, which the guest writes). Configuration is guest-written too (the repository's .git/config):
# every key that names a command git would run is pinned here on the command line, which wins
# over any file, and `GIT_CONFIG_PARAMETERS` carries the pins to the gits git runs in turn.
PINNED_CONFIG = (
    "gc.auto=0", "maintenance.auto=false", "core.pager=cat", "core.fsmonitor=false", "core.hooksPath=/dev/null",
    "core.sshCommand=ssh", "core.askPass=", "core.editor=true", "sequence.editor=true", "credential.helper=",
    "commit.gpgSign=false", "tag.gpgSign=false", "push.gpgSign=false", "log.showSignature=false",
    "merge.verifySignatures=false", "submodule.recurse=false", "fetch.recurseSubmodules=false",
    "protocol.allow=never", "protocol.file.allow=always", "protocol.https.allow=always",
    "protocol.http.allow=always", "protocol.ssh.allow=always", "protocol.git.allow=always",
    "protocol.ext.allow=never", "protocol.fd.allow=never",
)
GIT_PREFIX = ("git", *(item for pair in PINNED_CONFIG for item in ("-c", pair)))
GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0",
           "GIT_EDITOR": "true", "GIT_SEQUENCE_EDITOR": "true", "GIT_PAGER": "cat", "GIT_OPTIONAL_LOCKS": "0"}
# What of the daemon's own environment git may see: the identity variables, nothing else GIT_*
# (GIT_SSH_COMMAND, GIT_EXTERNAL_DIFF, GIT_DIR, GIT_CONFIG_* ... would steer what git runs or reads).
KEPT_GIT_ENV = ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL")
# Keys no pin can cover (named by a driver or a URL the file chooses): a repository whose
# configuration holds one is refused before git runs in it.
COMMAND_KEYS = re.compile(
    r"^(filter\..*|diff\.external|diff\..*\.(command|textconv)|merge\..*\.driver"
    r"|remote\..*\.(uploadpack|receivepack|vcs|proxy)|url\..*\.(insteadof|pushinsteadof)|protocol\..*"
    r"|core\.(gitproxy|alternaterefscommand)|gpg\..*|credential\..*|pager\..*|interactive\..*"
    r"|submodule\..*\.update|uploadpack\..*|receive\..*|http\..*\.(proxy|sslkey|sslcert)|http\.(proxy|sslkey|sslcert))$")
DENIED_FLAGS = ("--interactive", "-i", "--patch", "-p", "--edit", "-e")


@dataclass(frozen=True)
class GitOut:
    success: bool
    stdout: str
    stderr: str

    @property
    def combined(self) -> str:
        return f"{self.stdout}\n{self.stderr}"


def git_env() -> dict[str, str]:
    kept = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k in KEPT_GIT_ENV}
    return {**kept, **GIT_ENV}


_CHECKED: set[str] = set()


def _refused_keys(*source: str) -> list[str]:
    """The command keys a configuration lists: the repository's (`-C <repo>`: its local and
    worktree files, includes followed) or one file's (`--file <path>`)."""
    where, file = (source[1], None) if source[0] == "-C" else (None, source[1])
    argv = [*GIT_PREFIX, *(("-C", where) if where else ()), "config", *(("--file", file) if file else ()),
            "--includes", "--list", "--name-only"]
    try:
        proc = subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL, env=git_env())
    except (FileNotFoundError, PermissionError) as exc:
        raise ToolFailure(f"git could not be run: {exc}", "error") from None
    names = proc.stdout.decode("utf-8", "replace").splitlines()
    pinned = {pin.split("=", 1)[0].lower() for pin in PINNED_CONFIG}
    return sorted({name for name in names if COMMAND_KEYS.match(name.lower())} - pinned)


_SKIPPED_GIT_DIRS = {"objects", "refs", "logs", "hooks", "info", "lfs"}


def _pointed_dir(file: str, prefix: str) -> str | None:
    """The directory a `.git` file (`gitdir: X`) or a git dir's `commondir` names (X relative to
    the file's directory), when it is one."""
    try:
        with open(file, encoding="utf-8", errors="replace") as handle:
            first = handle.read(4096).splitlines()[:1]
    except OSError:
        return None
    value = first[0][len(prefix):].strip() if first and first[0].startswith(prefix) else ""
    path = os.path.join(os.path.dirname(file), value) if value else ""
    return os.path.realpath(path) if path and os.path.isdir(path) else None


def _nested_configs(where: str) -> list[str]:
    """The configuration files of the repositories git may run in on the way (a status runs a
    status in each submodule, which would clean files through the submodule's own filters): every
    `config`/`config.worktree` beneath the git dir (`modules/`, `worktrees/`), beneath each `.git`
    directory nested in the work tree and beneath each git dir a nested `.git` file or a
    `commondir` names. Links are never followed."""
    probe = subprocess.run([*GIT_PREFIX, "-C", where, "rev-parse", "--path-format=absolute", "--git-common-dir",
                            "--show-toplevel"], capture_output=True, stdin=subprocess.DEVNULL, env=git_env())
    lines = probe.stdout.decode("utf-8", "replace").splitlines() if probe.returncode == 0 else []
    if not lines:
        return []
    own = os.path.join(os.path.realpath(lines[0]), "config")  # read by `-C <repo>` already
    git_dirs, walked, found = [os.path.realpath(lines[0])], set(), set()
    if len(lines) > 1:  # the work tree: its nested `.git` dirs and files
        for top, dirs, files in os.walk(lines[1]):
            if top == lines[1]:
                dirs[:] = [d for d in dirs if d != ".git"]
            git_dirs += [os.path.join(top, d) for d in dirs if d == ".git"]
            dirs[:] = [d for d in dirs if d != ".git"]
            if ".git" in files and (pointed := _pointed_dir(os.path.join(top, ".git"), "gitdir:")):
                git_dirs.append(pointed)
    while git_dirs:
        git_dir = os.path.realpath(git_dirs.pop())
        if git_dir in walked:
            continue
        walked.add(git_dir)
        for top, dirs, files in os.walk(git_dir):
            dirs[:] = [d for d in dirs if d not in _SKIPPED_GIT_DIRS]
            found.update(path for f in files if f in ("config", "config.worktree")
                         and (path := os.path.join(top, f)) != own)
            if "commondir" in files and (common := _pointed_dir(os.path.join(top, "commondir"), "")):
                git_dirs.append(common)
    return sorted(found)


def check_config(where: str) -> None:
    """Refuse a repository (or the cwd's) whose configuration, or a submodule's or a nested
    repository's, names a command no pin covers."""
    if where in _CHECKED:
        return
    refused = _refused_keys("-C", where)
    for path in _nested_configs(where):
        if os.path.isfile(path) and not os.path.islink(path):
            refused += _refused_keys("--file", path)
    if refused:
        raise ToolFailure(f"repository {where!r} refused: its git configuration names commands git would run "
                          f"({', '.join(sorted(set(refused))[:5])}); murmur-tool-git never runs them", "error",
                          "unsafe_config")
    _CHECKED.add(where)


def _local_path(url: str, base: str) -> str | None:
    """The directory a URL names on this machine (a path or `file://`), else None (a network URL,
    or scp-like `host:path`)."""
    if url.startswith("file://"):
        url = url[len("file://"):]
    elif "://" in url or ("/" not in url.split(":", 1)[0] and ":" in url):
        return None
    path = os.path.join(base, url)
    return path if os.path.isdir(path) else None


def check_remote(repo: str | None, remote: str, *, push: bool = False) -> None:
    """A fetch, pull, push or clone runs git in the repository at the other end too when that is
    a local path (upload-pack, or receive-pack whose `updateInstead` checks files out through
    that repository's filters): its configuration is checked as the caller's is."""
    base = repo or "."
    urls = [remote]
    if repo is not None:
        named = git("-C", repo, "remote", "get-url", "--all", *(["--push"] if push else []), remote)
        if named.success:
            urls = [u for u in named.stdout.splitlines() if u]
    for url in urls:
        local = _local_path(url, base)
        if local is not None:
            check_config(local)


def git(*args: str, config: tuple[str, ...] = ()) -> GitOut:
    """One git run, output captured with trailing newlines trimmed; the repository it runs in
    (`-C <repo>`, else the cwd) is checked first (`check_config`)."""
    check_config(args[1] if len(args) > 1 and args[0] == "-C" else ".")
    argv = [*GIT_PREFIX, *(item for pair in config for item in ("-c", pair)), *args]
    try:
        proc = subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL, env=git_env())
    except FileNotFoundError:
        raise ToolFailure("git not found in PATH", "error") from None
    except PermissionError as exc:
        raise ToolFailure(f"git could not be run: {exc}", "error") from None
    decode = lambda raw: raw.decode("utf-8", "replace").rstrip("\n")  # noqa: E731
    return GitOut(proc.returncode == 0, decode(proc.stdout), decode(proc.stderr))


def failed_run(what: str, out: GitOut) -> ToolFailure:
    """upstream's plain form: `git X failed: <stderr>`, status error, no error_kind."""
    return ToolFailure(f"git {what} failed: {out.stderr or 'unknown error'}", "error")


def kind(error_kind: str, message: str) -> ToolFailure:
    return ToolFailure(message, "error", error_kind)


def ok(message: str, data: dict[str, Any] | None = None) -> Result:
    return passed(message, data)


def error(message: str) -> Result:
    return result("error", message)


def log_write(log_path: str | None, message: str) -> None:
    """Plain-text trace lines appended to the call's log (a failure to write is ignored)."""
    if not log_path:
        return
    try:
        with open(log_path, "a", encoding="utf-8") as handle:
            handle.write(message if message.endswith("\n") else message + "\n")
    except OSError:
        pass


# -- inputs --------------------------------------------------------------------------------------


def text(op: dict[str, Any], key: str) -> str | None:
    value = op.get(key)
    return value if isinstance(value, str) else None


def flag(op: dict[str, Any], key: str) -> bool:
    return op.get(key) is True


def count(op: dict[str, Any], key: str, default: int) -> int:
    value = op.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default


def positional(op: dict[str, Any], key: str, operation: str, *, required: bool = False,
               default: str | None = None) -> str | None:
    """A caller's value that lands in git's argv as a positional (a ref, a branch, a name, a
    url...). One that starts with `-` would be read as a flag, outside the operation's
    `allowed_flags` (and `--patch`/`--interactive`/`--edit` are `denied_flags`): refused."""
    value = text(op, key)
    if value is None or value == "":
        if required:
            raise ToolFailure(f"missing required field: {key}", "error")
        return default
    if value.startswith("-"):
        denied = " (a denied flag)" if value.split("=", 1)[0] in DENIED_FLAGS else ""
        raise ToolFailure(f"{key} {value!r} starts with '-'{denied}: {operation} takes no flags through "
                          f"its fields beyond its allowed_flags", "error")
    return value


def paths(op: dict[str, Any]) -> list[str]:
    value = op.get("paths")
    if not isinstance(value, list):
        raise ToolFailure("missing required field: paths (must be an array of strings)", "error")
    found = [p for p in value if isinstance(p, str)]
    if not found:
        raise ToolFailure("paths must not be empty", "error")
    return found


# -- the repository --------------------------------------------------------------------------------


def _within(path: str, prefix: str) -> bool:
    """A path-component prefix test (upstream's is a string prefix: `/a/b` allowed `/a/bc`)."""
    return path == prefix or path.startswith(prefix.rstrip("/") + "/")


def check_allowed(repo: str) -> None:
    """`MURMUR_FILESYSTEM_ALLOW` (colon-separated prefixes), when set, bounds the repository."""
    allowed = [p for p in os.environ.get("MURMUR_FILESYSTEM_ALLOW", "").split(":") if p]
    if not allowed:
        return
    canonical = os.path.realpath(repo)
    if not any(_within(canonical, os.path.realpath(prefix)) for prefix in allowed):
        raise ToolFailure(f"repo path '{repo}' is not within any allowed filesystem path. "
                          "Add the path to capabilities.filesystem.allow in the manifest.", "error")


def resolve_repo(op: dict[str, Any], *, alias: str | None = None) -> str:
    """An explicit `repo` (or its alias), else `git rev-parse --show-toplevel`, else `.`."""
    explicit = text(op, "repo") or (text(op, alias) if alias else None)
    if explicit:
        repo = explicit
    else:
        found = git("rev-parse", "--show-toplevel")
        repo = found.stdout.strip() if found.success and found.stdout.strip() else "."
    check_allowed(repo)
    return repo


def head(repo: str) -> tuple[str, str, str]:
    """(hash, short hash, subject) of HEAD."""
    full = git("-C", repo, "rev-parse", "HEAD").stdout.strip()
    short = git("-C", repo, "rev-parse", "--short", "HEAD").stdout.strip()
    subject = git("-C", repo, "log", "-1", "--format=%s", "HEAD").stdout.strip()
    return full, short, subject


def identity_config(repo: str) -> tuple[str, ...]:
    """A commit needs an author: a repository (or HOME) with none configured, and no `GIT_*`
    identity in the environment, commits as the capsule (`MURMUR_CAPSULE_NAME`)."""
    if os.environ.get("GIT_AUTHOR_EMAIL") or os.environ.get("EMAIL"):
        return ()
    if git("-C", repo, "config", "user.email").stdout.strip():
        return ()
    name = os.environ.get("MURMUR_CAPSULE_NAME") or "murmur"
    return (f"user.name={name}", f"user.email={name}@murmurd.invalid")
