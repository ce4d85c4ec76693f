"""What a driver call costs when several run at once in one process (issue 29, item 4).

Every variant runs `--calls` bare wasmtime-py calls of the chaos driver (a componentize-py
driver that answers at once; `bench/host_call.py`'s `Bare`: a fresh store per call) in a
process of its own, so each gets a fresh engine, and reports per call: CPU (user and kernel,
`getrusage` of the whole process), wall, minor page faults and voluntary context switches.
The baseline is one thread, default engine, measured in the same run; every other line is a
ratio against it.

- `threads N`: N threads calling at once (the daemon's WASM pool under load);
- `gated`: the same N threads, but one call runs at a time (a lock around each call), which
  is what a run gate in the host would do;
- `pooled`: wasmtime's pooling allocator with linear memory kept resident between instances
  (configured through wasmtime-py's private `_bindings`: the public `Config` has no pooling
  setting in wasmtime-py 50), so an instance's memory is neither mapped nor faulted in anew;
- `nocow`: the public `memory_init_cow = False` (data segments copied into fresh memory rather
  than mapped copy-on-write from the module image);
- `smallres`: the public `memory_reservation` at 256 MiB and `memory_guard_size` at 64 KiB
  (smaller virtual reservations to map and unmap per instance).

Nothing here is used by the daemon; it measures what the next round's changes would buy.
Bounded in calls and time; nothing leaves the machine.

    .venv/bin/python bench/wasm_concurrency.py [--calls 400] [--threads 8] [--resident 64]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ("baseline", "threads", "gated", "pooled", "pooled+threads", "pooled+gated",
            "nocow", "nocow+threads", "smallres", "smallres+threads")


def _engine(variant: str, resident_mib: int = 64):  # type: ignore[no-untyped-def]
    import wasmtime

    config = wasmtime.Config()
    config.epoch_interruption = True
    pooled = variant.startswith("pooled")
    if variant.startswith("nocow"):  # data segments copied in, not mapped copy-on-write
        config.memory_init_cow = False
    if variant.startswith("smallres"):  # a 256 MiB reservation and a 64 KiB guard, not 4 GiB + 32 MiB
        config.memory_reservation = 256 << 20
        config.memory_guard_size = 64 << 10
    if pooled:
        from wasmtime import _bindings as bindings

        pool = bindings.wasmtime_pooling_allocation_config_new()
        for name, value in (("total_component_instances", 64), ("total_core_instances", 256),
                            ("total_memories", 128), ("total_tables", 256), ("max_memory_size", 1 << 30),
                            ("linear_memory_keep_resident", resident_mib << 20), ("table_keep_resident", 1 << 20)):
            getattr(bindings, f"wasmtime_pooling_allocation_config_{name}_set")(pool, value)
        bindings.wasmtime_pooling_allocation_strategy_set(config.ptr(), pool)
    return wasmtime.Engine(config)


def child(variant: str, calls: int, threads: int, resident_mib: int) -> None:
    """One variant in this process: print its per-call figures as JSON."""
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "bench"))
    import host_call  # noqa: PLC0415  (bench/host_call.py: the bare call)
    from murmurd.authoring.build import build_artifact
    from murmurd.host import ComponentHost
    from murmurd.host.cache import CompileCache

    host = ComponentHost(use_disk_cache=False)
    host.engine = _engine(variant, resident_mib)
    host.cache = CompileCache(host.engine, None, fingerprint=variant)
    driver = host.load(build_artifact(ROOT / "tests" / "fixtures" / "chaos-driver").output)
    subject = host_call.Bare(host, driver.component)
    request = json.dumps({"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]})
    for _ in range(10):
        subject.call(request)
    count = threads if variant.endswith(("threads", "gated")) else 1
    gate = threading.Lock() if variant.endswith("gated") else None

    def work(n: int) -> None:
        for _ in range(n):
            if gate is None:
                subject.call(request)
            else:
                with gate:
                    subject.call(request)

    before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    workers = [threading.Thread(target=work, args=(calls // count,)) for _ in range(count)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    after, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - started
    done = calls // count * count
    print(json.dumps({
        "user": (after.ru_utime - before.ru_utime) * 1000 / done,
        "system": (after.ru_stime - before.ru_stime) * 1000 / done,
        "wall": wall * 1000 / done,
        "faults": (after.ru_minflt - before.ru_minflt) / done,
        "switches": (after.ru_nvcsw - before.ru_nvcsw) / done,
    }))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--resident", type=int, default=64,
                        help="MiB of linear memory a pooled slot keeps resident between instances")
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not (10 <= args.calls <= 20_000 and 1 <= args.threads <= 64 and 0 <= args.resident <= 1024):
        parser.error("calls 10-20000, threads 1-64, resident 0-1024 MiB")
    if args.child:
        child(args.child, args.calls, args.threads, args.resident)
        return
    print(f"chaos-driver calls, {args.calls} per variant, {args.threads} threads where threaded,"
          f" {args.resident} MiB resident per pooled slot, {os.cpu_count()} CPUs")
    results = {}
    for variant in VARIANTS:
        out = subprocess.run([sys.executable, __file__, "--child", variant, "--calls", str(args.calls),
                              "--threads", str(args.threads), "--resident", str(args.resident)], capture_output=True, text=True, timeout=600)
        if out.returncode != 0:
            print(f"  {variant}: failed\n{out.stderr[-2000:]}")
            continue
        results[variant] = json.loads(out.stdout.strip().splitlines()[-1])
    base = results.get("baseline")
    print(f"  {'variant':16s} {'CPU ms/call':>11} {'kernel':>7} {'wall ms':>8} {'faults':>7} {'switches':>9} {'CPU / baseline':>15}")
    for variant, r in results.items():
        cpu = r["user"] + r["system"]
        ratio = f"{cpu / (base['user'] + base['system']):.2f}x" if base else "-"
        print(f"  {variant:16s} {cpu:11.2f} {r['system']:7.2f} {r['wall']:8.2f} {r['faults']:7.0f}"
              f" {r['switches']:9.1f} {ratio:>15}")


if __name__ == "__main__":
    main()
