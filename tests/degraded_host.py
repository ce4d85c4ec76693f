"""Run a command on a host that lacks a mechanism for real: `degraded_host.py SYSCALLS CMD...`
installs a seccomp filter (libseccomp, through pyseccomp) that answers `EPERM` to each of the
comma-separated SYSCALLS and allows everything else, then execs CMD. murmurd's probe, run by CMD,
then finds the mechanism missing exactly as on a kernel or container that forbids it."""

from __future__ import annotations

import errno
import os
import sys

import pyseccomp as seccomp


def main(args: list[str]) -> None:
    denied, command = args[0], args[1:]
    if denied:
        rules = seccomp.SyscallFilter(seccomp.ALLOW)
        for name in denied.split(","):
            rules.add_rule(seccomp.ERRNO(errno.EPERM), name)
        rules.load()  # sets no_new_privs (libseccomp's default)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
