"""bench/throughput.py's workload against two murmurd trees and the reference, in one run.

The a2a-sdk reference, murmurd started from `--before DIR` (e.g. `git archive main | tar -x -C
/tmp/before`; run from its own directory, its own `murmurd` package first on the path) and
murmurd from this tree, each on the chaos capsule, bound 64. After a warm-up each run measures
every server with `throughput.measure` (CPU ms per task from /proc/PID/stat, tasks/s, p50, p99); the
two murmurd trees swap places every other run so neither always runs at the higher load. Prints
each run, min / median / max, and the per-run ratios (after / reference, before / reference,
after / before) with the load average.

Loopback only; every loop bounded in count and time; stops by itself.

    .venv/bin/python bench/throughput_trees.py --before /tmp/before [--tasks 300] [--runs 3] [--driver wat]

Its files go to the temporary directory (`TMPDIR=/dev/shm` for tmpfs); the first line names the
file system and what creating a file cost there just before (bench/filesystem.py).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import filesystem as FS  # noqa: E402
import throughput as T  # noqa: E402
from wasmtime import wat2wasm  # noqa: E402

A2A = T.A2A
CLIENTS = 16


def start(tree: Path, root: Path, name: str, bound: int, driver: Path) -> object:
    root.mkdir(parents=True)
    capsule = A2A.chaos_capsule(root, driver)
    proc = subprocess.Popen(
        [sys.executable, "-m", "murmurd", "serve", str(capsule), "--state-dir", str(root / "state"),
         "--max-concurrent-tasks", str(bound)],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tree,
        env={**os.environ, "MURMUR_A2A_TIMEOUT_SECS": str(A2A.MAX_SERVER_SECONDS), "PYTHONPATH": str(tree)})
    lines = A2A._read_until(proc, proc.stderr, lambda ls: any(x.startswith("session: ") for x in ls), 300)
    url = "http://" + next(x for x in lines if x.startswith("murmur: url ")).split()[-1] + "/"
    return A2A.Server(name, proc, url, capsule / "workdir", lines)


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="murmurd-trees-") as tmp:
        root = Path(tmp)
        servers: list = []
        driver = A2A.FIXTURES / "chaos-driver"
        if args.driver == "wat":
            driver = root / "echo-driver.wasm"
            driver.write_bytes(wat2wasm((A2A.FIXTURES / "echo-driver.wat").read_text()))
        print(f"driver {args.driver}; files on {FS.describe(root)}; creating a file there: "
              f"{FS.create_cost_us(root):.0f} us (median of 200, just before)", flush=True)
        try:
            servers.append(A2A.start_reference())
            servers.append(start(Path(args.before).resolve(), root / "before", "before", args.bound, driver))
            servers.append(start(HERE.parent, root / "after", "after", args.bound, driver))
            for server in servers:
                await T.measure(server, CLIENTS * 2, CLIENTS)
            runs: dict[str, list[T.Run]] = {s.name: [] for s in servers}
            for i in range(args.runs):
                order = servers if i % 2 == 0 else [servers[0], servers[2], servers[1]]
                for server in order:
                    r = await T.measure(server, args.tasks, CLIENTS)
                    runs[server.name].append(r)
                    print(f"run {i} {server.name:8} CPU {r.cpu_per_task:6.2f} ms/task kernel {r.system_share:4.0%}"
                          f" {r.rate:6.1f} tasks/s p50 {r.p50:6.1f} ms p99 {r.p99:6.1f} ms threads {r.threads}"
                          f" load {os.getloadavg()[0]:.1f}", flush=True)
            for name, rs in runs.items():
                print(f"{name:8} CPU ms/task {T.spread([r.cpu_per_task for r in rs])}"
                      f"  kernel {statistics.median(r.system_share for r in rs):.0%}"
                      f"  tasks/s {T.spread([r.rate for r in rs], 1)}  p99 ms {T.spread([r.p99 for r in rs], 1)}")
            for mine, base in (("after", "a2a-sdk"), ("before", "a2a-sdk"), ("after", "before")):
                per = [m.cpu_per_task / b.cpu_per_task for m, b in zip(runs[mine], runs[base])]
                print(f"{mine} / {base} per run: " + ", ".join(f"{x:.2f}" for x in per))
            tails = [a.p99 / b.p99 for a, b in zip(runs["after"], runs["before"])]
            print("after / before p99 per run: " + ", ".join(f"{x:.2f}" for x in tails))
        finally:
            for server in servers:
                server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="a murmurd source tree to compare against")
    parser.add_argument("--tasks", type=int, default=300)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--bound", type=int, default=64)
    parser.add_argument("--driver", choices=["python", "wat"], default="python",
                        help="python: the chaos driver (componentize-py); wat: tests/fixtures/echo-driver.wat")
    args = parser.parse_args()
    if not (CLIENTS <= args.tasks <= 100_000 and 1 <= args.runs <= 20):
        parser.error(f"tasks {CLIENTS}-100000, runs 1-20")
    if not (Path(args.before) / "murmurd" / "__init__.py").is_file():
        parser.error(f"--before {args.before}: no murmurd package there")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
