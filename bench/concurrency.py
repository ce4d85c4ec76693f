"""Many callers at once (issue 11): a capsule whose provider takes a while to answer.

The provider stand-in is real HTTP on loopback that answers every GET after a set latency. The
capsule's driver is a real component (tests/fixtures/http-driver) that makes one wasi:http
round trip to it per turn, granted through `network.allow`, so every task spends almost all its
time waiting on its provider while holding one WASM pool thread, as a real agent does.

Two `murmurd serve` daemons of the same capsule run in the same bench: one with
`--max-concurrent-tasks N` (default 64) and one with a bound of 1 (upstream: one task at a time).

1. Throughput. `--tasks` one-turn tasks in as many contexts, sent at the same moment as blocking
   `message/send` (upstream, `configuration.blocking`); wall time from the first send to the last
   answer; tasks/s. The serial daemon runs `--serial-tasks` of them (it needs latency x tasks), and
   the ratio of the two tasks/s figures is the speed-up. One light client sends them (a
   hand-written HTTP/1.1 request per send, no client library: the bench shares the daemon's
   cores); the daemon's CPU per task over the run is printed beside the load average.
2. `tasks/get` while `--inflight` tasks are in flight (non-blocking sends at `--slow-latency`, so
   all are accepted and none ends while measured): `--gets` sequential `tasks/get` of random
   in-flight tasks on one keep-alive connection; p50 / p99 / max.
3. Resident memory: the daemon's VmRSS after a warm-up task, and its peak while `--tasks` tasks
   wait on the provider at once; (peak - idle) / tasks is the resident cost of one in-flight task
   (its session, its WASM instance, its pool thread). Then the RSS with the tasks' context
   sessions open and idle, and after `--session-idle` closed them: the cost of an open session.

The daemons' files (capsule, session workdirs, state) go to the temporary directory's file system,
or with `--files tmpfs` to /dev/shm; the report names the file system and what creating a file
cost there just before (bench/filesystem.py: on ext4 without a journal that cost follows how many
files any process removed in the last minutes, and a new context creates a dozen).

Loopback only; every loop bounded in count and time; stops by itself.

    .venv/bin/python bench/concurrency.py [--tasks 64] [--latency 1.0] [--serial-tasks 4] [--driver wat]
                                          [--files disk|tmpfs]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import httpx
from wasmtime import wat2wasm

ROOT = Path(__file__).resolve().parent.parent
DRIVERS = {"python": ROOT / "tests" / "fixtures" / "http-driver", "wat": ROOT / "tests" / "fixtures" / "http-driver.wat"}
sys.path.insert(0, str(ROOT / "bench"))
import filesystem as FS  # noqa: E402
import procstat  # noqa: E402


@contextmanager
def provider(latency: float) -> Iterator[tuple[str, dict[str, float]]]:
    """A loopback HTTP server answering every GET after `latency` seconds (changeable live)."""
    setting = {"latency": latency}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            time.sleep(setting["latency"])
            body = b"provider says hi"
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: Any) -> None:
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 512  # listen()'s backlog, read in __init__: at 5, SYNs overflow and retry after 1 s

    server = Server(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", setting
    finally:
        server.shutdown()
        server.server_close()


def capsule(root: Path, endpoint: str, driver: str = "python") -> Path:
    directory = root / "slow-provider"
    directory.mkdir(parents=True, exist_ok=True)
    source = DRIVERS[driver]
    if source.suffix == ".wat":
        source = directory / "http-driver.wasm"
        source.write_bytes(wat2wasm(DRIVERS[driver].read_text()))
    manifest = {
        "name": "slow-provider", "version": "1.0.0",
        "artifacts": [{"name": "http-driver", "runtime": "driver", "source": str(source), "local_source": True,
                       "capabilities": {"network": {"allow": [endpoint]}, "limits": {"deadline_seconds": 120}}}],
        "capabilities": {"network": {"allow": [endpoint]}},
        "inference": {"endpoint": endpoint + "/v1", "model": "stand-in", "driver": {"artifact": "http-driver"}},
        "lifecycle": {"task_acceptance": "queue", "queue_depth": 4096, "after_task": "sleep"},
    }
    (directory / "murmur.yaml").write_text(json.dumps(manifest, indent=2))  # JSON is YAML, without aliases
    return directory


class Daemon:
    def __init__(self, capsule_dir: Path, state: Path, bound: int, session_idle: float = 60.0,
                 extra: tuple[str, ...] = ()) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "murmurd", "serve", str(capsule_dir), "--state-dir", str(state),
             "--max-concurrent-tasks", str(bound), "--max-connections", "1024", "--session-idle", str(session_idle),
             *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        )
        deadline = time.monotonic() + 180
        assert self.proc.stderr is not None
        self.url = ""
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                raise SystemExit("murmurd serve exited before it was ready")
            if line.startswith("murmur: url "):
                self.url = f"http://{line.split()[-1]}/"
            if line.startswith("session: "):
                break
        stderr = self.proc.stderr
        threading.Thread(target=lambda: [None for _ in stderr], daemon=True).start()  # keep the pipe drained

    def rss_kib(self) -> int:
        """The daemon's and its WASM worker processes' resident memory."""
        return procstat.rss_kib(self.proc.pid)

    def cpu_secs(self) -> float:
        """User + kernel CPU of the daemon and its worker processes so far (every thread)."""
        return sum(procstat.cpu_ms(self.proc.pid)) / 1000

    def threads(self) -> int:
        return procstat.threads(self.proc.pid)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


def _message(text: str) -> dict[str, Any]:
    return {"messageId": f"m{time.monotonic_ns()}{random.random()}", "role": "user", "parts": [{"text": text}]}


async def _send(client: httpx.AsyncClient, url: str, text: str, blocking: bool) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "message/send",
            "params": {"message": _message(text), "configuration": {"blocking": blocking}}}
    response = await client.post(url, json=body, timeout=300)
    return response.json()["result"]


async def _light_send(host: str, port: int, text: str) -> dict[str, Any]:
    """One blocking `message/send` over its own connection, by hand: a light client (httpx per
    caller costs more CPU than a task does, and the bench shares the daemon's cores)."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "message/send",
                       "params": {"message": _message(text), "configuration": {"blocking": True}}}).encode()
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(b"POST / HTTP/1.1\r\nhost: %s:%d\r\ncontent-type: application/json\r\n"
                     b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (host.encode(), port, len(body), body))
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 300)
        length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        return json.loads(await reader.readexactly(length))["result"]
    finally:
        writer.close()


