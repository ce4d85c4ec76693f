"""The confinement helper: murmurd execs it as each shell child, it confines itself, then it
execs the command. Also `--probe`: report what this kernel allows, as JSON on stdout.

Why a process of its own: murmurd is threaded (uvicorn, worker threads, wasmtime), and after
`fork` in a threaded process only async-signal-safe work is safe; Python code (`preexec_fn`) is
not, and Python 3.11 has no `os.unshare` anyway. So murmurd forks and execs this file at once
(no Python runs in between: `subprocess` does fork+exec in C), and everything below runs in a
fresh, single-threaded interpreter. It is started as
`python -I -S child.py SPEC ENV... ARGV...` with an empty
environment: isolated (no `PYTHON*` variables, no user site, no site-packages), importing only
the standard library and the sibling `landlock.py`. The command's environment (`env_count`
`NAME=VALUE` arguments) is only the command's: the helper's own dynamic loader never sees
`LD_PRELOAD` and the like from a caller.

Order (each step may need the one before it):

1. parent-death signal (SIGKILL) and a check that the parent is still the one that forked it;
2. announce its pid (its own process group, `start_new_session`) and its pids cgroup to the
   shell watchdog;
3. join the command's pids cgroup (and its memory, cpu and io groups: `cgroup_join`), so every
   descendant is counted from its first fork;
4. `unshare(CLONE_NEWUSER | CLONE_NEWNET)`: a user namespace mapping its own uid and gid to
   themselves, and a network namespace with only `lo` (brought up): no route to any other host;
   with an egress grant (`egress`), the route `local default dev lo`, the listeners for the
   allowlisted ports and UDP :53 made and handed to murmurd (`egress_listen.py`);
5. a private mount namespace: the workdir re-mounted `noexec` (`mounts.py`), or for `sealed` the
   composed root pivoted into (`sealed.py`);
6. rlimits (after the user namespace, so RLIMIT_NPROC counts the namespace's tasks only);
7. `no_new_privs`, then Landlock (`landlock_rules.py`): reads and execution only of the allowlisted
   binaries' closures and the runtime grants, writes only beneath the workdir, the fixed devices,
   signals and abstract sockets scoped;
8. the capability bounding set dropped (uid 0 regains nothing at exec), the parent-death
   signal set again (credential changes clear it), SIGPIPE and SIGXFSZ back to their default
   (Python ignores them, and an ignored signal stays ignored across exec);
9. the seccomp filter the daemon compiled (`seccomp_load.py`), then `execve`.

Any failure is written to the error pipe and the helper exits 127 without running the command:
a capsule is never run with less confinement than murmurd planned and reported.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import resource
import signal
import sys

try:
    from murmurd.containment import egress_listen, landlock, landlock_rules, mounts, sealed, seccomp_load
except ImportError:  # run by path with -I -S, as murmurd does: the sibling modules
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import egress_listen  # type: ignore[no-redef]
    import landlock  # type: ignore[no-redef]
    import landlock_rules  # type: ignore[no-redef]
    import mounts  # type: ignore[no-redef]
    import sealed  # type: ignore[no-redef]
    import seccomp_load  # type: ignore[no-redef]

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
EXIT_SETUP_FAILED = 127

_libc = ctypes.CDLL(None, use_errno=True)


class SetupError(Exception):
    """A confinement step failed; the command must not run."""


def _call(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise SetupError(f"{what}: {os.strerror(err)} (errno {err})")


def _prctl(option: int, arg: int, what: str) -> None:
    _call(_libc.prctl(option, ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)), what)


# --------------------------------------------------------------------------- steps


def die_with_parent(parent: int) -> None:
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent:
        os._exit(137)  # murmurd (the forking thread) is already gone


def announce(watchdog_fd: int | None, procs_file: str | None) -> None:
    """Tell the watchdog this group (and the pids cgroup the command will be in, which holds what
    leaves the group with `setsid`) exists before anything in it can fork (one atomic write)."""
    if watchdog_fd is None:
        return
    line = f"+{os.getpid()} {procs_file}\n" if procs_file else f"+{os.getpid()}\n"
    try:
        os.write(watchdog_fd, line.encode())
    except OSError:
        pass  # the watchdog is gone; the parent's `register` restarts it
    os.close(watchdog_fd)


def join_cgroup(procs_file: str | None, what: str = "pids") -> None:
    if procs_file is None:
        return
    try:
        with open(procs_file, "w") as sink:
            sink.write(str(os.getpid()))
    except OSError as exc:
        raise SetupError(f"joining the {what} cgroup {procs_file!r}: {exc.strerror}") from None


def catch_egress(egress: dict) -> None:
    try:
        egress_listen.hand_over(int(egress["channel_fd"]), [int(port) for port in egress["tcp_ports"]])
    except egress_listen.EgressSetupError as exc:
        raise SetupError(str(exc)) from None


def _write(path: str, text: str) -> None:
    with open(path, "w") as sink:
        sink.write(text)


def enter_network_namespace() -> None:
    """A user namespace (own uid/gid mapped to themselves) holding a fresh network namespace in
    which only the loopback interface exists, up."""
    import fcntl  # here: only a namespace needs them, and every import delays every command
    import socket
    import struct

    uid, gid = os.getuid(), os.getgid()
    _call(_libc.unshare(ctypes.c_int(CLONE_NEWUSER | CLONE_NEWNET)), "unshare(CLONE_NEWUSER|CLONE_NEWNET)")
    try:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    except OSError as exc:
        raise SetupError(f"mapping the user namespace: {exc.strerror}") from None
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            request = struct.pack("16sH22x", b"lo", 0)
            flags = struct.unpack("16sH22x", fcntl.ioctl(probe.fileno(), SIOCGIFFLAGS, request))[1]
            fcntl.ioctl(probe.fileno(), SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))
    except OSError as exc:
        raise SetupError(f"bringing up lo in the network namespace: {exc.strerror}") from None


def set_limits(limits: list[list[int]]) -> None:
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        for which, soft, hard in limits:
            resource.setrlimit(which, (soft, hard))
    except (OSError, ValueError) as exc:
        raise SetupError(f"setrlimit: {exc}") from None


def enter_mount_namespace(spec: dict) -> None:
    """A private mount namespace: the composed root of `sealed` (`sealed.py`), else the workdir
    re-mounted `noexec` (`mounts.py`: a loader cannot map a workdir file executable)."""
    try:
        mounts.enter()
        if spec.get("sealed") is not None:
            sealed.compose_and_enter(spec["sealed"])
        else:
            mounts.noexec_workdir(spec["noexec"])
    except OSError as exc:
        raise SetupError(f"mount namespace: {exc}") from None


def restrict_filesystem(spec: dict) -> None:
    """Landlock, the Full tier's ruleset (`landlock_rules.py`): read and execute only the
    allowlisted binaries' closures and the runtime grants, write only beneath the workdir."""
    _prctl(PR_SET_NO_NEW_PRIVS, 1, "prctl(PR_SET_NO_NEW_PRIVS)")
    try:
        landlock_rules.restrict(spec)
    except OSError as exc:
        raise SetupError(f"landlock: {exc.strerror or exc}") from None


