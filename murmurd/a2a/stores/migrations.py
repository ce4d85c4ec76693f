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
    # One round trip for the two hot paths of replicas: appending stream events (ids committed in
    # id order under an advisory lock, announced with the events themselves when they fit in a
    # notification, else with the newest id) and claiming waiting tasks (context leases and task
    # owners in one transaction). See murmurd/a2a/replicas/.
    (2, r"""
CREATE FUNCTION murmurd_append_events(p_task TEXT[], p_type TEXT[], p_data TEXT[], p_final BOOLEAN[])
RETURNS BIGINT LANGUAGE plpgsql AS $$
DECLARE
    newest BIGINT;
    payload TEXT;
BEGIN
    PERFORM pg_advisory_xact_lock(1836413558);
    WITH added AS (
        INSERT INTO events (task_id, type, data, final)
        SELECT t, y, d, f FROM unnest(p_task, p_type, p_data, p_final) WITH ORDINALITY AS x(t, y, d, f, n) ORDER BY n
        RETURNING id, task_id, type, data, final)
    SELECT max(id), '[' || string_agg('[' || id || ',' || to_json(task_id) || ',' || to_json(type) || ','
                                      || final::text || ',' || data || ']', ',' ORDER BY id) || ']'
    INTO newest, payload FROM added;
    IF octet_length(payload) <= 7900 THEN
        PERFORM pg_notify('murmurd_events', payload);
    ELSE
        PERFORM pg_notify('murmurd_events', newest::text);
    END IF;
    RETURN newest;
END $$;

CREATE FUNCTION murmurd_claim(me TEXT, room INTEGER) RETURNS TABLE (kind TEXT, value TEXT)
LANGUAGE plpgsql AS $$
DECLARE
    waiting TEXT[];
    mine TEXT[];
    took TEXT[];
BEGIN
    SELECT coalesce(array_agg(w.context_id ORDER BY w.first), '{}') INTO waiting FROM (
        SELECT q.context_id, min(q.created_at) AS first FROM (
            SELECT t.context_id, t.created_at FROM tasks t WHERE t.state = 'submitted' AND t.owner IS NULL
            ORDER BY t.created_at, t.id LIMIT 200) q GROUP BY q.context_id) w;
    IF cardinality(waiting) = 0 THEN
        RETURN;
    END IF;
    -- leases held here: refreshed and row-locked, so an idle release cannot slip between
    WITH refreshed AS (
        UPDATE contexts c SET claimed_at = now() WHERE c.owner = me AND c.context_id = ANY(waiting)
        RETURNING c.context_id)
    SELECT coalesce(array_agg(r.context_id), '{}') INTO mine FROM refreshed r;
    RETURN QUERY SELECT DISTINCT 'wake'::TEXT, c.owner FROM contexts c JOIN replicas r ON r.id = c.owner
        WHERE c.context_id = ANY(waiting) AND c.owner <> me;
    IF room > 0 THEN
        WITH free AS (
            SELECT x.context_id FROM unnest(waiting) WITH ORDINALITY AS x(context_id, n)
            WHERE NOT x.context_id = ANY(mine) AND NOT EXISTS (
                SELECT 1 FROM contexts c JOIN replicas r ON r.id = c.owner WHERE c.context_id = x.context_id)
            ORDER BY x.n LIMIT room),
        leased AS (
            INSERT INTO contexts (context_id, owner) SELECT f.context_id, me FROM free f
            ON CONFLICT (context_id) DO UPDATE SET owner = excluded.owner, claimed_at = now()
            WHERE contexts.owner = excluded.owner OR NOT EXISTS (SELECT 1 FROM replicas WHERE id = contexts.owner)
            RETURNING contexts.context_id)
        SELECT coalesce(array_agg(l.context_id), '{}') INTO took FROM leased l;
        mine := mine || took;
    END IF;
    RETURN QUERY WITH claimed AS (
        UPDATE tasks t SET owner = me WHERE t.state = 'submitted' AND t.owner IS NULL AND t.context_id = ANY(mine)
        RETURNING t.created_at, t.id, t.record)
    SELECT 'task'::TEXT, claimed.record FROM claimed ORDER BY claimed.created_at, claimed.id;
END $$;
"""),
    # Arrival order from a sequence, not the clock: two tasks of one context stored within the
    # same millisecond still run in the order they were stored.
    (3, r"""
ALTER TABLE tasks ADD COLUMN arrival BIGSERIAL;
DROP INDEX tasks_waiting;
CREATE INDEX tasks_waiting ON tasks (arrival) WHERE state = 'submitted' AND owner IS NULL;

CREATE OR REPLACE FUNCTION murmurd_claim(me TEXT, room INTEGER) RETURNS TABLE (kind TEXT, value TEXT)
LANGUAGE plpgsql AS $$
DECLARE
    waiting TEXT[];
    mine TEXT[];
    took TEXT[];
BEGIN
    SELECT coalesce(array_agg(w.context_id ORDER BY w.first), '{}') INTO waiting FROM (
        SELECT q.context_id, min(q.arrival) AS first FROM (
            SELECT t.context_id, t.arrival FROM tasks t WHERE t.state = 'submitted' AND t.owner IS NULL
            ORDER BY t.arrival LIMIT 200) q GROUP BY q.context_id) w;
    IF cardinality(waiting) = 0 THEN
        RETURN;
    END IF;
    -- leases held here: refreshed and row-locked, so an idle release cannot slip between
    WITH refreshed AS (
        UPDATE contexts c SET claimed_at = now() WHERE c.owner = me AND c.context_id = ANY(waiting)
        RETURNING c.context_id)
    SELECT coalesce(array_agg(r.context_id), '{}') INTO mine FROM refreshed r;
    RETURN QUERY SELECT DISTINCT 'wake'::TEXT, c.owner FROM contexts c JOIN replicas r ON r.id = c.owner
        WHERE c.context_id = ANY(waiting) AND c.owner <> me;
    IF room > 0 THEN
        WITH free AS (
            SELECT x.context_id FROM unnest(waiting) WITH ORDINALITY AS x(context_id, n)
            WHERE NOT x.context_id = ANY(mine) AND NOT EXISTS (
                SELECT 1 FROM contexts c JOIN replicas r ON r.id = c.owner WHERE c.context_id = x.context_id)
            ORDER BY x.n LIMIT room),
        leased AS (
            INSERT INTO contexts (context_id, owner) SELECT f.context_id, me FROM free f
            ON CONFLICT (context_id) DO UPDATE SET owner = excluded.owner, claimed_at = now()
            WHERE contexts.owner = excluded.owner OR NOT EXISTS (SELECT 1 FROM replicas WHERE id = contexts.owner)
            RETURNING contexts.context_id)
        SELECT coalesce(array_agg(l.context_id), '{}') INTO took FROM leased l;
        mine := mine || took;
    END IF;
    RETURN QUERY WITH claimed AS (
        UPDATE tasks t SET owner = me WHERE t.state = 'submitted' AND t.owner IS NULL AND t.context_id = ANY(mine)
        RETURNING t.arrival, t.record)
    SELECT 'task'::TEXT, claimed.record FROM claimed ORDER BY claimed.arrival;
END $$;
"""),
    # A replica declared dead claims nothing: swept while alive (a pause, a partition), it could
    # otherwise take back the context and the queued task its survivor just handed on, before
    # its own heartbeat tells it it was swept.
    (4, r"""
CREATE OR REPLACE FUNCTION murmurd_claim(me TEXT, room INTEGER) RETURNS TABLE (kind TEXT, value TEXT)
LANGUAGE plpgsql AS $$
DECLARE
    waiting TEXT[];
    mine TEXT[];
    took TEXT[];
BEGIN
    IF NOT EXISTS (SELECT 1 FROM replicas WHERE id = me) THEN
        RETURN;  -- declared dead (swept): it claims nothing until it has registered again
    END IF;
    SELECT coalesce(array_agg(w.context_id ORDER BY w.first), '{}') INTO waiting FROM (
        SELECT q.context_id, min(q.arrival) AS first FROM (
            SELECT t.context_id, t.arrival FROM tasks t WHERE t.state = 'submitted' AND t.owner IS NULL
            ORDER BY t.arrival LIMIT 200) q GROUP BY q.context_id) w;
    IF cardinality(waiting) = 0 THEN
        RETURN;
    END IF;
    -- leases held here: refreshed and row-locked, so an idle release cannot slip between
    WITH refreshed AS (
        UPDATE contexts c SET claimed_at = now() WHERE c.owner = me AND c.context_id = ANY(waiting)
        RETURNING c.context_id)
    SELECT coalesce(array_agg(r.context_id), '{}') INTO mine FROM refreshed r;
    RETURN QUERY SELECT DISTINCT 'wake'::TEXT, c.owner FROM contexts c JOIN replicas r ON r.id = c.owner
        WHERE c.context_id = ANY(waiting) AND c.owner <> me;
    IF room > 0 THEN
        WITH free AS (
            SELECT x.context_id FROM unnest(waiting) WITH ORDINALITY AS x(context_id, n)
            WHERE NOT x.context_id = ANY(mine) AND NOT EXISTS (
                SELECT 1 FROM contexts c JOIN replicas r ON r.id = c.owner WHERE c.context_id = x.context_id)
            ORDER BY x.n LIMIT room),
        leased AS (
            INSERT INTO contexts (context_id, owner) SELECT f.context_id, me FROM free f
            ON CONFLICT (context_id) DO UPDATE SET owner = excluded.owner, claimed_at = now()
            WHERE contexts.owner = excluded.owner OR NOT EXISTS (SELECT 1 FROM replicas WHERE id = contexts.owner)
            RETURNING contexts.context_id)
        SELECT coalesce(array_agg(l.context_id), '{}') INTO took FROM leased l;
        mine := mine || took;
    END IF;
    RETURN QUERY WITH claimed AS (
        UPDATE tasks t SET owner = me WHERE t.state = 'submitted' AND t.owner IS NULL AND t.context_id = ANY(mine)
        RETURNING t.arrival, t.record)
    SELECT 'task'::TEXT, claimed.record FROM claimed ORDER BY claimed.arrival;
END $$;
"""),
    # Secrets every replica shares: the stream-ticket key, so a browser's ticket minted on one
    # replica opens its stream on another (a load balancer sends the two requests anywhere).
    (5, """
CREATE TABLE shared_secrets (
    name TEXT PRIMARY KEY,
    value BYTEA NOT NULL
);
"""),
    # Issue 21: the creating credential in a column of its own, so a peer's listing filters on it
    # without casting the record to jsonb (which refuses the `\u0000` any text part may hold), and
    # each context's members (every credential that created a task in it), kept when its tasks
    # are pruned: a context's owner is recorded with the context, not only with its tasks. The
    # backfill reads each record apart, so one record jsonb refuses leaves only its own NULL.
    (6, r"""
ALTER TABLE tasks ADD COLUMN principal TEXT;
DO $$
DECLARE
    r RECORD;
BEGIN
    FOR r IN SELECT id, record FROM tasks LOOP
        BEGIN
            UPDATE tasks SET principal = replace(r.record, '\u0000', '\ufffd')::jsonb ->> 'principal' WHERE id = r.id;
        EXCEPTION WHEN others THEN
            NULL;
        END;
    END LOOP;
END $$;
CREATE INDEX tasks_by_principal ON tasks (principal, state);
CREATE TABLE context_members (
    context_id TEXT NOT NULL,
    principal TEXT NOT NULL,
    PRIMARY KEY (context_id, principal)
);
INSERT INTO context_members (context_id, principal)
    SELECT DISTINCT context_id, coalesce(principal, '') FROM tasks ON CONFLICT DO NOTHING;
"""),
)
