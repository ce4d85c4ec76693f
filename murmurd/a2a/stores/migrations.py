"""The PostgreSQL schema, as numbered migrations applied once each on start.

`schema_migrations` records what was applied; a replica starting takes an advisory lock first,
so replicas starting together never apply one step twice. A new step is appended, never edited.
"""

from __future__ import annotations

MIGRATIONS: tuple[tuple[int, str], ...] = (
    (1, """
CREATE TABLE tasks (
    id TEXT PRIMARY KEY,
    context_id TEXT NOT NULL,
    state TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    record TEXT NOT NULL,
    owner TEXT
);
CREATE INDEX tasks_by_context ON tasks (context_id, updated_at);
CREATE INDEX tasks_by_updated ON tasks (updated_at);
CREATE INDEX tasks_by_state ON tasks (state);
CREATE INDEX tasks_by_owner ON tasks (owner) WHERE owner IS NOT NULL;
CREATE INDEX tasks_waiting ON tasks (created_at) WHERE state = 'submitted' AND owner IS NULL;

CREATE TABLE histories (
    context_id TEXT PRIMARY KEY,
    messages TEXT NOT NULL,
    updated_at BIGINT NOT NULL
);

CREATE TABLE events (
    id BIGSERIAL PRIMARY KEY,
    task_id TEXT NOT NULL,
    type TEXT NOT NULL,
    data TEXT NOT NULL,
    final BOOLEAN NOT NULL DEFAULT FALSE
);

CREATE TABLE replicas (
    id TEXT PRIMARY KEY,
    url TEXT,
    started_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    heartbeat_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE contexts (
    context_id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    claimed_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX contexts_by_owner ON contexts (owner);

CREATE TABLE inbox (
    id BIGSERIAL PRIMARY KEY,
    replica TEXT NOT NULL,
    kind TEXT NOT NULL,
    task_id TEXT NOT NULL,
    body TEXT NOT NULL
);
"""),
)
