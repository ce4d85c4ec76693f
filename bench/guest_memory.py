"""Resident memory of guests that fill their memory limit and trap, one after another and at once.

Each call grows its linear memory 16 MiB at a time, touching every page, until the store's limit
refuses a grow, then traps (a memory balloon). The baseline, measured in the same run, is one
such call's growth of the process's resident memory; the figures are the peak growth over many
calls as a ratio of it. The host closes each call's store when the call ends, so the target is
about 1× for sequential calls and about N× for N calls running at once, never growing with the
number of calls made.

    .venv/bin/python bench/guest_memory.py [--limit-mib 256] [--calls 8] [--parallel 2]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from hostile import BALLOON, tool_component  # noqa: E402
from murmurd.host import CallGrant, ComponentHost, HostError, Limits, ToolInput  # noqa: E402

MIB = 1024 * 1024


def resident_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


class PeakSampler:
    """Samples resident memory every 5 ms on a thread; `peak` is the highest seen."""

    def __init__(self) -> None:
        self.peak = resident_mib()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, resident_mib())
            time.sleep(0.005)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


async def balloon_calls(host: ComponentHost, count: int, parallel: int, limit_mib: int) -> None:
    balloon = host.load_bytes(tool_component(BALLOON), name="balloon")
    grant = CallGrant(limits=Limits(memory_bytes=limit_mib * MIB))
    errors: list[HostError] = []  # kept alive, as a task store or a client would keep them

    async def one() -> None:
        try:
            await host.call_tool(balloon, ToolInput(), grant=grant)
        except HostError as exc:
            errors.append(exc)

    for start in range(0, count, parallel):
        await asyncio.gather(*(one() for _ in range(min(parallel, count - start))))
    assert len(errors) == count, "every balloon call should trap"


def measure(host: ComponentHost, count: int, parallel: int, limit_mib: int) -> tuple[float, float]:
    before = resident_mib()
    with PeakSampler() as sampler:
        asyncio.run(balloon_calls(host, count, parallel, limit_mib))
    return sampler.peak - before, resident_mib() - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit-mib", type=int, default=256)
    parser.add_argument("--calls", type=int, default=8)
    parser.add_argument("--parallel", type=int, default=2)
    args = parser.parse_args()
    host = ComponentHost(max_workers=max(2, args.parallel))
    try:
        one_peak, _ = measure(host, 1, 1, args.limit_mib)
        seq_peak, seq_after = measure(host, args.calls, 1, args.limit_mib)
        par_peak, par_after = measure(host, args.calls, args.parallel, args.limit_mib)
    finally:
        host.close()
    print(f"one call ({args.limit_mib} MiB limit): peak +{one_peak:.0f} MiB  (baseline)")
    print(f"{args.calls} calls one at a time: peak +{seq_peak:.0f} MiB = {seq_peak / one_peak:.2f}x baseline;"
          f" after +{seq_after:.0f} MiB")
    print(f"{args.calls} calls {args.parallel} at a time: peak +{par_peak:.0f} MiB = {par_peak / one_peak:.2f}x baseline"
          f" (target ~{args.parallel}x); after +{par_after:.0f} MiB")


if __name__ == "__main__":
    main()
