"""The `sealed` tier: a composed root filesystem for a shell child, built in the helper inside its
own user + mount namespace, then `pivot_root`ed into. What is not bound in is absent, not merely
denied: no `/etc/shadow`, no `/home`, no `/dev/sda`, no daemon state directory.

The root is a tmpfs mounted over the workdir's own path (the one directory certain to exist and
private to the command; every source is opened `O_PATH` first and bound from
`/proc/self/fd/N`, so covering it hides nothing that is still needed). It holds, after
upstream's layout:

- read-only binds of `/usr /bin /sbin /lib /lib32 /lib64 /libx32` (a host symlink such as
  `/bin -> usr/bin` is recreated as the same symlink);
- `/etc` with 16 host entries bound read-only where present (loader cache and config,
  alternatives, TLS stores, resolver files, time zone, terminfo, services and protocols) and a
  synthetic `passwd`/`group` naming `root` and `capsule`;
- a private `/dev` of the fixed set (`null zero full tty random urandom` bound from the host, plus
  `fd stdin stdout stderr ptmx` links);
- the host `/proc`, bound (a fresh one needs a pid namespace; Landlock grants no reads in it, so
  it serves `readlink`/`stat` only, as upstream documents);
- the workdir at its own path, `/tmp` = `<HOME>/tmp` (unless the workdir itself lies beneath
  `/tmp`), both `noexec` unless `workdir_exec`;
- every allowlisted binary's closure file and `interpreter_runtime` directory that lies outside
  those trees, bound read-only at its host path.

The root tmpfs is then remounted read-only. Landlock and seccomp are applied after this, inside.
Standard library only (the helper runs `python -I -S`).
"""

from __future__ import annotations

import ctypes
import os

try:
    from murmurd.containment import mounts
except ImportError:  # run by path with -I -S, as murmurd does: the sibling module
    import mounts  # type: ignore[no-redef]

SYSTEM_TREES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_ENTRIES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "ssl", "ca-certificates",
               "resolv.conf", "hosts", "nsswitch.conf", "host.conf", "gai.conf", "localtime", "timezone",
               "terminfo", "services", "protocols")
DEVICES = ("null", "zero", "full", "tty", "random", "urandom")
DEV_LINKS = (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
             ("stderr", "/proc/self/fd/2"), ("ptmx", "pts/ptmx"))
_OLD_ROOT = ".murmurd-old-root"
_RO = mounts.MS_RDONLY | mounts.MS_NOSUID | mounts.MS_NODEV


def passwd_text(uid: int, gid: int, home: str) -> tuple[str, str]:
    """The synthetic `/etc/passwd` and `/etc/group` (root and capsule)."""
    cuid, cgid = (uid, gid) if uid != 0 else (1000, 1000)
    passwd = f"root:x:0:0:root:/root:/bin/sh\ncapsule:x:{cuid}:{cgid}:capsule:{home}:/bin/sh\n"
    group = f"root:x:0:\ncapsule:x:{cgid}:\n"
    return passwd, group


def _under(path: str, trees: tuple[str, ...]) -> bool:
    return any(path == tree or path.startswith(tree + "/") for tree in trees)


class _Builder:
    def __init__(self, root: str) -> None:
        self.root = root
        self.sources: dict[str, int] = {}

    def keep(self, path: str) -> None:
        """Open a source before the root covers anything."""
        if path not in self.sources:
            try:
                self.sources[path] = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                pass  # absent on this host: absent in the root too

    def inside(self, path: str) -> str:
        return self.root + path

    def _target(self, path: str, directory: bool) -> str:
        target = self.inside(path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if directory:
            os.makedirs(target, exist_ok=True)
        elif not os.path.lexists(target):
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644))
        return target

    def bind(self, path: str, extra: int, at: str | None = None, recursive: bool = True) -> None:
        """Bind a kept source. Never recursive for the workdir and what lies in it: the root's
        own tmpfs is mounted on the workdir's path and a recursive bind would bring it along."""
        fd = self.sources.get(path)
        if fd is None:
            return
        directory = os.path.isdir(f"/proc/self/fd/{fd}")
        target = self._target(at or path, directory)
        mounts.bind(f"/proc/self/fd/{fd}", target, extra, recursive=directory and recursive)

    def close(self) -> None:
        for fd in self.sources.values():
            os.close(fd)


