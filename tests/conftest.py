"""Shared fixtures: one component host per test session, and examples built once per run."""

from __future__ import annotations

from typing import Any

import secrets
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from murmurd.a2a.stores.base import TaskStore
from murmurd.a2a.stores.memory import MemoryTaskStore
from murmurd.a2a.stores.postgres import PostgresTaskStore
from murmurd.a2a.stores.sqlite import SqliteTaskStore
from murmurd.authoring.build import build_artifact
from murmurd.host import ComponentHost
from murmurd.host.workers.processes import start_workers

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
FIXTURES = Path(__file__).resolve().parent / "fixtures"

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pgkit  # noqa: E402  (tests/ is on the path only from here on)


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def host() -> Iterator[ComponentHost]:
    """A host sharing the machine's compile cache (content-addressed, safe to share)."""
    component_host = ComponentHost()
    yield component_host
    component_host.close()


@pytest.fixture(scope="session")
def worker_host() -> Iterator[ComponentHost]:
    """A host whose tool and driver calls run in a WASM worker process, as `murmurd serve`
    runs them (murmurd/host/workers/)."""
    component_host = ComponentHost()
    start_workers(component_host, 1)
    yield component_host
    component_host.close()


@pytest.fixture
def workers() -> Iterator[ComponentHost]:
    """A host of its own with one worker process (a test may kill or stop its worker)."""
    component_host = ComponentHost()
    start_workers(component_host, 1)
    yield component_host
    component_host.close()


class Artifacts:
    """Builds Python artifacts on first use (through the build cache) and remembers them."""

    def __init__(self) -> None:
        self._built: dict[Path, Path] = {}

    def wasm(self, directory: Path) -> Path:
        if directory not in self._built:
            self._built[directory] = build_artifact(directory).output
        return self._built[directory]

    def example(self, name: str) -> Path:
        return self.wasm(EXAMPLES / name)

    def fixture(self, name: str) -> Path:
        return self.wasm(FIXTURES / name)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless Chromium for one test module: Debian's binary driven by Playwright
    (tests/browserkit.py; nothing is downloaded)."""
    from browserkit import chromium  # imported here: browserkit imports this module

    with chromium() as launched:
        yield launched


@pytest.fixture(scope="session")
def artifacts() -> Artifacts:
    return Artifacts()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[pgkit.PostgresServer]:
    """One real PostgreSQL 15 for the whole test session (tests/pgkit.py); skipped, saying why,
    only when its server binaries are not installed."""
    reason = pgkit.missing_reason()
    if reason is not None:
        pytest.skip(reason)
    with pgkit.postgres_server() as server:
        yield server


@pytest.fixture
def postgres_dsn(postgres_server: pgkit.PostgresServer) -> str:
    """A fresh, empty database for one test; its URL."""
    return postgres_server.fresh_database(f"t_{secrets.token_hex(6)}")


STORE_KINDS = ["memory", "sqlite", "postgres"]


@pytest.fixture(params=STORE_KINDS)
async def task_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[TaskStore]:
    """Each `TaskStore` backend in turn: memory, SQLite in tmp_path, a fresh PostgreSQL database."""
    store: TaskStore
    if request.param == "postgres":
        store = await PostgresTaskStore.open(request.getfixturevalue("postgres_dsn"), "replica-test")
    elif request.param == "sqlite":
        store = await SqliteTaskStore.open(tmp_path / "nested" / "tasks.sqlite3")
    else:
        store = MemoryTaskStore()
    yield store
    await store.close()
