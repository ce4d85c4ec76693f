"""A seccomp supervisor that answers some of the system calls a filter hands it with an error
(what a failing kernel or disk would say) and lets the others through, for the scripts that run
under such a filter in a process of their own (`refused_seals.py`, `refused_syncs.py`)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pyseccomp as seccomp

SECCOMP_USER_NOTIF_FLAG_CONTINUE = 1


def load_supervised(syscall_filter: seccomp.SyscallFilter, refusal: Callable[[dict[str, int]], int | None]) -> dict[str, int]:
    """Load `syscall_filter` (its NOTIFY rules) on this thread, and the threads it starts from now
    on, with a supervisor thread answering what it hands over: `refusal(counts)` is the errno to
    answer with, or None to let the call through. Returns the live counts, `refused` and `passed`."""
    counts = {"refused": 0, "passed": 0}
    loaded = threading.Event()

    def supervise() -> None:
        loaded.wait()
        while True:
            notice = syscall_filter.receive_notify()
            error = refusal(counts)
            if error is not None:
                counts["refused"] += 1
                answer = seccomp.NotificationResponse(error=-error, flags=0, id=notice.id, val=0)
            else:
                counts["passed"] += 1
                answer = seccomp.NotificationResponse(
                    error=0, flags=SECCOMP_USER_NOTIF_FLAG_CONTINUE, id=notice.id, val=0)
            syscall_filter.respond_notify(answer)

    threading.Thread(target=supervise, daemon=True).start()  # started before the filter: not under it
    syscall_filter.load()
    loaded.set()
    return counts
