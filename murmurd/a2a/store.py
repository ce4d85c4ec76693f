"""The task store names, where they were before the backends moved to `murmurd.a2a.stores`."""

from murmurd.a2a.stores.base import (
    INTERRUPTED_MESSAGE,
    NO_RETENTION,
    Retention,
    TaskStore,
    TaskStoreError,
    prune_periodically,
)
from murmurd.a2a.stores.memory import MemoryTaskStore
from murmurd.a2a.stores.sqlite import DEFAULT_FILENAME, SqliteTaskStore

__all__ = ["DEFAULT_FILENAME", "INTERRUPTED_MESSAGE", "NO_RETENTION", "MemoryTaskStore", "Retention",
           "SqliteTaskStore", "TaskStore", "TaskStoreError", "prune_periodically"]
