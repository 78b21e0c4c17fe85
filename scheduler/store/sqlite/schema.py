"""The job store's tables on SQLite: the schema, the columns added since the first one (added
at open), and the column lists the other parts write and read."""

from __future__ import annotations

import sqlite3

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    handler TEXT NOT NULL,
    params TEXT NOT NULL,
    schedule TEXT NOT NULL,
    enabled INTEGER NOT NULL,
    next_run_at INTEGER,
    timeout_seconds REAL NOT NULL,
    max_retries INTEGER NOT NULL,
    priority INTEGER NOT NULL,
    misfire TEXT NOT NULL,
    jitter_seconds REAL NOT NULL,
    lease_owner TEXT,
    lease_token INTEGER,
    lease_until INTEGER,
    fence INTEGER NOT NULL,
    revision INTEGER NOT NULL,
    consecutive_failures INTEGER NOT NULL,
    paused_reason TEXT,
    last_execution TEXT,
    system INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    redrive TEXT
);
-- The due query walks this index in order: free, enabled jobs by urgency.
CREATE INDEX IF NOT EXISTS jobs_due ON jobs (priority, next_run_at)
    WHERE enabled = 1 AND lease_token IS NULL;
CREATE INDEX IF NOT EXISTS jobs_next ON jobs (next_run_at)
    WHERE enabled = 1 AND lease_token IS NULL;
CREATE INDEX IF NOT EXISTS jobs_leased ON jobs (lease_until) WHERE lease_token IS NOT NULL;

CREATE TABLE IF NOT EXISTS executions (
    id TEXT PRIMARY KEY,
    job_id TEXT NOT NULL,
    job_name TEXT NOT NULL,
    handler TEXT NOT NULL,
    scheduled_at INTEGER NOT NULL,
    started_at INTEGER,
    finished_at INTEGER,
    duration_ms REAL,
    status TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    error TEXT,
    result TEXT,
    owner TEXT,
    token INTEGER,
    dead_letter TEXT
);
CREATE INDEX IF NOT EXISTS executions_by_job ON executions (job_id, scheduled_at DESC, id DESC);
CREATE INDEX IF NOT EXISTS executions_by_time ON executions (scheduled_at DESC, id DESC);
CREATE INDEX IF NOT EXISTS executions_by_status ON executions (status, scheduled_at DESC);

