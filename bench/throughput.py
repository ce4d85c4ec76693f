"""Throughput per core: what one task costs murmurd against the a2a-sdk reference (issue 29).

The workload, the same bytes to both servers, in one run: `--tasks` one-turn tasks (default 300)
from `--clients` concurrent clients (default 16), each client on one keep-alive HTTP/1.1
connection sending its share one after another as blocking A2A 1.0 `SendMessage`s, every task in
a new context (no `contextId`). Every answer is checked ("answer: <text>", completed).

- murmurd: `murmurd serve --max-concurrent-tasks <bound>` (default 64) of the chaos capsule
  (tests/fixtures/chaos-driver, a real driver component that answers at once). With `--driver
  wat` its driver is tests/fixtures/echo-driver.wat instead: the same answer, written by hand,
  with no Python interpreter to start per call (componentize-py's start is the guest's own cost;
  upstream's published drivers, built from Rust, start as this one does).
- the reference: a2a-sdk's JSON-RPC app with a trivial executor (bench/a2a.py's, under uvicorn in
  a subprocess). It writes no file; murmurd writes a session workdir per context.

murmurd runs twice by default (`--files both`), with its capsule, workdirs and state on the
temporary directory's file system (`murmurd@disk`) and in /dev/shm (`murmurd@tmpfs`). Each row
names its file system and what creating a file cost there just before (bench/filesystem.py): on
these machines' root, ext4 without a journal, that cost follows how many files any process
removed in the last minutes, and so does murmurd's CPU per task on disk.

Each run also times murmurd's own WASM call alone: the same driver called as many times,
by as many threads, through `ComponentHost.call_tool_sync` in a process of its own with every
call in-process (bench/worker_calls.py; no HTTP, session or worker process around it), CPU ms
per call. The issue's second goal reads murmurd's CPU per task against the reference's plus that
call's, run by run.

Per run and server: CPU ms per task from `/proc/PID/stat` (utime + stime of the server process,
all its threads, over the run, divided by tasks; the kernel's share beside it), tasks/s (tasks /
wall time of the run), round-trip p50 / p99, and the server's thread count after the run. The
servers alternate for `--runs` runs (default 3) after a warm-up; reported as min / median / max
and murmurd / reference ratios of the medians (and the range of the per-run ratios).

Loopback only; every loop bounded in count and time; stops by itself.

    .venv/bin/python bench/throughput.py [--tasks 300] [--clients 16] [--runs 3] [--bound 64] [--driver wat]
                                         [--files disk|tmpfs|both]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from wasmtime import wat2wasm

HERE = Path(__file__).resolve().parent


def _bench_a2a() -> ModuleType:
    """bench/a2a.py (its servers, capsule and client), loaded under a name that does not shadow
    the a2a-sdk package."""
    spec = importlib.util.spec_from_file_location("bench_a2a", HERE / "a2a.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


A2A = _bench_a2a()
sys.path.insert(0, str(HERE))
import filesystem as FS  # noqa: E402
from procstat import cpu_ms, threads  # noqa: E402
from worker_calls import DRIVER as CHAOS_WASM  # noqa: E402
from worker_calls import measure as measure_calls  # noqa: E402


def start_murmurd(capsule: Path, state_dir: Path, bound: int, extra: tuple[str, ...] = ()) -> object:
    proc = subprocess.Popen(
        [sys.executable, "-m", "murmurd", "serve", str(capsule), "--state-dir", str(state_dir),
         "--max-concurrent-tasks", str(bound), *extra],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=A2A.ROOT,
        env={**os.environ, "MURMUR_A2A_TIMEOUT_SECS": str(A2A.MAX_SERVER_SECONDS)})
    lines = A2A._read_until(proc, proc.stderr, lambda ls: any(x.startswith("session: ") for x in ls), 300)
    url = "http://" + next(x for x in lines if x.startswith("murmur: url ")).split()[-1] + "/"
    return A2A.Server("murmurd", proc, url, capsule / "workdir", lines)


@dataclass
class Run:
    tasks: int
    seconds: float
    user_ms: float
    system_ms: float
    p50: float
    p99: float
    threads: int

    @property
    def cpu_per_task(self) -> float:
        return (self.user_ms + self.system_ms) / self.tasks

    @property
    def system_share(self) -> float:
        total = self.user_ms + self.system_ms
        return self.system_ms / total if total else 0.0

    @property
    def rate(self) -> float:
        return self.tasks / self.seconds


async def measure(server: object, tasks: int, clients: int) -> Run:
    pid = server.proc.pid  # type: ignore[attr-defined]
    per_client = [tasks // clients + (1 if k < tasks % clients else 0) for k in range(clients)]
    connections = [A2A.Connection(server.port) for _ in range(clients)]  # type: ignore[attr-defined]
    await asyncio.gather(*(c.open() for c in connections))
    latencies: list[float] = []

    async def client(k: int, conn: object) -> None:
        for i in range(per_client[k]):
            text = f"throughput {k}.{i}"
            started = time.perf_counter()
            raw = await conn.post(A2A.send_body("SendMessage", text, i))  # type: ignore[attr-defined]
            latencies.append((time.perf_counter() - started) * 1000)
            A2A.check_answer("SendMessage", raw, text)

    user0, system0 = cpu_ms(pid)
    started = time.perf_counter()
    try:
        await asyncio.wait_for(asyncio.gather(*(client(k, c) for k, c in enumerate(connections))), 600)
    finally:
        for conn in connections:
            conn.close()
    seconds = time.perf_counter() - started
    user1, system1 = cpu_ms(pid)
    ordered = sorted(latencies)
    return Run(len(latencies), seconds, user1 - user0, system1 - system0, statistics.median(ordered),
               ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))], threads(pid))


def spread(values: list[float], digits: int = 2) -> str:
    ordered = sorted(values)
    return f"{ordered[0]:.{digits}f} / {statistics.median(ordered):.{digits}f} / {ordered[-1]:.{digits}f}"


def report(runs: dict[str, list[Run]], calls: list[float], threads_before: dict[str, int],
           args: argparse.Namespace) -> None:
    print(f"throughput: {args.tasks} one-turn tasks from {args.clients} clients, each in a new context, "
          f"{args.runs} runs per server (min / median / max); murmurd bound {args.bound}")
    print(f"   {'server':<13} {'CPU ms/task':>22} {'kernel share':>13} {'tasks/s':>22} {'p50 ms':>22}"
          f" {'p99 ms':>22} {'threads':>16}")
    for name, rs in runs.items():
        kernel = statistics.median(r.system_share for r in rs)
        print(f"   {name:<13} {spread([r.cpu_per_task for r in rs]):>22} {kernel:>12.0%}"
              f" {spread([r.rate for r in rs], 1):>22} {spread([r.p50 for r in rs]):>22}"
              f" {spread([r.p99 for r in rs]):>22} {threads_before[name]:>6} -> {max(r.threads for r in rs):<6}")
    print(f"   WASM call alone (in-process, {args.clients} callers) CPU ms/call {spread(calls):>22}")
    ref = runs["a2a-sdk"]
    for name, mine in runs.items():
        if name == "a2a-sdk":
            continue

        def ratios(label: str, of: str) -> None:
            per_run = [getattr(m, of) / getattr(r, of) for m, r in zip(mine, ref)]
            medians = statistics.median(getattr(m, of) for m in mine) / statistics.median(getattr(r, of) for r in ref)
            print(f"   {name} / reference {label:<12} {medians:6.2f}x  (per run {min(per_run):.2f}-{max(per_run):.2f}x)")

        ratios("CPU/task", "cpu_per_task")
        with_call = [m.cpu_per_task / (r.cpu_per_task + c) for m, r, c in zip(mine, ref, calls)]
        print(f"   {name} / (reference + WASM call) {statistics.median(with_call):6.2f}x"
              f"  (per run {min(with_call):.2f}-{max(with_call):.2f}x; issue 29's goal <= 1.5x)")
        ratios("tasks/s", "rate")
        ratios("p50", "p50")
        ratios("p99", "p99")


def file_systems(choice: str, default_root: Path) -> dict[str, Path]:
    """Where each murmurd's files go, by row name: the temporary directory's file system
    (`disk`), and a directory in /dev/shm (`tmpfs`), which allocates inodes at memory speed."""
    places = {}
    if choice in ("disk", "both"):
        places["murmurd@disk"] = default_root
    if choice in ("tmpfs", "both"):
        if FS.tmpfs_available():
            places["murmurd@tmpfs"] = Path(tempfile.mkdtemp(prefix="murmurd-throughput-", dir=FS.TMPFS))
        else:
            print("   (no writable tmpfs at /dev/shm: murmurd runs with its files on disk only)")
    return places


async def run(args: argparse.Namespace) -> None:
    print(f"python {sys.version.split()[0]}, wasmtime {A2A._version('wasmtime')}, a2a-sdk {A2A._version('a2a-sdk')},"
          f" {os.cpu_count()} CPUs; driver {args.driver}")
    with tempfile.TemporaryDirectory(prefix="murmurd-throughput-") as tmp:
        root = Path(tmp)
        servers = []
        places = file_systems(args.files, root)
        try:
            reference = A2A.start_reference()
            servers.append(reference)
            extra = () if args.wasm_processes is None else ("--wasm-processes", str(args.wasm_processes))
            if args.driver == "wat":
                driver = call_driver = root / "echo-driver.wasm"
                driver.write_bytes(wat2wasm((A2A.FIXTURES / "echo-driver.wat").read_text()))
            else:  # the served capsule builds the chaos driver's source; the call alone loads its build
                driver, call_driver = A2A.FIXTURES / "chaos-driver", CHAOS_WASM
            order: dict[str, object] = {"a2a-sdk": reference}
            for name, place in places.items():
                print(f"   {name}: its capsule, workdirs and state on {FS.describe(place)}; creating a file there:"
                      f" {FS.create_cost_us(place):.0f} us (median of 200, just before)")
                order[name] = start_murmurd(A2A.chaos_capsule(place, driver), place / "state", args.bound, extra)
                servers.append(order[name])
            for server in order.values():  # warm-up: imports, compile caches, first-call costs
                await measure(server, args.clients * 2, args.clients)
            threads_before = {name: threads(server.proc.pid) for name, server in order.items()}
            runs: dict[str, list[Run]] = {name: [] for name in order}
            calls: list[float] = []
            for _ in range(args.runs):
                for name, server in order.items():
                    runs[name].append(await measure(server, args.tasks, args.clients))
                calls.append(measure_calls(False, args.clients, args.tasks, call_driver)["total"])
            report(runs, calls, threads_before, args)
        finally:
            for server in servers:
                server.stop()
            for place in places.values():
                if place != root:
                    shutil.rmtree(place, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=300, help="tasks per run and server (default 300)")
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients (default 16)")
    parser.add_argument("--runs", type=int, default=3, help="runs per server (default 3)")
    parser.add_argument("--bound", type=int, default=64, help="murmurd --max-concurrent-tasks (default 64)")
    parser.add_argument("--driver", choices=["python", "wat"], default="python",
                        help="python: the chaos driver (componentize-py); wat: tests/fixtures/echo-driver.wat")
    parser.add_argument("--files", choices=["disk", "tmpfs", "both"], default="both",
                        help="where murmurd's capsule, workdirs and state go: the temporary directory's file system,"
                             " /dev/shm, or one murmurd on each (default both)")
    parser.add_argument("--wasm-processes", type=int, default=None,
                        help="murmurd --wasm-processes (default: murmurd's own default)")
    args = parser.parse_args()
    if not (1 <= args.clients <= 256 and args.clients <= args.tasks <= 100_000 and 1 <= args.runs <= 20):
        parser.error("clients 1-256, tasks from clients to 100000, runs 1-20")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
