"""The three Landlock system calls, through ctypes.

Why not a library: the one on PyPI (`landlock`) has only `1.0.0.devN` pre-releases, covers
filesystem rules only (no network rights, no ABI 6 scopes), and would have to be importable by
`child.py`, which runs with `python -I -S` (no site-packages) so that nothing from the capsule's
environment or the daemon's venv runs between fork and the command. Three syscalls and two
packed structs are less code than that integration.

Reference: Documentation/userspace-api/landlock.rst and include/uapi/linux/landlock.h. The
syscall numbers are the same on every architecture (the unified table, since Linux 5.13).
"""

from __future__ import annotations

import ctypes
import os
import struct

SYS_CREATE_RULESET = 444
SYS_ADD_RULE = 445
SYS_RESTRICT_SELF = 446
CREATE_RULESET_VERSION = 1 << 0
RULE_PATH_BENEATH = 1

# LANDLOCK_ACCESS_FS_* (ABI in which each appeared)
EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5
# LANDLOCK_SCOPE_* (ABI 6)
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
SCOPE_SIGNAL = 1 << 1

# Rights that may be granted on a file (not a directory) in a path-beneath rule.
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV

_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long


class LandlockError(OSError):
    """A Landlock call failed (errno and a message naming the call)."""


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise LandlockError(err, f"{what}: {os.strerror(err)}")
    return result


def abi_version() -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is absent or disabled."""
    result = _syscall(ctypes.c_long(SYS_CREATE_RULESET), None, ctypes.c_size_t(0),
                      ctypes.c_uint32(CREATE_RULESET_VERSION))
    return int(result) if result > 0 else 0


def create_ruleset(abi: int, handled_fs: int, handled_net: int = 0, scoped: int = 0) -> int:
    """A ruleset fd handling these rights; the struct is sized for `abi` (an older kernel
    refuses fields it does not know)."""
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    attr = struct.pack("<QQQ", handled_fs, handled_net, scoped)[:size]
    buf = ctypes.create_string_buffer(attr, size)
    return _check(_syscall(ctypes.c_long(SYS_CREATE_RULESET), buf, ctypes.c_size_t(size), ctypes.c_uint32(0)),
                  "landlock_create_ruleset")


def allow_beneath(ruleset_fd: int, path: str, access: int) -> None:
    """Grant `access` on `path` and everything beneath it (path opened O_PATH, symlinks followed
    only for `path` itself: callers pass real paths)."""
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        if not os.path.isdir(f"/proc/self/fd/{fd}"):
            access &= FILE_RIGHTS
        if not access:
            return
        attr = ctypes.create_string_buffer(struct.pack("<Qi", access, fd), 12)
        _check(_syscall(ctypes.c_long(SYS_ADD_RULE), ctypes.c_int(ruleset_fd), ctypes.c_int(RULE_PATH_BENEATH),
                        attr, ctypes.c_uint32(0)), f"landlock_add_rule({path!r})")
    finally:
        os.close(fd)


def restrict_self(ruleset_fd: int) -> None:
    """Enforce the ruleset on this thread (and everything it execs or forks). Needs
    `no_new_privs` (or CAP_SYS_ADMIN) first."""
    _check(_syscall(ctypes.c_long(SYS_RESTRICT_SELF), ctypes.c_int(ruleset_fd), ctypes.c_uint32(0)),
           "landlock_restrict_self")