def compose_and_enter(spec: dict) -> None:
    """Build the root `spec` describes and pivot into it (the mount namespace is already entered)."""
    workdir = os.path.realpath(spec["workdir"])
    tmp = os.path.realpath(spec["tmp"])
    noexec = 0 if spec.get("workdir_exec") else mounts.MS_NOEXEC
    extra = [os.path.realpath(p) for p in spec.get("extra_paths", [])]
    extra = [p for p in extra if not _under(p, SYSTEM_TREES)]
    links = {tree: os.readlink(tree) for tree in SYSTEM_TREES if os.path.islink(tree)}
    build = _Builder(workdir)
    for tree in SYSTEM_TREES:
        if tree not in links:
            build.keep(tree)
    for entry in ETC_ENTRIES:
        build.keep(os.path.realpath("/etc/" + entry))
    for device in DEVICES:
        build.keep("/dev/" + device)
    writable = [os.path.realpath(p) for p in spec.get("also_writable", [])]
    for path in (*extra, *writable, workdir, tmp, "/proc"):
        build.keep(path)
    try:
        mounts.mount("tmpfs", workdir, "tmpfs", mounts.MS_NOSUID | mounts.MS_NODEV, "mode=0755,size=8m")
        for tree in SYSTEM_TREES:
            if tree in links:
                os.symlink(links[tree], build.inside(tree))
            else:
                build.bind(tree, _RO)
        os.makedirs(build.inside("/etc"), exist_ok=True)
        for entry in ETC_ENTRIES:
            build.bind(os.path.realpath("/etc/" + entry), _RO, at="/etc/" + entry)
        passwd, group = passwd_text(os.getuid(), os.getgid(), spec.get("home", workdir))
        for name, text in (("passwd", passwd), ("group", group)):
            with open(build.inside("/etc/" + name), "w") as sink:
                sink.write(text)
        os.makedirs(build.inside("/dev"), exist_ok=True)
        for device in DEVICES:
            build.bind("/dev/" + device, mounts.MS_NOSUID | mounts.MS_NOEXEC)
        for name, target in DEV_LINKS:
            os.symlink(target, build.inside("/dev/" + name))
        build.bind("/proc", mounts.MS_NOSUID | mounts.MS_NODEV | mounts.MS_NOEXEC)
        for path in extra:
            build.bind(path, _RO)
        for path in (workdir, *writable):
            build.bind(path, noexec | mounts.MS_NOSUID | mounts.MS_NODEV, recursive=False)
        if not _under(workdir, ("/tmp",)):  # else /tmp holds the workdir's path (TMPDIR is HOME/tmp anyway)
            build.bind(tmp, noexec | mounts.MS_NOSUID | mounts.MS_NODEV, at="/tmp", recursive=False)
        _pivot(workdir, int(spec["pivot_root_syscall"]))
    finally:
        build.close()
    mounts.mount(None, "/", None, mounts.MS_BIND | mounts.MS_REMOUNT | mounts.locked_flags("/") | mounts.MS_RDONLY)
    os.chdir(workdir)


def _pivot(root: str, number: int) -> None:
    os.chdir(root)
    os.mkdir(_OLD_ROOT)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(ctypes.c_long(number), b".", _OLD_ROOT.encode()) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"pivot_root: {os.strerror(err)}")
    os.chdir("/")
    mounts.umount("/" + _OLD_ROOT)
    os.rmdir("/" + _OLD_ROOT)


def probe(pivot_root_syscall: int) -> None:
    """Whether a composed root can be built here: a tmpfs (over this module's own directory, in
    the already-entered private mount namespace) pivoted into. OSError when not."""
    root = os.path.dirname(os.path.abspath(__file__))
    mounts.mount("tmpfs", root, "tmpfs", mounts.MS_NOSUID | mounts.MS_NODEV, "mode=0755,size=64k")
    _pivot(root, pivot_root_syscall)
