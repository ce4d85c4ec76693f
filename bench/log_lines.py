"""What a log line costs the event loop (issue 29), against the standard library's handler
measured in the same run.

`--lines` `murmurd.tasks`-like records (four fields) through `logsetup`'s text format into a pipe
that another process reads, with a `logging.StreamHandler` (the baseline, what `serve` used
before) and with `murmurd.log_writer.BackgroundStreamHandler`; CPU µs per line of the calling
thread (what the event loop pays) and of the whole process (the writer thread's included).

`--runs` rounds, the two alternating; min / median / max, and each median as a ratio of the
baseline's. Bounded; nothing leaves the machine.

    .venv/bin/python bench/log_lines.py [--lines 5000] [--runs 5]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from murmurd import logsetup  # noqa: E402
from murmurd.log_writer import BackgroundStreamHandler  # noqa: E402

FIELDS = {"task_id": "tsk_01a24cdcc5a67484aed14f12d4f8617e", "context_id": "ctx_01a24cdcc5a6748394c378e911c11fe3",
          "origin": "operator", "state": "submitted"}


def _lines(count: int) -> dict[str, float]:
    result: dict[str, float] = {}
    for name, make in (("StreamHandler", logging.StreamHandler), ("BackgroundStreamHandler", BackgroundStreamHandler)):
        read_end, write_end = os.pipe()
        reader = subprocess.Popen(["cat"], stdin=read_end, stdout=subprocess.DEVNULL)
        os.close(read_end)
        stream = os.fdopen(write_end, "w")
        handler = make(stream)
        handler.setFormatter(logsetup.TextFormatter())
        log = logging.getLogger(f"bench.log_lines.{name}")
        log.handlers[:] = [handler]
        log.propagate = False
        log.setLevel(logging.INFO)
        try:
            log.info("task accepted", extra=FIELDS)  # the writer started
            handler.flush()
            started, own = time.process_time(), time.thread_time()
            for _ in range(count):
                log.info("task accepted", extra=FIELDS)
            caller = time.thread_time() - own
            handler.flush()
            whole = time.process_time() - started
        finally:
            handler.close()
            stream.close()
            reader.wait(60)
        result[f"{name}, caller"] = caller / count * 1e6
        result[f"{name}, all threads"] = whole / count * 1e6
    return result


def _spread(values: list[float]) -> str:
    ordered = sorted(values)
    return f"{ordered[0]:7.1f} / {statistics.median(ordered):7.1f} / {ordered[-1]:7.1f}"


def _report(title: str, rounds: list[dict[str, float]], baselines: dict[str, str]) -> None:
    print(title)
    for name in rounds[0]:
        values = [r[name] for r in rounds]
        base = baselines.get(name)
        ratio = ""
        if base is not None and base != name:
            ratio = f"  {statistics.median(r[name] / r[base] for r in rounds):.2f}x of {base}"
        print(f"   {name:<36} {_spread(values)} µs{ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    if not (100 <= args.lines <= 1_000_000 and 1 <= args.runs <= 50):
        parser.error("lines 100-1000000, runs 1-50")
    line_rounds = [_lines(args.lines) for _ in range(args.runs)]
    print(f"log lines: {args.runs} rounds (min / median / max); load {os.getloadavg()[0]:.1f}")
    _report(f"log lines, CPU per line ({args.lines} per round)", line_rounds, {
        "BackgroundStreamHandler, caller": "StreamHandler, caller",
        "BackgroundStreamHandler, all threads": "StreamHandler, all threads"})


if __name__ == "__main__":
    main()
