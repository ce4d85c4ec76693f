"""A real PostgreSQL 15 for the tests: one server per test session, a fresh database per test.

PostgreSQL refuses to run as root, and the tests run as root: `initdb` and `pg_ctl` run as an
unprivileged user (`nobody` when we are root) through `setpriv`, with the data directory in a
temporary directory that user owns. The server listens on a free loopback port only.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


def _server_bin() -> Path:
    """PostgreSQL 15's binaries (what .ci/run installs), else the newest installed version's."""
    if os.environ.get("MURMURD_PG_BIN"):
        return Path(os.environ["MURMURD_PG_BIN"])
    preferred = Path("/usr/lib/postgresql/15/bin")
    if (preferred / "initdb").is_file():
        return preferred
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name)
                   if p.parent.parent.name.isdigit() else 0)
    return found[-1].parent if found else preferred


BIN = _server_bin()
RUN_AS = "nobody"  # any unprivileged account will do; created (as `murmurd-pg`) when missing
FALLBACK_USER = "murmurd-pg"


def missing_reason() -> str | None:
    """Why no PostgreSQL can be started here (None: it can)."""
    for tool in ("initdb", "pg_ctl", "postgres", "psql"):
        if not (BIN / tool).is_file():
            return f"PostgreSQL 15 server binaries are not installed ({BIN / tool} is missing; .ci/run installs postgresql-15)"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _run_user() -> tuple[int, int]:
    """(uid, gid) of the unprivileged account PostgreSQL runs as (only asked when we are root)."""
    import pwd

    for name in (RUN_AS, FALLBACK_USER):
        try:
            user = pwd.getpwnam(name)
            return user.pw_uid, user.pw_gid
        except KeyError:
            continue
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", FALLBACK_USER],
                   check=True, capture_output=True, timeout=60)
    user = pwd.getpwnam(FALLBACK_USER)
    return user.pw_uid, user.pw_gid


def _as_user(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    uid, gid = _run_user()
    return ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--", *argv]


@dataclass
class PostgresServer:
    root: Path
    port: int

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def admin(self, sql: str) -> None:
        """Run one statement in the `postgres` database (psql: callable inside a running loop)."""
        subprocess.run([str(BIN / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", self.dsn(), "-c", sql],
                       check=True, capture_output=True, timeout=60)

    def fresh_database(self, name: str) -> str:
        self.admin(f'CREATE DATABASE "{name}"')
        return self.dsn(name)


@contextmanager
def postgres_server(extra_options: str = "") -> Iterator[PostgresServer]:
    """Start one server (`extra_options`: more `-c name=value` settings; pg_ctl hands them to a
    shell, so no spaces or shell characters in values)."""
    root = Path(tempfile.mkdtemp(prefix="murmurd-pg-"))
    data = root / "data"
    if os.geteuid() == 0:
        os.chown(root, *_run_user())
    os.chmod(root, 0o700)
    port = _free_port()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}
    subprocess.run(_as_user([str(BIN / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
                             "--no-sync"]), check=True, capture_output=True, env=env, timeout=120, cwd=root)
    options = (f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={root} "
               "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200 " + extra_options)
    try:  # stopped below even when the start times out half-way
        subprocess.run(_as_user([str(BIN / "pg_ctl"), "-D", str(data), "-l", str(root / "server.log"), "-o",
                                 options, "-w", "-t", "60", "start"]), check=True, capture_output=True, env=env,
                       timeout=90, cwd=root)
        yield PostgresServer(root, port)
    finally:
        subprocess.run(_as_user([str(BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "-t", "30", "stop"]),
                       capture_output=True, env=env, timeout=60, cwd=root)
        shutil.rmtree(root, ignore_errors=True)