def filter_syscalls(spec: dict) -> None:
    """The seccomp allowlist (compiled by the daemon, `seccomp_filter.py`): the last step before exec."""
    _prctl(PR_SET_NO_NEW_PRIVS, 1, "prctl(PR_SET_NO_NEW_PRIVS)")
    try:
        seccomp_load.install(spec)
    except OSError as exc:
        raise SetupError(f"seccomp: {exc.strerror or exc}") from None


def drop_capabilities() -> None:
    """Empty the bounding and ambient sets: uid 0 (in or out of the user namespace) then gains no
    capability at `execve`. Skipped without CAP_SETPCAP (an unprivileged uid has none to drop)."""
    try:
        last = int(open("/proc/sys/kernel/cap_last_cap").read())
    except (OSError, ValueError):
        last = 40
    _libc.prctl(PR_CAP_AMBIENT, ctypes.c_ulong(PR_CAP_AMBIENT_CLEAR_ALL), ctypes.c_ulong(0), ctypes.c_ulong(0),
                ctypes.c_ulong(0))
    for cap in range(last + 1):
        if _libc.prctl(PR_CAPBSET_DROP, ctypes.c_ulong(cap), ctypes.c_ulong(0), ctypes.c_ulong(0),
                       ctypes.c_ulong(0)) != 0:
            if ctypes.get_errno() == errno.EPERM:
                return
            raise SetupError(f"prctl(PR_CAPBSET_DROP, {cap}): {os.strerror(ctypes.get_errno())}")


# --------------------------------------------------------------------------- entry points


