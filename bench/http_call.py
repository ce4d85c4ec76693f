"""Per-call cost of a driver's `wasi:http` round trip, murmurd's host against bare wasmtime-py.

The driver is tests/fixtures/http-driver (componentize-py): one GET per call to a loopback
provider stand-in (bench/concurrency.py's, in a child process so its CPU is not counted here)
that answers at once. The bare side is wasmtime-py with wasmtime's native `wasi:http` and
nothing between the guest and the network; murmurd's side adds what every call of a served
capsule has: its limits, epoch guard and captured output, and the egress filter (the guest's
`handle` shadowed in Python, the request's origin read through the forwarder component and
checked against `network.allow`, then sent through the native client). The two sides alternate
call by call (`host_call.interleaved`); each round reports the median per-call CPU of the
process; the ratio is min / median / max over the rounds.

    .venv/bin/python bench/http_call.py [--calls 100] [--rounds 5]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from wasmtime import Store, WasiConfig

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import host_call  # noqa: E402  (bench/host_call.py: the bare linker, the tool input, the alternation)

from murmurd.authoring.build import build_artifact  # noqa: E402
from murmurd.host import CallGuard, ComponentHost, ToolInput  # noqa: E402
from murmurd.host.wasi import CallGrant  # noqa: E402

PROVIDER = ("import sys, time; sys.path.insert(0, sys.argv[1]); import concurrency\n"
            "with concurrency.provider(0.0) as (url, _setting):\n    print(url, flush=True); time.sleep(3600)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=100, help="calls per side per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if not (10 <= args.calls <= 5000 and 1 <= args.rounds <= 50):
        parser.error("calls 10-5000, rounds 1-50")
    provider = subprocess.Popen([sys.executable, "-c", PROVIDER, str(HERE)], stdout=subprocess.PIPE, text=True)
    try:
        assert provider.stdout is not None
        url = provider.stdout.readline().strip()
        run(url, args.calls, args.rounds)
    finally:
        provider.kill()
        provider.wait()


def run(url: str, calls: int, rounds: int) -> None:
    host = ComponentHost()
    driver = host.load(build_artifact(host_call.ROOT / "tests" / "fixtures" / "http-driver").output)
    endpoint = {"MURMUR_INFERENCE_ENDPOINT": url + "/v1"}
    grant = CallGrant(env=endpoint, network=(url,))
    linker = host_call.bare_linker(host)
    linker.add_wasi_http()
    index = driver.component.get_export_index("run", driver.component.get_export_index(host_call.RUN))

    def bare(_i: int) -> object:
        store = Store(host.engine)
        wasi = WasiConfig()
        wasi.env = list(endpoint.items())
        store.set_wasi(wasi)
        store.set_wasi_http()
        store.set_epoch_deadline(1 << 40)
        func = linker.instantiate(store, driver.component).get_func(store, index)
        result = func(store, host_call.tool_input("{}"))
        func.post_return(store)
        store.close()
        assert "provider says hi" in result.data, result.data
        return result

    def ours(_i: int) -> object:
        result = host.call_tool_sync(driver, ToolInput(data="{}"), grant=grant, guard=CallGuard(60))
        assert result.data is not None and "provider says hi" in result.data, result
        return result

    host_call.interleaved(ours, bare, 10, time.perf_counter)  # warm up both paths
    print(f"http-driver call (one wasi:http GET on loopback), murmurd host vs bare wasmtime-py, "
          f"{rounds} rounds of {calls} calls each")
    cpu_ours, cpu_bare, ratios = [], [], []
    for _ in range(rounds):
        o, b = host_call.interleaved(ours, bare, calls, time.process_time)
        cpu_ours.append(o), cpu_bare.append(b), ratios.append(o / b)
    print(f"  CPU ms per call (medians per round; min / median / max): bare {host_call.spread(cpu_bare)}"
          f"   murmurd {host_call.spread(cpu_ours)}")
    print(f"  ratio murmurd / bare: {host_call.spread(ratios)}x")
    host.close()


if __name__ == "__main__":
    main()
