"""The seccomp filter of shell children: compiled in the daemon by libseccomp, installed by the
helper as raw BPF just before `execve`.

Why split: libseccomp does the hard part (rule to BPF compilation per architecture, syscall
numbers, argument comparisons). Its bindings are `pyseccomp` (PyPI: ctypes over the system's
`libseccomp.so.2`, API-compatible with libseccomp's own Python bindings, any CPython), used
here in the daemon only. The helper runs `python -I -S` (no site-packages) and must start fast,
so it gets the compiled program as hex in its spec and installs it with one `seccomp(2)` call
(`seccomp_load.py`, standard library only). A filter is a pure function of (unix_sockets, operator
extras), compiled once per process.

Refusals: default `EPERM`; `socket()` of a refused family `EACCES`; `clone3` `ENOSYS`.
`SECCOMP_FILTER_FLAG_LOG` makes every refusal audit-logged where the kernel logs seccomp actions.
"""

from __future__ import annotations

import errno
import functools
import os
import platform
import tempfile
from collections.abc import Iterable

from murmurd.containment import seccomp_profile as profile

EXTRA_VARIABLE = "MURMURD_SECCOMP_ALLOW"


class SeccompUnavailable(Exception):
    """libseccomp (or its bindings) cannot compile a filter here."""


def extras_from(env: dict[str, str] | os._Environ[str]) -> tuple[str, ...]:
    """The operator's extra syscall names (`MURMURD_SECCOMP_ALLOW`); ValueError for unknown ones."""
    names = tuple(sorted({n.strip() for n in env.get(EXTRA_VARIABLE, "").split(",") if n.strip()}))
    if names:
        try:
            seccomp = _bindings()
        except SeccompUnavailable:
            return names  # nothing to check against; the plan reports seccomp missing anyway
        for name in names:
            try:
                number = int(seccomp.resolve_syscall(seccomp.Arch.NATIVE, name))
            except (ValueError, OSError):
                number = -1
            if number < 0:  # libseccomp answers __NR_SCMP_ERROR for a name it does not know
                raise ValueError(f"{EXTRA_VARIABLE}: {name!r} is not a syscall libseccomp knows")
    return names


def _bindings():  # noqa: ANN202 - the module
    try:
        import pyseccomp
    except (ImportError, OSError, RuntimeError) as exc:  # RuntimeError: no libseccomp.so found
        raise SeccompUnavailable(f"libseccomp's Python bindings (pyseccomp) cannot load: {exc}") from None
    return pyseccomp


@functools.lru_cache(maxsize=8)
def compile_filter(unix_sockets: bool, extras: tuple[str, ...] = ()) -> tuple[bytes, int]:
    """(the BPF program, the number of `seccomp(2)` on this architecture)."""
    seccomp = _bindings()
    try:
        rules = seccomp.SyscallFilter(seccomp.ERRNO(errno.EPERM))
        names: Iterable[str] = (*profile.ALLOWED, *profile.ARCH_SPECIFIC.get(platform.machine(), ()), *extras)
        for name in names:
            try:
                rules.add_rule(seccomp.ALLOW, name)
            except (ValueError, OSError):
                continue  # a name this architecture does not have (the list spans 32/64-bit)
        for value in profile.PERSONALITIES:
            rules.add_rule(seccomp.ALLOW, "personality", seccomp.Arg(0, seccomp.EQ, value))
        rules.add_rule(seccomp.ALLOW, "clone",
                       seccomp.Arg(0, seccomp.MASKED_EQ, profile.CLONE_NAMESPACE_FLAGS, 0))
        rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
        families = [profile.AF_INET, profile.AF_INET6] + ([profile.AF_UNIX] if unix_sockets else [])
        for family in families:
            rules.add_rule(seccomp.ALLOW, "socket", seccomp.Arg(0, seccomp.EQ, family))
        for family in range(0, 64):
            if family not in families:
                rules.add_rule(seccomp.ERRNO(errno.EACCES), "socket", seccomp.Arg(0, seccomp.EQ, family))
        rules.add_rule(seccomp.ERRNO(errno.EACCES), "socket", seccomp.Arg(0, seccomp.GE, 64))
        with tempfile.TemporaryFile() as sink:
            rules.export_bpf(sink)
            sink.seek(0)
            program = sink.read()
        number = seccomp.resolve_syscall(seccomp.Arch.NATIVE, "seccomp")
    except OSError as exc:
        raise SeccompUnavailable(f"libseccomp could not compile the filter: {exc}") from None
    return program, int(number)


def spec(unix_sockets: bool, extras: tuple[str, ...] = ()) -> dict:
    """What the helper needs to install the filter (JSON-safe)."""
    program, number = compile_filter(unix_sockets, extras)
    return {"bpf": program.hex(), "syscall": number}


def syscall_number(name: str) -> int:
    """This architecture's number for syscall `name` (libseccomp's table)."""
    seccomp = _bindings()
    return int(seccomp.resolve_syscall(seccomp.Arch.NATIVE, name))
