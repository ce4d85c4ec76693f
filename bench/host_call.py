"""Per-call cost of a host round trip on the echo tool, against bare wasmtime-py in the same run.

Both sides do the same work per call: a fresh Store with WASI, instantiate through a prepared
linker, call `murmur:tool/run#run`, post-return. murmurd adds its limits, epoch guard, call
context, captured output and value conversion. Target: murmurd / bare <= 1.5.

    .venv/bin/python bench/host_call.py [--calls 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from wasmtime import Store, WasiConfig
from wasmtime.component import Linker, Record

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from murmurd.authoring.build import build_artifact  # noqa: E402
from murmurd.host import ComponentHost, ToolInput  # noqa: E402


def bare_call_factory(host: ComponentHost, component):  # type: ignore[no-untyped-def]
    linker = Linker(host.engine)
    linker.add_wasip2()
    with linker.root() as root:
        with root.add_instance("murmur:text/chunks@0.1.0") as chunks:
            chunks.add_func("emit-chunk", lambda store, s: None)
            chunks.add_func("emit-thinking-chunk", lambda store, s: None)
        with root.add_instance("murmur:task/task@0.1.0") as task:
            task.add_func("request-input", lambda store, s: "")

    def call(data: str) -> object:
        store = Store(host.engine)
        store.set_wasi(WasiConfig())
        store.set_epoch_deadline(1 << 40)
        instance = linker.instantiate(store, component)
        iface = instance.get_export_index(store, "murmur:tool/run@0.1.0")
        func = instance.get_func(store, instance.get_export_index(store, "run", iface))
        arg = Record()
        arg.data = data
        setattr(arg, "log-path", None)
        result = func(store, arg)
        func.post_return(store)
        return result

    return call


def median_ms(fn, calls: int) -> float:  # type: ignore[no-untyped-def]
    samples = []
    for i in range(calls):
        started = time.perf_counter()
        fn(i)
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    wasm = build_artifact(ROOT / "examples" / "echo").output
    host = ComponentHost()
    loaded = host.load(wasm)
    bare = bare_call_factory(host, loaded.component)
    ours = lambda i: host.call_tool_sync(loaded, ToolInput(data=f'{{"n": {i}}}'))  # noqa: E731
    plain = lambda i: bare(f'{{"n": {i}}}')  # noqa: E731
    for fn in (ours, plain):  # warm up both paths
        median_ms(fn, 10)
    rounds = [(median_ms(plain, args.calls), median_ms(ours, args.calls)) for _ in range(3)]
    bare_ms = statistics.median(r[0] for r in rounds)
    ours_ms = statistics.median(r[1] for r in rounds)
    print(f"bare wasmtime-py call: median {bare_ms:.3f} ms")
    print(f"murmurd host call:     median {ours_ms:.3f} ms")
    print(f"ratio murmurd/bare:    {ours_ms / bare_ms:.2f}x (target <= 1.50x)")
    host.close()


if __name__ == "__main__":
    main()
