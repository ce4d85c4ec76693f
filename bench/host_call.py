"""Per-call cost of a host round trip on the echo tool, against bare wasmtime-py in the same run.

Both sides do the same work per call: a fresh Store with WASI, instantiate through a linker
built once, call `murmur:tool/run#run`, post-return, drop the store. The bare side is wasmtime-py
used as cheaply as it allows (export index resolved once on the component). murmurd adds its
limits, epoch guard, call context, captured stderr, the pre-linked lookup and value conversion.
Target (issue 29): murmurd / bare <= 1.1.

The two sides alternate call by call, so both see the same load on a shared machine; each round
reports the median per-call CPU time of the process (`time.process_time`: every thread, the
epoch ticker included) and the median wall time. The ratio is reported as min / median / max
over the rounds.

Part 2 splits one bare call into its phases (store + WASI, instantiate, call, teardown) for the
echo tool and for a driver that answers at once (tests/fixtures/chaos-driver), and times a
second call on a kept instance (what reusing a driver instance across turns would save) and
the memory a kept instance holds resident.

    .venv/bin/python bench/host_call.py [--calls 200] [--rounds 5] [--no-phases]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from wasmtime import Store, WasiConfig
from wasmtime.component import Component, Linker, Record

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from murmurd.authoring.build import build_artifact  # noqa: E402
from murmurd.host import ComponentHost, ToolInput  # noqa: E402

RUN = "murmur:tool/run@0.1.0"
Clock = Callable[[], float]


def bare_linker(host: ComponentHost) -> Linker:
    linker = Linker(host.engine)
    linker.add_wasip2()
    with linker.root() as root:
        with root.add_instance("murmur:text/chunks@0.1.0") as chunks:
            chunks.add_func("emit-chunk", lambda store, s: None)
            chunks.add_func("emit-thinking-chunk", lambda store, s: None)
        with root.add_instance("murmur:task/task@0.1.0") as task:
            task.add_func("request-input", lambda store, s: "")
    return linker


def tool_input(data: str) -> Record:
    arg = Record()
    arg.data = data
    setattr(arg, "log-path", None)
    return arg


class Bare:
    """wasmtime-py alone: linker and export index built once, a fresh store per call."""

    def __init__(self, host: ComponentHost, component: Component) -> None:
        self.engine = host.engine
        self.component = component
        self.linker = bare_linker(host)
        self.index = component.get_export_index("run", component.get_export_index(RUN))

    def call(self, data: str) -> object:
        store = Store(self.engine)
        store.set_wasi(WasiConfig())
        store.set_epoch_deadline(1 << 40)
        instance = self.linker.instantiate(store, self.component)
        func = instance.get_func(store, self.index)
        result = func(store, tool_input(data))
        func.post_return(store)
        store.close()
        return result

    def phases(self, data: str, clock: Clock) -> dict[str, float]:
        """One call's phases in ms, and a second call on the same (kept) instance."""
        t0 = clock()
        store = Store(self.engine)
        store.set_wasi(WasiConfig())
        store.set_epoch_deadline(1 << 40)
        t1 = clock()
        instance = self.linker.instantiate(store, self.component)
        t2 = clock()
        func = instance.get_func(store, self.index)
        func(store, tool_input(data))
        func.post_return(store)
        t3 = clock()
        func(store, tool_input(data))  # the same instance again: what reuse would cost
        func.post_return(store)
        t4 = clock()
        store.close()
        t5 = clock()
        ms = lambda a, b: (b - a) * 1000  # noqa: E731
        return {"store": ms(t0, t1), "instantiate": ms(t1, t2), "call": ms(t2, t3),
                "teardown": ms(t4, t5), "reused call": ms(t3, t4)}


def interleaved(a: Callable[[int], object], b: Callable[[int], object], calls: int, clock: Clock) -> tuple[float, float]:
    """Median per-call cost (ms) of `a` and of `b`, alternating call by call."""
    sa, sb = [], []
    for i in range(calls):
        for fn, samples in ((a, sa), (b, sb)) if i % 2 == 0 else ((b, sb), (a, sa)):
            started = clock()
            fn(i)
            samples.append((clock() - started) * 1000)
    return statistics.median(sa), statistics.median(sb)