def confine_and_exec(spec: dict, env: dict[str, str], argv: list[str]) -> None:
    error_fd = int(spec["error_fd"])
    os.set_inheritable(error_fd, False)  # closed by a successful execve: EOF tells the parent
    try:
        die_with_parent(int(spec["parent"]))
        announce(spec.get("watchdog_fd"), spec.get("cgroup_procs"))
        join_cgroup(spec.get("cgroup_procs"))
        for procs_file in spec.get("cgroup_join", []):
            join_cgroup(procs_file, "resource")
        if spec.get("netns"):
            enter_network_namespace()
            if spec.get("egress"):
                catch_egress(spec["egress"])
        if spec.get("mounts") is not None:
            enter_mount_namespace(spec["mounts"])
        set_limits(spec.get("rlimits", []))
        if spec.get("landlock") is not None:
            restrict_filesystem(spec["landlock"])
        drop_capabilities()
        die_with_parent(int(spec["parent"]))
        for name in ("SIGPIPE", "SIGXFSZ", "SIGXFZ"):  # Python ignores these; an ignored signal stays so across exec
            if hasattr(signal, name):
                signal.signal(getattr(signal, name), signal.SIG_DFL)
        if spec.get("seccomp") is not None:
            filter_syscalls(spec["seccomp"])
        os.execve(spec["executable"], argv, env)
    except SetupError as exc:
        message = str(exc)
    except OSError as exc:
        message = f"execve({spec.get('executable')!r}): {exc.strerror or exc}"
    try:
        os.write(error_fd, message.encode("utf-8", "replace")[:4000])
    finally:
        os._exit(EXIT_SETUP_FAILED)


def probe(extra: dict) -> dict:
    """What this kernel allows a process like murmurd's children: run in a throwaway process.
    `extra` may carry the compiled seccomp filter and the `pivot_root` syscall number."""
    import socket  # noqa: F401 - before a pivot_root hides the standard library

    found: dict = {"uid": os.getuid(), "landlock_abi": landlock.abi_version(), "netns": False}
    if not found["landlock_abi"]:
        found["landlock_error"] = "the kernel has no Landlock (or it is disabled: see /sys/kernel/security/lsm)"
    try:
        enter_network_namespace()
        egress_listen.probe()  # a namespace that cannot catch the allowlisted ports is no use
        found["netns"] = True
    except egress_listen.EgressSetupError as exc:
        found["netns_error"] = f"shell egress: {exc}"
    except SetupError as exc:
        found["netns_error"] = str(exc)
    if found["netns"]:
        found.update(_probe_mounts(extra.get("pivot_root_syscall")))
    if extra.get("seccomp") is not None:
        found.update(_probe_seccomp(extra["seccomp"]))
    return found


def _probe_mounts(pivot_root_syscall: int | None) -> dict:
    try:
        mounts.probe()
    except OSError as exc:
        return {"mountns": False, "mountns_error": f"a noexec bind in a private mount namespace: {exc.strerror or exc}",
                "sealed": False, "sealed_error": "no private mount namespace"}
    if pivot_root_syscall is None:
        return {"mountns": True, "sealed": False, "sealed_error": "the pivot_root syscall number is unknown"}
    try:
        sealed.probe(int(pivot_root_syscall))
    except OSError as exc:
        return {"mountns": True, "sealed": False, "sealed_error": f"a tmpfs root and pivot_root: {exc.strerror or exc}"}
    return {"mountns": True, "sealed": True}


def _probe_seccomp(spec: dict) -> dict:
    """Install the real filter, then check it refuses what it must (AF_NETLINK)."""
    import socket

    try:
        _prctl(PR_SET_NO_NEW_PRIVS, 1, "prctl(PR_SET_NO_NEW_PRIVS)")
        seccomp_load.install(spec)
    except (OSError, SetupError) as exc:
        return {"seccomp": False, "seccomp_error": f"installing the filter: {exc}"}
    try:
        socket.socket(socket.AF_NETLINK, socket.SOCK_RAW).close()
    except OSError as exc:
        if exc.errno == errno.EACCES:
            return {"seccomp": True}
    return {"seccomp": False, "seccomp_error": "the filter was installed but did not refuse AF_NETLINK"}


def main(args: list[str]) -> None:
    if args[:1] == ["--probe"]:
        sys.stdout.write(json.dumps(probe(json.loads(args[1]) if len(args) > 1 else {})) + "\n")
        return
    spec = json.loads(args[0])
    count = int(spec.get("env_count", 0))
    entries, argv = args[1 : 1 + count], args[1 + count :]
    env = dict(entry.split("=", 1) for entry in entries)
    confine_and_exec(spec, env, argv)


if __name__ == "__main__":
    main(sys.argv[1:])
