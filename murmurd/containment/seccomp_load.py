"""Install a compiled seccomp program (from `seccomp_filter`) in the helper: one `seccomp(2)`
call through ctypes, standard library only, so `python -I -S child.py` stays cheap to start."""

from __future__ import annotations

import ctypes
import errno
import os
import struct

SECCOMP_SET_MODE_FILTER = 1
SECCOMP_FILTER_FLAG_LOG = 2  # refusals are audit-logged where the kernel logs seccomp actions


def install(seccomp_spec: dict) -> None:
    """Load the filter on this thread (inherited by everything it execs or forks). Needs
    `no_new_privs` first. OSError on failure."""
    program = bytes.fromhex(seccomp_spec["bpf"])
    if not program or len(program) % 8:
        raise OSError(errno.EINVAL, "the seccomp program is empty or malformed")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    filters = ctypes.create_string_buffer(program, len(program))
    fprog = ctypes.create_string_buffer(struct.pack("HxxxxxxQ", len(program) // 8, ctypes.addressof(filters)), 16)
    result = libc.syscall(ctypes.c_long(int(seccomp_spec["syscall"])), ctypes.c_uint(SECCOMP_SET_MODE_FILTER),
                          ctypes.c_uint(SECCOMP_FILTER_FLAG_LOG), fprog)
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"seccomp(SECCOMP_SET_MODE_FILTER): {os.strerror(err)}")
