"""Session, task and context ids as upstream mints them: a prefix and a UUIDv7 as 32 hex digits.

UUIDv7 opens with the Unix-ms timestamp, so ids sort by creation time: upstream's `mur trace`
takes the lexicographically largest `ses_*` directory as the latest session, and `--since`
decodes the first 12 hex digits as a millisecond timestamp. Random hex would break both.
"""

from __future__ import annotations

import os
import threading
import time

_lock = threading.Lock()
_last = [0, 0]  # the last (ms, counter) handed out: ids minted in one millisecond still rise

_POOL_BYTES = 4096
_pool = bytearray()  # kernel random bytes not handed out yet, taken from the front


def _forget_pool() -> None:
    """A forked child must not hand out the bytes its parent will also hand out."""
    global _lock
    _lock = threading.Lock()
    _pool.clear()


os.register_at_fork(after_in_child=_forget_pool)


def random_bytes(count: int) -> bytes:
    """`count` bytes from the kernel's CSPRNG (`os.urandom`), read 4 KiB at a time.

    Every id a task mints (task, context, session, message, artifact) wants a few random bytes;
    one `getrandom` per id releases and retakes the interpreter lock on the event loop, which
    under load is a thread switch each. Each byte is handed out once, as `secrets` would."""
    with _lock:
        if len(_pool) < count:
            _pool.extend(os.urandom(max(_POOL_BYTES, count)))
        taken = bytes(_pool[:count])
        del _pool[:count]
    return taken


def random_hex(count: int) -> str:
    """`count` random bytes as 2 * `count` lowercase hex digits (`secrets.token_hex`)."""
    return random_bytes(count).hex()


def uuid7_hex() -> str:
    """A UUIDv7 (RFC 9562) as 32 lowercase hex digits, monotonic within this process."""
    drawn = int.from_bytes(random_bytes(10), "big")  # 11 bits for a counter's start, 62 random
    low, start = drawn & ((1 << 62) - 1), drawn >> 69
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last[0]:
            ms, counter = _last[0], _last[1] + 1
            if counter >= 1 << 12:  # the 12-bit counter ran out: borrow the next millisecond
                ms, counter = ms + 1, 0
        else:
            counter = start  # room to count upwards within this millisecond
        _last[:] = [ms, counter]
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76 | counter << 64
    value |= 0b10 << 62 | low
    return f"{value:032x}"


def new_session_id() -> str:
    return "ses_" + uuid7_hex()


def new_task_id() -> str:
    return "tsk_" + uuid7_hex()


def new_context_id() -> str:
    return "ctx_" + uuid7_hex()
