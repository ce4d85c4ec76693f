"""Cost of shell egress through the relay, against the same command unconfined in the same run.

Each sample is one `curl` shell command fetching from a loopback origin: through the relay (a
network namespace, listeners handed over, the connection spliced) and with
`MURMURD_SHELL_CONFINEMENT=none` (the host network, no namespace, no relay). Two payloads: a small
response (the per-command cost: namespace, handover, relay thread) and a large one (the splice's
throughput). Samples are interleaved so a busy machine slows both alike; medians are reported
with their ratio. Loopback only, bounded by `--calls`.

    .venv/bin/python bench/shell_egress.py [--calls 20] [--mib 64]
"""

from __future__ import annotations

import argparse
import http.server
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from murmurd.containment.host import probe_host  # noqa: E402
from murmurd.containment.plan import plan_containment  # noqa: E402
from murmurd.session.shell import ShellPolicy, run_shell  # noqa: E402
from murmurd.session.shell_egress import shell_egress_grant  # noqa: E402

CHUNK = b"x" * (1024 * 1024)


def origin(large_mib: int) -> http.server.ThreadingHTTPServer:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            size = large_mib if self.path == "/large" else 0
            self.send_response(200)
            self.send_header("Content-Length", str(size * len(CHUNK) or 2))
            self.end_headers()
            if size:
                for _ in range(size):
                    self.wfile.write(CHUNK)
            else:
                self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--mib", type=int, default=64)
    args = parser.parse_args()
    support = probe_host()
    if not support.netns:
        sys.exit(f"no network namespace here: {support.netns_error}")
    server = origin(args.mib)
    port = server.server_address[1]
    workdir = Path(tempfile.mkdtemp(prefix="murmurd-bench-egress-"))
    grant = shell_egress_grant([f"http://127.0.0.1:{port}"])
    relayed = ShellPolicy(allow=frozenset({"curl"}), workdir=workdir, containment=plan_containment(support, "auto"),
                          egress=grant)
    direct = ShellPolicy(allow=frozenset({"curl"}), workdir=workdir, containment=plan_containment(support, "none"))

    def fetch(policy: ShellPolicy, path: str):  # type: ignore[no-untyped-def]
        def run() -> None:
            outcome = run_shell(policy, "curl", ["-sS", "-o", "/dev/null", "-w", "%{http_code}",
                                                 f"http://127.0.0.1:{port}{path}"])
            assert outcome.stdout == "200", (outcome.stdout, outcome.stderr)
        return run

    cases = [fetch(direct, "/small"), fetch(relayed, "/small"), fetch(direct, "/large"), fetch(relayed, "/large")]
    samples: list[list[float]] = [[] for _ in cases]
    for case in cases:
        case()  # warm up
    for i in range(args.calls):
        for j in range(len(cases)):
            k = (i + j) % len(cases)
            started = time.perf_counter()
            cases[k]()
            samples[k].append((time.perf_counter() - started) * 1000)
    small_direct, small_relayed, large_direct, large_relayed = (statistics.median(s) for s in samples)
    print(f"curl, small response, unconfined:       median {small_direct:.1f} ms")
    print(f"curl, small response, through the relay: median {small_relayed:.1f} ms "
          f"(ratio {small_relayed / small_direct:.2f}x)")
    print(f"curl, {args.mib} MiB, unconfined:             median {large_direct:.1f} ms")
    print(f"curl, {args.mib} MiB, through the relay:       median {large_relayed:.1f} ms "
          f"(ratio {large_relayed / large_direct:.2f}x)")
    server.shutdown()
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
