"""The child's own mount namespace: the workdir re-mounted `noexec` (the Full tier's answer to the
loader trick), and the mount primitives `sealed.py` composes a root with.

Why: Landlock's `EXECUTE` right mediates `execve` only. `/lib64/ld-linux-x86-64.so.2 ./copied`
runs an allowed program (the loader) that `mmap`s a workdir file `PROT_EXEC`; the kernel refuses
that mapping (`EPERM`) when the file's mount is `noexec`. So after the user + network namespace
the helper unshares a mount namespace (private: nothing propagates to or from the host), binds
the workdir (and an outside HOME) onto itself and remounts the bind `noexec,nosuid,nodev`, keeping
the flags the kernel locks on it (a user namespace may add flags, never clear them). Only this
command's tree sees the new mount; murmurd and every other command see the workdir as before.
Standard library only (the helper runs `python -I -S`).
"""

from __future__ import annotations

import ctypes
import os

CLONE_NEWNS = 0x00020000
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_NOATIME = 0x400
MS_NODIRATIME = 0x800
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MS_RELATIME = 1 << 21
MS_STRICTATIME = 1 << 24
MNT_DETACH = 0x2

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p)
_libc.umount2.argtypes = (ctypes.c_char_p, ctypes.c_int)
# statvfs f_flag bits -> the MS_ flags that must be repeated on a remount (the kernel locks them)
_LOCKED = ((os.ST_RDONLY, MS_RDONLY), (os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV),
           (os.ST_NOEXEC, MS_NOEXEC), (os.ST_NOATIME, MS_NOATIME), (os.ST_NODIRATIME, MS_NODIRATIME),
           (os.ST_RELATIME, MS_RELATIME))


def _raise(what: str) -> None:
    err = ctypes.get_errno()
    raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    encode = (lambda s: None if s is None else os.fsencode(s))
    if _libc.mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(data)) != 0:
        _raise(f"mount({source!r} on {target!r})")


def umount(target: str) -> None:
    if _libc.umount2(os.fsencode(target), MNT_DETACH) != 0:
        _raise(f"umount({target!r})")


def locked_flags(path: str) -> int:
    """The MS_ flags `path`'s mount already has (a remount in a user namespace must keep them)."""
    flags = os.statvfs(path).f_flag
    return sum(ms for st, ms in _LOCKED if flags & st)


def bind(source: str, target: str, extra: int, recursive: bool = True) -> None:
    """Bind `source` on `target`, then remount the bind with `extra` flags added."""
    mount(source, target, None, MS_BIND | (MS_REC if recursive else 0))
    mount(None, target, None, MS_BIND | MS_REMOUNT | locked_flags(target) | extra)


def enter() -> None:
    """A private mount namespace (needs the user namespace's CAP_SYS_ADMIN: after `unshare(NEWUSER)`)."""
    if _libc.unshare(ctypes.c_int(CLONE_NEWNS)) != 0:
        _raise("unshare(CLONE_NEWNS)")
    mount(None, "/", None, MS_REC | MS_PRIVATE)


def noexec_workdir(paths: list[str]) -> None:
    """Each path (the workdir first) re-mounted on itself `noexec,nosuid,nodev`; the cwd re-entered
    so it is on the new mount, not the one beneath it."""
    for path in paths:
        real = os.path.realpath(path)
        bind(real, real, MS_NOEXEC | MS_NOSUID | MS_NODEV)
    os.chdir(os.path.realpath(paths[0]))


def probe() -> None:
    """Whether the workdir can be made `noexec` here: a private mount namespace and one bind of
    this module's directory remounted noexec (in the probe's throwaway process). OSError if not."""
    enter()
    here = os.path.dirname(os.path.abspath(__file__))
    bind(here, here, MS_NOEXEC | MS_NOSUID | MS_NODEV)
    if not os.statvfs(here).f_flag & os.ST_NOEXEC:
        raise OSError(0, "the noexec bind did not take")
