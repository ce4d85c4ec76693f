"""Session, task and context ids as upstream mints them: a prefix and a UUIDv7 as 32 hex digits.

UUIDv7 opens with the Unix-ms timestamp, so ids sort by creation time: upstream's `mur trace`
takes the lexicographically largest `ses_*` directory as the latest session, and `--since`
decodes the first 12 hex digits as a millisecond timestamp. Random hex would break both.
"""

from __future__ import annotations

import secrets
import threading
import time

_lock = threading.Lock()
_last = [0, 0]  # the last (ms, counter) handed out: ids minted in one millisecond still rise


def uuid7_hex() -> str:
    """A UUIDv7 (RFC 9562) as 32 lowercase hex digits, monotonic within this process."""
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last[0]:
            ms, counter = _last[0], _last[1] + 1
            if counter >= 1 << 12:  # the 12-bit counter ran out: borrow the next millisecond
                ms, counter = ms + 1, 0
        else:
            counter = secrets.randbits(11)  # room to count upwards within this millisecond
        _last[:] = [ms, counter]
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76 | counter << 64
    value |= 0b10 << 62 | secrets.randbits(62)
    return f"{value:032x}"


def new_session_id() -> str:
    return "ses_" + uuid7_hex()


def new_task_id() -> str:
    return "tsk_" + uuid7_hex()


def new_context_id() -> str:
    return "ctx_" + uuid7_hex()
