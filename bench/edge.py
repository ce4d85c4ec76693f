"""What the HTTP edge costs per request: murmurd against the a2a-sdk reference (issue 29).

The workload: `--requests` (default 3,200) JSON-RPC `GetExtendedAgentCard` calls from
`--clients` (default 16) keep-alive HTTP/1.1 connections. Both servers answer it with a JSON-RPC
error without touching a task: in murmurd the router refuses it (no extended card) before the
daemon is asked anything, so what is measured is HTTP parsing, the middleware (browser guard,
authentication), routing and the JSON-RPC dispatch and answer. CPU ms per request from
`/proc/PID/stat` (utime + stime, all threads) over each run; servers alternate for `--runs` runs
(default 3) after a warm-up; min / median / max.

`--tree DIR` (repeatable) adds a murmurd served from another checkout (`git archive` of a
commit into DIR): `python -m murmurd` run from DIR imports DIR's murmurd, so a change is
measured against its base in the same run.

    .venv/bin/python bench/edge.py [--requests 3200] [--clients 16] [--runs 3] [--tree /tmp/before]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import throughput as T  # noqa: E402  (bench/throughput.py: its reference, capsule and CPU reading)

A2A = T.A2A
BODY = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard", "params": {}}).encode()


def start_murmurd(tree: Path, capsule: Path, state_dir: Path) -> object:
    proc = subprocess.Popen(
        [sys.executable, "-m", "murmurd", "serve", str(capsule), "--state-dir", str(state_dir)],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tree,
        env={**os.environ, "MURMUR_A2A_TIMEOUT_SECS": str(A2A.MAX_SERVER_SECONDS)})
    lines = A2A._read_until(proc, proc.stderr, lambda ls: any(x.startswith("session: ") for x in ls), 300)
    url = "http://" + next(x for x in lines if x.startswith("murmur: url ")).split()[-1] + "/"
    return A2A.Server(str(tree), proc, url, capsule / "workdir", lines)


async def measure(server: object, requests: int, clients: int) -> float:
    """CPU ms per request of `server` over `requests` calls (each answer checked to be an error)."""
    pid = server.proc.pid  # type: ignore[attr-defined]
    connections = [A2A.Connection(server.port) for _ in range(clients)]  # type: ignore[attr-defined]
    await asyncio.gather(*(c.open() for c in connections))
    each = requests // clients

    async def client(conn: object) -> None:
        for _ in range(each):
            raw = await conn.post(BODY)  # type: ignore[attr-defined]
            if "error" not in json.loads(raw):
                raise RuntimeError(f"expected a JSON-RPC error: {raw[:300]!r}")

    user0, system0 = T.cpu_ms(pid)
    try:
        await asyncio.wait_for(asyncio.gather(*(client(c) for c in connections)), 600)
    finally:
        for conn in connections:
            conn.close()
    user1, system1 = T.cpu_ms(pid)
    return (user1 - user0 + system1 - system0) / (each * clients)


async def run(args: argparse.Namespace) -> None:
    print(f"python {sys.version.split()[0]}, a2a-sdk {A2A._version('a2a-sdk')}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="murmurd-edge-") as tmp:
        root = Path(tmp)
        servers: dict[str, object] = {}
        try:
            servers["a2a-sdk"] = A2A.start_reference()
            for k, tree in enumerate([A2A.ROOT, *args.tree]):
                name = "murmurd" if k == 0 else f"murmurd@{tree}"
                servers[name] = start_murmurd(Path(tree), A2A.chaos_capsule(root / str(k)), root / f"state{k}")
            for server in servers.values():  # warm-up
                await measure(server, args.clients * 20, args.clients)
            loads = [os.getloadavg()[0]]
            runs: dict[str, list[float]] = {name: [] for name in servers}
            for _ in range(args.runs):
                for name, server in servers.items():
                    runs[name].append(await measure(server, args.requests, args.clients))
                loads.append(os.getloadavg()[0])
            print(f"edge: {args.requests} GetExtendedAgentCard calls from {args.clients} clients, {args.runs} runs"
                  f" per server; load average {min(loads):.1f}-{max(loads):.1f}")
            reference = statistics.median(runs["a2a-sdk"])
            for name, values in runs.items():
                print(f"   {name:<40} CPU ms/request {T.spread(values, 3):>24}"
                      f"   {statistics.median(values) / reference:5.2f}x the reference")
        finally:
            for server in servers.values():
                server.stop()  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=3200, help="requests per run and server (default 3200)")
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients (default 16)")
    parser.add_argument("--runs", type=int, default=3, help="runs per server (default 3)")
    parser.add_argument("--tree", action="append", default=[], type=Path,
                        help="also serve murmurd from this checkout (repeatable)")
    args = parser.parse_args()
    if not (1 <= args.clients <= 256 and args.clients <= args.requests <= 1_000_000 and 1 <= args.runs <= 20):
        parser.error("clients 1-256, requests from clients to 1000000, runs 1-20")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