async def throughput(daemon: Daemon, tasks: int, sample_rss: bool = False) -> tuple[float, int]:
    """Wall seconds for `tasks` blocking sends at once, each checked; the peak RSS seen (KiB)."""
    peak = 0
    host, port = daemon.url.split("//", 1)[1].rstrip("/").rsplit(":", 1)
    started = time.monotonic()
    sends = asyncio.gather(*(_light_send(host, int(port), f"task {n}") for n in range(tasks)))
    sampling = asyncio.ensure_future(sends)
    while sample_rss and not sampling.done():
        peak = max(peak, daemon.rss_kib())
        await asyncio.sleep(0.05)
    results = await sampling
    wall = time.monotonic() - started
    answered = ("completed", "answer: provider says hi")
    bad = [r for r in results if (r["status"]["state"], r["status"].get("response")) != answered]
    if bad:
        raise SystemExit(f"{len(bad)} task(s) did not complete as expected: {bad[:2]}")
    return wall, peak


async def get_latency(daemon: Daemon, inflight: int, gets: int) -> list[float]:
    """`gets` sequential tasks/get (ms) while `inflight` tasks are accepted and unfinished."""
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=16)) as client:
        sent = [await _send(client, daemon.url, f"slow {n}", False) for n in range(inflight)]
        ids = [t["id"] for t in sent if t["status"]["state"] != "rejected"]
        if len(ids) != inflight:
            raise SystemExit(f"only {len(ids)} of {inflight} tasks were accepted")
        samples: list[float] = []
        for _ in range(gets):
            body = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": random.choice(ids)}}
            started = time.perf_counter()
            response = await client.post(daemon.url, json=body, timeout=30)
            samples.append((time.perf_counter() - started) * 1000)
            state = response.json()["result"]["status"]["state"]
            if state in ("completed", "failed", "canceled"):
                raise SystemExit("a task finished while tasks/get was measured: raise --slow-latency")
        return samples


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--bound", type=int, default=64, help="--max-concurrent-tasks of the concurrent daemon")
    parser.add_argument("--latency", type=float, default=1.0, help="provider latency, seconds")
    parser.add_argument("--serial-tasks", type=int, default=4, help="tasks the bound-1 daemon runs")
    parser.add_argument("--inflight", type=int, default=100)
    parser.add_argument("--gets", type=int, default=300)
    parser.add_argument("--session-idle", type=float, default=3.0, help="--session-idle of the concurrent daemon")
    parser.add_argument("--slow-latency", type=float, default=8.0, help="provider latency while tasks/get is measured")
    parser.add_argument("--wasm-processes", type=int, default=None, help="murmurd --wasm-processes (default: its own)")
    parser.add_argument("--driver", choices=sorted(DRIVERS), default="python",
                        help="python: componentize-py (its interpreter starts per call); wat: written by hand")
    parser.add_argument("--files", choices=["disk", "tmpfs"], default="disk",
                        help="where the daemons' capsule, workdirs and state go: the temporary directory's file"
                             " system (default), or /dev/shm")
    args = parser.parse_args()
    extra = () if args.wasm_processes is None else ("--wasm-processes", str(args.wasm_processes))
    if args.files == "tmpfs" and not FS.tmpfs_available():
        parser.error("no writable tmpfs at /dev/shm")
    place = str(FS.TMPFS) if args.files == "tmpfs" else None

    with tempfile.TemporaryDirectory(prefix="murmurd-bench-", dir=place) as tmp, \
            provider(args.latency) as (endpoint, setting):
        root = Path(tmp)
        files = f"{FS.describe(root)}; creating a file there: {FS.create_cost_us(root):.0f} us (median of 200, just before)"
        capsule_dir = capsule(root, endpoint, args.driver)
        concurrent = Daemon(capsule_dir, root / "state-n", args.bound, session_idle=args.session_idle, extra=extra)
        serial = Daemon(capsule_dir, root / "state-1", 1, extra=extra)
        try:
            asyncio.run(throughput(concurrent, 1))  # warm-up: compiled, first session opened and closed
            asyncio.run(throughput(serial, 1))
            idle_rss, idle_threads = concurrent.rss_kib(), concurrent.threads()
            cpu_before, client_before = concurrent.cpu_secs(), time.process_time()
            wall_n, peak_rss = asyncio.run(throughput(concurrent, args.tasks, sample_rss=True))
            cpu_n, client_n = concurrent.cpu_secs() - cpu_before, time.process_time() - client_before
            busy_threads = concurrent.threads()
            open_rss = concurrent.rss_kib()  # every context session still open, idle
            time.sleep(args.session_idle + 1.5)
            closed_rss = concurrent.rss_kib()  # the idle sessions closed
            wall_1, _ = asyncio.run(throughput(serial, args.serial_tasks))
            setting["latency"] = args.slow_latency
            samples = asyncio.run(get_latency(concurrent, args.inflight, args.gets))
        finally:
            setting["latency"] = 0.0
            concurrent.stop()
            serial.stop()

    rate_n, rate_1 = args.tasks / wall_n, args.serial_tasks / wall_1
    print(f"provider latency {args.latency:.2f} s; concurrent daemon bound {args.bound}; driver {args.driver}")
    print(f"the daemons' files on {files}")
    print(f"bound {args.bound}: {args.tasks} tasks in {args.tasks} contexts: wall {wall_n:.2f} s, {rate_n:.2f} tasks/s")
    print(f"daemon CPU {cpu_n * 1000 / args.tasks:.1f} ms per task ({cpu_n:.2f} s in {wall_n:.2f} s); "
          f"the client's {client_n * 1000 / args.tasks:.1f} ms; load average {os.getloadavg()[0]:.1f}")
    print(f"bound 1: {args.serial_tasks} tasks: wall {wall_1:.2f} s, {rate_1:.2f} tasks/s")
    print(f"speed-up: {rate_n / rate_1:.1f}x (ideal {min(args.tasks, args.bound)}x)")
    print(f"tasks/get with {args.inflight} in flight ({len(samples)} calls): "
          f"p50 {statistics.median(samples):.1f} ms, p99 {_pct(samples, 99):.1f} ms, max {max(samples):.1f} ms")
    per_task = (peak_rss - idle_rss) / args.tasks
    print(f"RSS idle {idle_rss / 1024:.0f} MiB ({idle_threads} threads), peak with {args.tasks} in flight "
          f"{peak_rss / 1024:.0f} MiB ({busy_threads} threads after): {per_task / 1024:.2f} MiB per in-flight task")
    per_session = (open_rss - idle_rss) / args.tasks  # an upper bound: the allocator keeps freed pages
    print(f"RSS with {args.tasks} idle context sessions open {open_rss / 1024:.0f} MiB "
          f"(at most {per_session:.0f} KiB per open session over the idle daemon), "
          f"after they closed {closed_rss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
