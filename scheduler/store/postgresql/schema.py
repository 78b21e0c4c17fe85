"""The job store's tables on PostgreSQL: the same columns, in the same shapes, as SQLite's
(sqlite/schema.py), so that both read their rows with the same conversions (sqlite/rows.py):
times as BIGINT microseconds since the epoch, documents as JSON text, booleans as integers.
Text that is sorted or compared by range sorts by bytes (COLLATE "C"), as SQLite's does.

The schema is versioned: MIGRATIONS[n] brings a database at version n to n + 1. `migrate`
applies those missing, under a transaction-scoped advisory lock, so that any number of
instances opening at once apply each exactly once."""

from __future__ import annotations

from typing import Any

# Serialises the migrations of one database (advisory locks are per database): an arbitrary
# constant of tickd's own.
MIGRATION_LOCK = 0x7469636B64  # "tickd"

T = 'TEXT COLLATE "C"'

MIGRATIONS = [
    f"""
CREATE TABLE jobs (
    id {T} PRIMARY KEY,
    name {T} NOT NULL UNIQUE,
    handler {T} NOT NULL,
    params TEXT NOT NULL,
    schedule TEXT NOT NULL,
    enabled INTEGER NOT NULL,
    next_run_at BIGINT,
    timeout_seconds DOUBLE PRECISION NOT NULL,
    max_retries INTEGER NOT NULL,
    priority INTEGER NOT NULL,
    misfire TEXT NOT NULL,
    jitter_seconds DOUBLE PRECISION NOT NULL,
    lease_owner {T},
    lease_token BIGINT,
    lease_until BIGINT,
    fence BIGINT NOT NULL,
    revision INTEGER NOT NULL,
    consecutive_failures INTEGER NOT NULL,
    paused_reason TEXT,
    last_execution TEXT,
    system INTEGER NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    redrive TEXT,
    shards INTEGER NOT NULL DEFAULT 1,
    managed_by {T}
) WITH (fillfactor = 80);
-- The due read seeks this index once per priority: free, enabled jobs by urgency.
CREATE INDEX jobs_due ON jobs (priority, next_run_at) WHERE enabled = 1 AND lease_token IS NULL;
CREATE INDEX jobs_next ON jobs (next_run_at) WHERE enabled = 1 AND lease_token IS NULL;
CREATE INDEX jobs_leased ON jobs (lease_until) WHERE lease_token IS NOT NULL;
CREATE INDEX jobs_by_handler ON jobs (handler, name);
CREATE INDEX jobs_by_next_run ON jobs (next_run_at, name);
CREATE INDEX jobs_by_last_status ON jobs (((last_execution::jsonb) ->> 'status'), name);
CREATE INDEX jobs_failing ON jobs (consecutive_failures DESC, name)
    WHERE consecutive_failures > 0;

CREATE TABLE executions (
    id {T} PRIMARY KEY,
    job_id {T} NOT NULL,
    job_name {T} NOT NULL,
    handler {T} NOT NULL,
    scheduled_at BIGINT NOT NULL,
    started_at BIGINT,
    finished_at BIGINT,
    duration_ms DOUBLE PRECISION,
    status {T} NOT NULL,
    attempts INTEGER NOT NULL,
    error TEXT,
    result TEXT,
    owner {T},
    token BIGINT,
    dead_letter {T},
    shard INTEGER NOT NULL DEFAULT 0,
    shards INTEGER NOT NULL DEFAULT 1,
    requested {T},
    attempt_log TEXT,
    log TEXT
);
CREATE INDEX executions_by_job ON executions (job_id, scheduled_at DESC, id DESC);
CREATE INDEX executions_by_time ON executions (scheduled_at DESC, id DESC);
CREATE INDEX executions_by_status ON executions (status, scheduled_at DESC);
-- The dead-letter listings and the gauge read only these few rows.
CREATE INDEX executions_dead ON executions (dead_letter, scheduled_at DESC, id DESC)
    WHERE dead_letter IS NOT NULL;
-- Pruning by age walks this index, oldest first.
CREATE INDEX executions_by_finish ON executions (finished_at);

CREATE TABLE job_changes (
    id {T} PRIMARY KEY,
    job_id {T} NOT NULL,
    job_name {T} NOT NULL,
    at BIGINT NOT NULL,
    actor {T} NOT NULL,
    action {T} NOT NULL,
    changes TEXT NOT NULL
);
CREATE INDEX job_changes_by_job ON job_changes (job_id, at DESC, id DESC);
CREATE INDEX job_changes_by_time ON job_changes (at);

CREATE TABLE run_requests (
    id {T} PRIMARY KEY,
    job_id {T} NOT NULL,
    scheduled_at BIGINT NOT NULL,
    reason {T} NOT NULL,
    not_before BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    redrives INTEGER NOT NULL DEFAULT 0,
    -- The token of the run a plain request is being run by (it stays queued until its end).
    taken BIGINT,
    claimed_next_run_at BIGINT,
    shard INTEGER,
    shards INTEGER,
    -- Shard entries of occurrences in progress (ports.RunRequest).
    occurrence BIGINT,
    revision INTEGER NOT NULL DEFAULT 0,
    advance_from BIGINT,
    lease_owner {T},
    lease_token BIGINT,
    lease_until BIGINT,
    fence BIGINT NOT NULL DEFAULT 0,
    ended TEXT
);
CREATE INDEX run_requests_due ON run_requests (not_before);
CREATE INDEX run_requests_by_job ON run_requests (job_id, scheduled_at);
CREATE INDEX run_requests_by_occurrence ON run_requests (job_id, occurrence)
    WHERE occurrence IS NOT NULL;

-- Requests to stop a running or queued execution, found by the instance running it.
CREATE TABLE cancel_requests (
    execution_id {T} PRIMARY KEY,
    requested_by {T} NOT NULL,
    reason TEXT NOT NULL,
    requested_at BIGINT NOT NULL
);

CREATE TABLE instances (
    id {T} PRIMARY KEY,
    beat_at BIGINT NOT NULL
);

-- The outbox: execution events written in the transaction of their execution's change, until
-- the relay has them delivered. `seq` is the order they were written in.
CREATE TABLE outbox (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id {T} NOT NULL UNIQUE,
    job_id {T} NOT NULL,
    event TEXT NOT NULL,
    written_at BIGINT NOT NULL,
    sent_at BIGINT
);
CREATE INDEX outbox_unsent ON outbox (seq) WHERE sent_at IS NULL;
CREATE INDEX outbox_sent ON outbox (sent_at) WHERE sent_at IS NOT NULL;
""",
    f"""
-- The due queue's partitions (scheduler/partitions.py): P rows, made at the first open.
CREATE TABLE partitions (
    part INTEGER PRIMARY KEY,
    owner {T},
    epoch BIGINT NOT NULL
);
-- What each instance says of itself at its beats (JSON), for ops.
ALTER TABLE instances ADD COLUMN status TEXT;
-- Each job's partition (partition_of: CRC-32 of its id, which PostgreSQL has no function for,
-- so tickd writes it); the claims of an instance read only the partitions it holds. NULL for
-- a job an older tickd wrote until the next open sets it: every instance reads those.
ALTER TABLE jobs ADD COLUMN part INTEGER;
""",
    f"""
-- The team or tenant each job belongs to (scheduler/domains.py): the jobs written before are
-- in the default one. The jobs list filters by it, in name order.
ALTER TABLE jobs ADD COLUMN domain {T} NOT NULL DEFAULT 'default';
CREATE INDEX jobs_by_domain ON jobs (domain, name);
""",
    f"""
-- Each domain's settings (scheduler/domain_settings.py): a row a domain that has a record; one
-- without a row has the defaults.
CREATE TABLE domains (
    name {T} PRIMARY KEY,
    weight INTEGER NOT NULL,
    max_running INTEGER,
    max_jobs INTEGER,
    lag_objective_seconds DOUBLE PRECISION,
    updated_at BIGINT
);
""",
    """
-- A due read of some domains can seek this index as the others seek jobs_due: it then walks
-- only their jobs, however many of another domain are due.
CREATE INDEX jobs_due_by_domain ON jobs (domain, priority, next_run_at)
    WHERE enabled = 1 AND lease_token IS NULL;
""",
    f"""
-- Each job's concurrency key and limit (scheduler/keys.py): NULL for the jobs written before,
-- which name none.
ALTER TABLE jobs ADD COLUMN concurrency_key {T};
ALTER TABLE jobs ADD COLUMN concurrency_limit INTEGER;
-- The leases of some keys, counted (running_by_key): only the leased jobs that name a key.
CREATE INDEX jobs_keyed_leased ON jobs (concurrency_key)
    WHERE concurrency_key IS NOT NULL AND lease_token IS NOT NULL;
""",
]
VERSION = len(MIGRATIONS)

_VERSIONS = """
CREATE TABLE IF NOT EXISTS schema_version (
    version INTEGER PRIMARY KEY,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
)
"""


async def migrate(db: Any) -> int:
    """Bring the database on connection `db` (an asyncpg connection) up to VERSION, in one
    transaction holding MIGRATION_LOCK: an instance that waited on another's migration finds
    it done. Returns the version the database was at. A database newer than this tickd is
    left as it is (its columns are a superset of ours)."""
    async with db.transaction():
        await db.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK)
        await db.execute(_VERSIONS)
        found = int(await db.fetchval("SELECT coalesce(max(version), 0) FROM schema_version"))
        for version in range(found, VERSION):
            await db.execute(MIGRATIONS[version])
            await db.execute("INSERT INTO schema_version (version) VALUES ($1)", version + 1)
        return found
