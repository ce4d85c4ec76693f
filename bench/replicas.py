"""Replicas on one PostgreSQL database (issue 17): tasks/s with 1, 2 and 3 `murmurd serve`
replicas in one run, and the database round trips each task costs.

A real PostgreSQL 15 (tests/pgkit.py: initdb + pg_ctl in a temporary directory, as an
unprivileged user) with `log_statement=all`; a fresh database per replica count. Each replica is
a `murmurd serve` of the chaos capsule (tests/fixtures/chaos-driver answers "answer: <text>";
`task_acceptance: queue`, `after_task: sleep`, the default bound of 16) with `--store
postgresql://...`. Clients send blocking upstream `message/send`s round-robin over the replicas,
`--clients` at once, each task in a new context; every answer is checked. Reported: wall time,
tasks/s, the ratio to one replica, and per task the statements the replicas executed in the
database (every `execute`/`statement` line the server logged for that database: one round trip
each, BEGIN and COMMIT included) and the transactions committed (pg_stat_database), over the
run (heartbeats and claims included).

    .venv/bin/python bench/replicas.py [--tasks 150] [--clients 24]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import pgkit  # noqa: E402
from a2akit import Served, chaos_capsule, start  # noqa: E402

REPLICA_COUNTS = (1, 2, 3)


def send(client: httpx.Client, url: str, text: str) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "message/send",
            "params": {"message": {"messageId": f"m{time.monotonic_ns()}", "role": "user", "parts": [{"text": text}]},
                       "configuration": {"blocking": True}}}
    result = client.post(url, json=body, timeout=120).json()["result"]
    assert result["status"]["state"] == "completed" and result["status"]["response"] == f"answer: {text}", result


def statement_lines(server: pgkit.PostgresServer, database: str) -> list[str]:
    marker = f"db={database}:"
    text = (server.root / "server.log").read_text(errors="replace")
    return [line for line in text.splitlines() if marker in line and ("execute " in line or "statement: " in line)]


def statements(server: pgkit.PostgresServer, database: str) -> int:
    return len(statement_lines(server, database))


def top_statements(lines: list[str], tasks: int) -> list[str]:
    """The most frequent statements per task (their first 90 characters after the log prefix)."""
    counts: dict[str, int] = {}
    for line in lines:
        key = line.split(": ", 2)[-1][:90]
        counts[key] = counts.get(key, 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])[:12]
    return [f"  {n / tasks:5.2f}  {text}" for text, n in ranked]


def commits(server: pgkit.PostgresServer, database: str) -> int:
    import subprocess

    out = subprocess.run([str(pgkit.BIN / "psql"), "-X", "-At", server.dsn(), "-c",
                          f"SELECT xact_commit FROM pg_stat_database WHERE datname = '{database}'"],
                         check=True, capture_output=True, text=True, timeout=60).stdout
    return int(out.strip())


def run(server: pgkit.PostgresServer, root: Path, replicas: int, tasks: int, clients: int,
        top: bool = False) -> dict[str, float]:
    database = f"bench_{replicas}"
    dsn = server.fresh_database(database)
    served: list[Served] = []
    try:
        for i in range(replicas):
            capsule = chaos_capsule(root / f"n{replicas}" / f"r{i}",
                                    lifecycle={"task_acceptance": "queue", "queue_depth": 10_000})
            served.append(start(capsule, root / f"n{replicas}" / f"s{i}", "--store", dsn))
        time.sleep(1.0)
        local = threading.local()

        def one(n: int) -> None:
            if not hasattr(local, "client"):
                local.client = httpx.Client()
            send(local.client, served[n % replicas].url, f"t{n}")

        with ThreadPoolExecutor(clients) as pool:
            list(pool.map(one, range(clients)))  # warm-up: sessions opened, connections made
            time.sleep(1.5)
            before_lines, before_commits = statement_lines(server, database), commits(server, database)
            before_statements = len(before_lines)
            began = time.monotonic()
            list(pool.map(one, range(clients, clients + tasks)))
            wall = time.monotonic() - began
        time.sleep(1.5)  # the statistics collector and the log catch up
        if top:
            print("\n".join(top_statements(statement_lines(server, database)[before_statements:], tasks)))
        return {"wall": wall, "tasks_per_s": tasks / wall,
                "statements": (statements(server, database) - before_statements) / tasks,
                "commits": (commits(server, database) - before_commits) / tasks}
    finally:
        for s in served:
            s.stop(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=150)
    parser.add_argument("--clients", type=int, default=24)
    parser.add_argument("--top", action="store_true", help="print the most frequent statements per task")
    args = parser.parse_args()
    reason = pgkit.missing_reason()
    if reason:
        sys.exit(reason)
    results: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="murmurd-bench-replicas-") as tmp, \
            pgkit.postgres_server("-c log_statement=all -c log_line_prefix=db=%d:") as server:
        for count in REPLICA_COUNTS:
            results[count] = run(server, Path(tmp), count, args.tasks, args.clients, args.top)
            r = results[count]
            print(f"{count} replica(s): {args.tasks} tasks in {r['wall']:.2f} s = {r['tasks_per_s']:.1f} tasks/s; "
                  f"per task {r['statements']:.1f} statements, {r['commits']:.1f} commits", flush=True)
    base = results[1]["tasks_per_s"]
    print("\n| replicas | tasks/s | vs 1 replica | DB statements per task | commits per task |")
    print("|---|---|---|---|---|")
    for count, r in results.items():
        print(f"| {count} | {r['tasks_per_s']:.1f} | {r['tasks_per_s'] / base:.2f}x | {r['statements']:.1f} | {r['commits']:.1f} |")


if __name__ == "__main__":
    main()