CREATE TABLE IF NOT EXISTS job_changes (
    id TEXT PRIMARY KEY,
    job_id TEXT NOT NULL,
    job_name TEXT NOT NULL,
    at INTEGER NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    changes TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS job_changes_by_job ON job_changes (job_id, at DESC, id DESC);

CREATE TABLE IF NOT EXISTS run_requests (
    id TEXT PRIMARY KEY,
    job_id TEXT NOT NULL,
    scheduled_at INTEGER NOT NULL,
    reason TEXT NOT NULL,
    not_before INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    redrives INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS run_requests_due ON run_requests (not_before);

-- Requests to stop a running or queued execution, found by the instance running it.
CREATE TABLE IF NOT EXISTS cancel_requests (
    execution_id TEXT PRIMARY KEY,
    requested_by TEXT NOT NULL,
    reason TEXT NOT NULL,
    requested_at INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS instances (
    id TEXT PRIMARY KEY,
    beat_at INTEGER NOT NULL
);

-- The due queue's partitions (scheduler/partitions.py): P rows, made with the database.
CREATE TABLE IF NOT EXISTS partitions (
    part INTEGER PRIMARY KEY,
    owner TEXT,
    epoch INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS run_requests_by_job ON run_requests (job_id, scheduled_at);

-- The outbox: execution events written in the transaction of their execution's change, until
-- the relay has them delivered. `seq` is the order they were written in.
CREATE TABLE IF NOT EXISTS outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    job_id TEXT NOT NULL,
    event TEXT NOT NULL,
    written_at INTEGER NOT NULL,
    sent_at INTEGER
);
CREATE INDEX IF NOT EXISTS outbox_unsent ON outbox (seq) WHERE sent_at IS NULL;
CREATE INDEX IF NOT EXISTS outbox_sent ON outbox (sent_at) WHERE sent_at IS NOT NULL;

-- Each domain's settings (scheduler/domain_settings.py): a row a domain that has a record; one
-- without a row has the defaults. A database made before gets the table at its next open.
CREATE TABLE IF NOT EXISTS domains (
    name TEXT PRIMARY KEY,
    weight INTEGER NOT NULL,
    max_running INTEGER,
    max_jobs INTEGER,
    lag_objective_seconds REAL,
    updated_at INTEGER
);
"""
# Columns added since the first schema, with their type: a database made before gets them at
# open (ADD COLUMN), then the indexes that use them (LATE_SCHEMA).
ADDED_COLUMNS = {
    "instances": [("status", "TEXT")],
    "jobs": [
        ("redrive", "TEXT"),
        ("shards", "INTEGER NOT NULL DEFAULT 1"),
        ("managed_by", "TEXT"),
        # The jobs of a database made before domains are in the default one (DEFAULT_DOMAIN).
        ("domain", "TEXT NOT NULL DEFAULT 'default'"),
        # Both NULL for the jobs of a database made before keys: they name none.
        ("concurrency_key", "TEXT"),
        ("concurrency_limit", "INTEGER"),
    ],
    "executions": [
        ("dead_letter", "TEXT"),
        ("shard", "INTEGER NOT NULL DEFAULT 0"),
        ("shards", "INTEGER NOT NULL DEFAULT 1"),
        ("requested", "TEXT"),
        ("attempt_log", "TEXT"),
        ("log", "TEXT"),
    ],
    "run_requests": [
        ("redrives", "INTEGER NOT NULL DEFAULT 0"),
        # The token of the run a plain request is being run by (it stays queued until its end).
        ("taken", "INTEGER"),
        ("claimed_next_run_at", "INTEGER"),
        ("shard", "INTEGER"),
        ("shards", "INTEGER"),
        # Shard entries of occurrences in progress (ports.RunRequest).
        ("occurrence", "INTEGER"),
        ("revision", "INTEGER NOT NULL DEFAULT 0"),
        ("advance_from", "INTEGER"),
        ("lease_owner", "TEXT"),
        ("lease_token", "INTEGER"),
        ("lease_until", "INTEGER"),
        ("fence", "INTEGER NOT NULL DEFAULT 0"),
        ("ended", "TEXT"),
    ],
}
LATE_SCHEMA = """
-- The dead-letter listings and the gauge read only these few rows.
CREATE INDEX IF NOT EXISTS executions_dead ON executions (dead_letter, scheduled_at DESC, id DESC)
    WHERE dead_letter IS NOT NULL;
-- Pruning by age walks this index, oldest first.
CREATE INDEX IF NOT EXISTS executions_by_finish ON executions (finished_at);
CREATE INDEX IF NOT EXISTS job_changes_by_time ON job_changes (at);
CREATE INDEX IF NOT EXISTS run_requests_by_occurrence ON run_requests (job_id, occurrence)
    WHERE occurrence IS NOT NULL;
-- A due read of one domain seeks only its jobs here, as the others seek jobs_due.
CREATE INDEX IF NOT EXISTS jobs_due_by_domain ON jobs (domain, priority, next_run_at)
    WHERE enabled = 1 AND lease_token IS NULL;
-- The leases of some keys, counted (running_by_key): only the leased jobs that name a key.
CREATE INDEX IF NOT EXISTS jobs_keyed_leased ON jobs (concurrency_key)
    WHERE concurrency_key IS NOT NULL AND lease_token IS NOT NULL;
"""
# Dead letters that pruning must keep (DeadLetter.unhandled), as SQL.
UNHANDLED = "('open', 'redriving')"

JOB_COLUMNS = [
    "id",
    "name",
    "handler",
    "params",
    "schedule",
    "enabled",
    "next_run_at",
    "timeout_seconds",
    "max_retries",
    "priority",
    "misfire",
    "jitter_seconds",
    "lease_owner",
    "lease_token",
    "lease_until",
    "fence",
    "revision",
    "consecutive_failures",
    "paused_reason",
    "last_execution",
    "system",
    "created_at",
    "updated_at",
    "redrive",
    "shards",
    "managed_by",
    "domain",
    "concurrency_key",
    "concurrency_limit",
]
EXECUTION_COLUMNS = [
    "id",
    "job_id",
    "job_name",
    "handler",
    "scheduled_at",
    "started_at",
    "finished_at",
    "duration_ms",
    "status",
    "attempts",
    "error",
    "result",
    "owner",
    "token",
    "dead_letter",
    "shard",
    "shards",
    "requested",
    "attempt_log",
    "log",
]
CHANGE_COLUMNS = ["id", "job_id", "job_name", "at", "actor", "action", "changes"]
DOMAIN_COLUMNS = [
    "name", "weight", "max_running", "max_jobs", "lag_objective_seconds", "updated_at",
]  # fmt: skip
REQUEST_COLUMNS = [
    "id", "job_id", "scheduled_at", "reason", "not_before", "created_at", "redrives", "shard",
    "shards", "occurrence", "revision", "advance_from", "lease_owner", "lease_token",
    "lease_until", "fence", "ended", "claimed_next_run_at",
]  # fmt: skip
# What ops may change of a job; the lease, fence and run state are the engine's.
DEFINITION_COLUMNS = [
    "name",
    "handler",
    "params",
    "schedule",
    "enabled",
    "next_run_at",
    "timeout_seconds",
    "max_retries",
    "priority",
    "misfire",
    "jitter_seconds",
    "consecutive_failures",
    "paused_reason",
    "system",
    "updated_at",
    "redrive",
    "shards",
    "managed_by",
    "domain",
    "concurrency_key",
    "concurrency_limit",
]
JSON_COLUMNS = {
    "params", "schedule", "misfire", "last_execution", "error", "result", "changes", "redrive",
    "ended", "attempt_log", "log",
}  # fmt: skip
TIME_COLUMNS = {
    "next_run_at",
    "lease_until",
    "created_at",
    "updated_at",
    "scheduled_at",
    "started_at",
    "finished_at",
    "at",
    "not_before",
    "advance_from",
    "claimed_next_run_at",
}
FREE = "enabled = 1 AND lease_token IS NULL"


def add_missing_columns(db: sqlite3.Connection) -> None:
    """Bring a database made by an older tickd up to the schema (see ADDED_COLUMNS)."""
    for table, columns in ADDED_COLUMNS.items():
        present = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        for column, kind in columns:
            if column not in present:
                db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
    db.executescript(LATE_SCHEMA)
