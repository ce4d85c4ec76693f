"""Runs one tool call in this process while the kernel refuses its first N memfd seals.

`python tests/refused_seals.py TOOL.wasm N` loads a seccomp filter (irrevocable, so this runs
in a process of its own) that hands every `fcntl(fd, F_ADD_SEALS, …)` of the calling thread to
a supervisor thread; the supervisor answers the first N with EBUSY, as the kernel does while it
still holds a memfd's freshly written pages, and lets the rest through. wasmtime seals the memfd
of a module's copy-on-write memory image at the module's first instantiation. Prints JSON: how
many seals were refused and let through, and the call's result or error."""

from __future__ import annotations

import errno
import json
import sys
from pathlib import Path

import pyseccomp as seccomp

from murmurd.host import ComponentHost, HostError, ToolInput
from refusing_kernel import load_supervised

F_ADD_SEALS = 1033


def main(wasm: Path, refusals: int) -> dict:
    host = ComponentHost()
    tool = host.load(wasm)  # compiled here, before the filter: only instantiation is watched
    seal_filter = seccomp.SyscallFilter(seccomp.ALLOW)
    seal_filter.add_rule(seccomp.NOTIFY, "fcntl", seccomp.Arg(1, seccomp.EQ, F_ADD_SEALS))
    # this thread only (no TSYNC): the call below runs here
    seals = load_supervised(seal_filter, lambda counts: errno.EBUSY if counts["refused"] < refusals else None)
    try:
        result = host.call_tool_sync(tool, ToolInput(data="sealed"))
        outcome: dict = {"result": json.loads(result.data)}
    except HostError as exc:
        outcome = {"error": type(exc).__name__, "message": str(exc)}
    return {**seals, **outcome}


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]), int(sys.argv[2]))))
