"""Task store backends behind one protocol (`base.TaskStore`), and choosing one from `--store`."""

from __future__ import annotations

from concurrent.futures import Executor
from pathlib import Path

from murmurd.a2a.stores.base import Retention, TaskStore, TaskStoreError, redact
from murmurd.a2a.stores.sqlite import DEFAULT_FILENAME, SqliteTaskStore

STORE_ENV = "MURMURD_STORE"
POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def is_postgres(location: str | None) -> bool:
    return location is not None and location.startswith(POSTGRES_SCHEMES)


def check_location(location: str) -> str:
    """`--store` takes a PostgreSQL URL or `sqlite` (the state directory's file); anything else
    is refused with what is accepted."""
    if location == "sqlite" or is_postgres(location):
        return location
    raise TaskStoreError(f"--store {redact(location)!r} is not a store: pass postgresql://user@host/db or sqlite")


async def open_store(location: str | None, state_dir: Path, retention: Retention, replica_id: str, *,
                     executor: Executor | None = None) -> TaskStore:
    """The store `location` names (None or `sqlite`: the state directory's SQLite file, run on
    `executor`'s thread if given)."""
    if location is None or check_location(location) == "sqlite":
        return await SqliteTaskStore.open(Path(state_dir) / DEFAULT_FILENAME, retention, executor=executor)
    from murmurd.a2a.stores.postgres import PostgresTaskStore  # asyncpg only where it is used

    return await PostgresTaskStore.open(location, replica_id, retention)


__all__ = ["STORE_ENV", "TaskStore", "TaskStoreError", "check_location", "is_postgres", "open_store"]
