"""The stream-ticket key every replica on one database shares.

A browser mints a stream ticket with one request and opens the stream with the next; behind a
load balancer the two land on any replica, so each replica must verify what another signed. The
first replica to start writes a random key; every later one reads that one. The key sits beside
the tasks it guards: whoever can read the database can already read every task.
"""

from __future__ import annotations

import secrets

import asyncpg

from murmurd.a2a.stores.base import TaskStoreError

KEY_NAME = "stream-ticket-key"


async def shared_ticket_key(pool: asyncpg.Pool, size: int) -> bytes:
    """The database's ticket key of at least `size` bytes (what the edge's ticket signer needs),
    written now when no replica has written one. Two statements:
    after a conflicting insert waited for another replica's commit, a fresh read sees its key."""
    try:
        await pool.execute("INSERT INTO shared_secrets (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
                           KEY_NAME, secrets.token_bytes(size))
        row = await pool.fetchrow("SELECT value FROM shared_secrets WHERE name = $1", KEY_NAME)
    except (asyncpg.PostgresError, OSError) as exc:
        raise TaskStoreError(f"cannot read the replicas' shared stream-ticket key: {exc}") from None
    key = bytes(row["value"]) if row is not None else b""
    if len(key) < size:
        raise TaskStoreError(f"the shared stream-ticket key in the database is {len(key)} bytes; "
                         f"at least {size} are needed (delete the row {KEY_NAME!r} of shared_secrets)")
    return key