def spread(values: list[float], digits: int = 2) -> str:
    return " / ".join(f"{v:.{digits}f}" for v in (min(values), statistics.median(values), max(values)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200, help="calls per side per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-phases", action="store_true", help="part 1 only")
    args = parser.parse_args()
    echo_wasm = build_artifact(ROOT / "examples" / "echo").output
    driver_wasm = build_artifact(ROOT / "tests" / "fixtures" / "chaos-driver").output
    host = ComponentHost()
    echo = host.load(echo_wasm)
    bare = Bare(host, echo.component)
    ours = lambda i: host.call_tool_sync(echo, ToolInput(data=f'{{"n": {i}}}'))  # noqa: E731
    plain = lambda i: bare.call(f'{{"n": {i}}}')  # noqa: E731
    interleaved(ours, plain, 10, time.perf_counter)  # warm up both paths

    print(f"Part 1: echo call, murmurd host vs bare wasmtime-py ({args.rounds} rounds of {args.calls} calls each)")
    cpu_ratios, wall_ratios, cpu_ours, cpu_bare, wall_ours, wall_bare = [], [], [], [], [], []
    for _ in range(args.rounds):
        o, b = interleaved(ours, plain, args.calls, time.process_time)
        cpu_ours.append(o), cpu_bare.append(b), cpu_ratios.append(o / b)
        o, b = interleaved(ours, plain, args.calls, time.perf_counter)
        wall_ours.append(o), wall_bare.append(b), wall_ratios.append(o / b)
    print("  per-call medians, min / median / max over rounds:")
    print(f"  CPU   bare {spread(cpu_bare, 3)} ms   murmurd {spread(cpu_ours, 3)} ms")
    print(f"  wall  bare {spread(wall_bare, 3)} ms   murmurd {spread(wall_ours, 3)} ms")
    print(f"  ratio murmurd/bare  CPU {spread(cpu_ratios)}x   wall {spread(wall_ratios)}x   (target <= 1.10x)")
    stats = host.link_stats
    print(f"  linkers built {stats.linkers}, components pre-linked {stats.prelinked} "
          f"(for {1 + 2 * (10 + 2 * args.rounds * args.calls)} murmurd calls)")

    print(f"  scratch files made {host.scratch.made} (lent to one call at a time)")
    if args.no_phases:
        host.close()
        return

    print("\nPart 2: phases of one bare call, CPU ms (min / median / max of per-round medians)")
    driver = host.load(driver_wasm)
    request = json.dumps({"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]})
    for label, component, data in (("echo", echo, '{"n": 1}'), ("chaos-driver", driver, request)):
        subject = Bare(host, component.component)
        subject.phases(data, time.process_time)
        rounds: dict[str, list[float]] = {}
        for _ in range(args.rounds):
            samples = [subject.phases(data, time.process_time) for _ in range(max(20, args.calls // 4))]
            for key in samples[0]:
                rounds.setdefault(key, []).append(statistics.median(s[key] for s in samples))
        fresh = [sum(rounds[k][r] for k in ("store", "instantiate", "call", "teardown")) for r in range(args.rounds)]
        print(f"  {label}:")
        for key, values in rounds.items():
            print(f"    {key:12s} {spread(values, 3)}")
        print(f"    {'fresh total':12s} {spread(fresh, 3)}")
        print(f"    {'kept instance':12s} {resident_per_instance(subject, data):.1f} MiB resident each, after one call")
    host.close()


def resident_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def resident_per_instance(subject: Bare, data: str, count: int = 16) -> float:
    """What a kept instance (a driver instance serving a session's turns) holds resident."""
    before = resident_kb()
    stores = []
    for _ in range(count):
        store = Store(subject.engine)
        store.set_wasi(WasiConfig())
        store.set_epoch_deadline(1 << 40)
        func = subject.linker.instantiate(store, subject.component).get_func(store, subject.index)
        func(store, tool_input(data))
        func.post_return(store)
        stores.append(store)
    held = (resident_kb() - before) / count / 1024
    for store in stores:
        store.close()
    return held


if __name__ == "__main__":
    main()
