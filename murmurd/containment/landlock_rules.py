"""The Full tier's Landlock ruleset (`scoped`), built in the helper just before `execve`.

Every filesystem right the kernel's ABI knows is handled, so whatever no rule grants is denied:

- the workdir (and HOME when it lies outside): read, write, create, remove, rename, truncate;
  never `MAKE_CHAR`/`MAKE_BLOCK`/`MAKE_SOCK`/`MAKE_FIFO`, and no `EXECUTE` unless
  `filesystem.workdir_exec: true`;
- `read_exec`: each allowlisted binary's real path, its ELF interpreter and its shared-library
  closure (`closure.py`), `READ_FILE | EXECUTE` on exactly those files;
- `runtime`: the `capabilities.shell.interpreter_runtime` directories, `EXECUTE | READ_FILE`, plus
  `READ_DIR` where `list_dir` is true;
- `read_only` (sealed only): the composed root's system trees and `/etc`, `READ_FILE | READ_DIR`,
  and `list_only` (sealed only: `/`, everything in it curated) `READ_DIR`;
- the fixed device set: `/dev/null` read-write, `/dev/zero` and `/dev/urandom` read-only;
  every other device (and its ioctls, ABI 5+) refused;
- signals and abstract unix sockets scoped to the command's own tree (ABI 6+).

Landlock mediates open, read, write and execute, not `stat` or `readlink` (upstream's note too).
Standard library only (the helper runs `python -I -S`).
"""

from __future__ import annotations

import os

try:
    from murmurd.containment import landlock
except ImportError:  # run by path with -I -S, as murmurd does: the sibling module
    import landlock  # type: ignore[no-redef]

_NOT_IN_WORKDIR = landlock.MAKE_CHAR | landlock.MAKE_BLOCK | landlock.MAKE_SOCK | landlock.MAKE_FIFO
_DEVICES = (("/dev/null", landlock.READ_FILE | landlock.WRITE_FILE | landlock.TRUNCATE),
            ("/dev/zero", landlock.READ_FILE), ("/dev/urandom", landlock.READ_FILE))


def handled_rights(abi: int) -> int:
    """Every filesystem right this ABI knows."""
    rights = (landlock.EXECUTE | landlock.WRITE_FILE | landlock.READ_FILE | landlock.READ_DIR | landlock.REMOVE_DIR
              | landlock.REMOVE_FILE | landlock.MAKE_CHAR | landlock.MAKE_DIR | landlock.MAKE_REG | landlock.MAKE_SOCK
              | landlock.MAKE_FIFO | landlock.MAKE_BLOCK | landlock.MAKE_SYM)
    if abi >= 2:
        rights |= landlock.REFER
    if abi >= 3:
        rights |= landlock.TRUNCATE
    if abi >= 5:
        rights |= landlock.IOCTL_DEV
    return rights


def restrict(spec: dict) -> None:
    """Build and enforce the ruleset `spec` describes (`no_new_privs` must already be set).
    OSError naming the path whose rule failed."""
    abi = int(spec["abi"])
    handled = handled_rights(abi)
    scoped = landlock.SCOPE_ABSTRACT_UNIX_SOCKET | landlock.SCOPE_SIGNAL if abi >= 6 else 0
    ruleset = landlock.create_ruleset(abi, handled, 0, scoped)
    try:
        in_workdir = handled & ~_NOT_IN_WORKDIR & ~landlock.IOCTL_DEV
        if not spec.get("workdir_exec"):
            in_workdir &= ~landlock.EXECUTE
        for writable in [spec["workdir"], *spec.get("also_writable", [])]:
            landlock.allow_beneath(ruleset, os.path.realpath(writable), in_workdir)
        for path in spec.get("read_exec", []):
            _grant_if_present(ruleset, path, landlock.READ_FILE | landlock.EXECUTE)
        for path, list_dir in spec.get("runtime", []):
            rights = landlock.READ_FILE | landlock.EXECUTE | (landlock.READ_DIR if list_dir else 0)
            _grant_if_present(ruleset, path, rights)
        for path in spec.get("read_only", []):
            _grant_if_present(ruleset, path, landlock.READ_FILE | landlock.READ_DIR)
        for path in spec.get("list_only", []):
            _grant_if_present(ruleset, path, landlock.READ_DIR)
        for device, rights in _DEVICES:
            _grant_if_present(ruleset, device, rights & handled)
        landlock.restrict_self(ruleset)
    finally:
        os.close(ruleset)


def _grant_if_present(ruleset: int, path: str, rights: int) -> None:
    """A rule for `path`; a path that does not exist (here) grants nothing."""
    try:
        landlock.allow_beneath(ruleset, path, rights)
    except FileNotFoundError:
        return
    except landlock.LandlockError:
        raise
    except OSError as exc:
        if exc.errno in (2, 20):  # ENOENT, ENOTDIR
            return
        raise
