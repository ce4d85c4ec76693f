"""What a driver call costs through a WASM worker process against the same call in-process
(issue 29): the worker's price per call, alone and with many callers at once.

The chaos driver (tests/fixtures/chaos-driver, a componentize-py driver that answers at once) is
called `--calls` times through `ComponentHost.call_tool_sync`, the way the session's pool
threads call it, by 1 and by `--callers` threads at once, in four variants measured in the same
run, each in a process of its own (a fresh engine and interpreter):

- in-process, 1 and N callers: the baseline, every call in the calling process;
- worker, 1 and N callers: `start_workers(host, 1)`, as `murmurd serve` runs its calls.

Per call: CPU (user and kernel) of the calling process (`getrusage`) and of the worker (its
/proc stat), their sum, and the wall time. Every worker line is also given as a ratio of its
total CPU against the in-process line with the same callers. `--runs` runs of each, the
variants alternating; min / median / max.

Bounded in calls and time; nothing leaves the machine.

    .venv/bin/python bench/worker_calls.py [--calls 600] [--callers 16] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

DRIVER = ROOT / "tests" / "fixtures" / "chaos-driver" / "chaos-driver.wasm"
REQUEST = json.dumps({"model": "chaos", "max_tokens": 100, "system": "s",
                      "messages": [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]})
WARM_UP = 20


def _child(workers: bool, callers: int, calls: int, driver: Path) -> dict[str, float]:
    from murmurd.host import CallGuard, ComponentHost, ToolInput
    from murmurd.host.workers.processes import start_workers
    from procstat import cpu_ms

    host = ComponentHost()
    if workers:
        start_workers(host, 1)
    loaded = host.load(driver, name="chaos-driver")

    def call(_: object = None) -> None:
        result = host.call_tool_sync(loaded, ToolInput(data=REQUEST), guard=CallGuard(60))
        assert result.data and "answer" in result.data, result

    for _ in range(WARM_UP):
        call()

    def own() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return (usage.ru_utime + usage.ru_stime) * 1000

    def worker() -> float:
        return sum(sum(cpu_ms(pid)) for pid in host.workers.pids) if host.workers is not None else 0.0

    own0, worker0, started = own(), worker(), time.perf_counter()
    with ThreadPoolExecutor(callers) as pool:
        list(pool.map(call, range(calls)))
    wall = time.perf_counter() - started
    own1, worker1 = own(), worker()
    host.close()
    return {"caller": (own1 - own0) / calls, "worker": (worker1 - worker0) / calls,
            "total": (own1 - own0 + worker1 - worker0) / calls, "wall": wall * 1000 / calls}


def measure(workers: bool, callers: int, calls: int, driver: Path = DRIVER) -> dict[str, float]:
    """One variant in a process of its own: CPU ms per call (caller, worker, total) and wall ms.
    `driver` is a driver component that answers REQUEST with "answer: ..." (the chaos driver's
    .wasm, or bench/throughput.py's hand-written one)."""
    out = subprocess.run(
        [sys.executable, __file__, "--child", "worker" if workers else "in-process", "--callers", str(callers),
         "--calls", str(calls), "--driver", str(driver)], capture_output=True, text=True, timeout=600, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _spread(values: list[float]) -> str:
    ordered = sorted(values)
    return f"{ordered[0]:.2f} / {statistics.median(ordered):.2f} / {ordered[-1]:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=600, help="calls per variant and run (default 600)")
    parser.add_argument("--callers", type=int, default=16, help="threads calling at once (default 16)")
    parser.add_argument("--runs", type=int, default=3, help="runs of every variant (default 3)")
    parser.add_argument("--child", choices=["worker", "in-process"], help=argparse.SUPPRESS)
    parser.add_argument("--driver", type=Path, default=DRIVER, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not (1 <= args.callers <= 256 and 50 <= args.calls <= 100_000 and 1 <= args.runs <= 20):
        parser.error("callers 1-256, calls 50-100000, runs 1-20")
    if args.child:
        print(json.dumps(_child(args.child == "worker", args.callers, args.calls, args.driver)))
        return
    variants = [(workers, callers) for callers in (1, args.callers) for workers in (False, True)]
    results: dict[tuple[bool, int], list[dict[str, float]]] = {v: [] for v in variants}
    for _ in range(args.runs):
        for workers, callers in variants:
            results[(workers, callers)].append(measure(workers, callers, args.calls))
    print(f"worker calls: {args.calls} chaos-driver calls per run, {args.runs} runs (min / median / max), ms per call")
    print(f"   {'variant':<24} {'caller CPU':>20} {'worker CPU':>20} {'total CPU':>20} {'wall':>20}  total / in-process")
    for workers, callers in variants:
        runs = results[(workers, callers)]
        ratio = ""
        if workers:
            base = results[(False, callers)]
            per_run = [w["total"] / b["total"] for w, b in zip(runs, base)]
            ratio = f"{statistics.median(per_run):.2f}x ({min(per_run):.2f}-{max(per_run):.2f}x)"
        label = f"{'worker' if workers else 'in-process'}, {callers} caller{'s' if callers > 1 else ''}"
        print(f"   {label:<24} {_spread([r['caller'] for r in runs]):>20} {_spread([r['worker'] for r in runs]):>20}"
              f" {_spread([r['total'] for r in runs]):>20} {_spread([r['wall'] for r in runs]):>20}  {ratio}")


if __name__ == "__main__":
    main()
