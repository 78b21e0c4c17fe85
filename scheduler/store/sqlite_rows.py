"""The job store's tables on SQLite: the schema, and how jobs, executions, history entries and run
requests become rows and back. Times are integer microseconds since the epoch."""

from __future__ import annotations

import dataclasses
import functools
import json
import operator
import sqlite3
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from tickd.scheduler.codec import (
    EPOCH,
    Doc,
    attempt_to_doc,
    error_to_doc,
    exact_micros,
    execution_from_doc,
    job_to_doc,
    micros,
    misfire_from_doc,
    redrive_from_doc,
    request_from_doc,
    request_to_doc,
    schedule_from_doc,
    summary_from_doc,
    summary_to_doc,
    to_json_ready,
)
from tickd.scheduler.events import event_time, execution_event
from tickd.scheduler.model import (
    Execution,
    ExecutionSummary,
    Job,
    Lease,
    Misfire,
    Priority,
    RedrivePolicy,
    Schedule,
    Status,
)
from tickd.scheduler.ports import (
    ENDED_LEASE_UNTIL,
    Advance,
    ExecutionQuery,
    JobChange,
    JobQuery,
    OutboxEvent,
    RunRequest,
)

T = TypeVar("T")

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

CREATE TABLE IF NOT EXISTS instances (
    id TEXT PRIMARY KEY,
    beat_at INTEGER NOT NULL
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
"""
# Columns added since the first schema, with their type: a database made before gets them at
# open (ADD COLUMN), then the indexes that use them (LATE_SCHEMA).
ADDED_COLUMNS = {
    "jobs": [("redrive", "TEXT"), ("shards", "INTEGER NOT NULL DEFAULT 1"), ("managed_by", "TEXT")],
    "executions": [
        ("dead_letter", "TEXT"),
        ("shard", "INTEGER NOT NULL DEFAULT 0"),
        ("shards", "INTEGER NOT NULL DEFAULT 1"),
        ("requested", "TEXT"),
        ("attempt_log", "TEXT"),
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
]
CHANGE_COLUMNS = ["id", "job_id", "job_name", "at", "actor", "action", "changes"]
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
]
JSON_COLUMNS = {
    "params", "schedule", "misfire", "last_execution", "error", "result", "changes", "redrive",
    "ended", "attempt_log",
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


def from_micros(value: int | None) -> datetime | None:
    return None if value is None else EPOCH + timedelta(microseconds=value)


def insert_sql(table: str, columns: Sequence[str]) -> str:
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"


CLEAR_LEASE = "lease_owner = NULL, lease_token = NULL, lease_until = NULL"


def takeable(table: str = "") -> str:
    """A lease the caller may take over (see Store.reap_expired_leases), of `table` (an alias)
    or of the one table queried: ended, or expired by the caller's clock and held by the caller
    or by an owner that never beat. The expiry of another instance that beats was written by
    another clock, and is never compared with the caller's. Arguments: `takeable_args`."""
    at = f"{table}." if table else ""
    return (
        f"{at}lease_until < ? AND ({at}lease_until = ? OR {at}lease_owner IS ? "
        f"OR {at}lease_owner NOT IN (SELECT id FROM instances))"
    )


# A job's lease the caller may take over: takeable, and if it is a sharded occurrence's, none of
# its shards leased by another instance that beats (the occurrence lives while one runs there).
# Arguments: `takeable_args` twice.
TAKEABLE_JOB_LEASE = (
    f"{takeable('jobs')} AND NOT EXISTS (SELECT 1 FROM run_requests r WHERE r.job_id = jobs.id "
    "AND r.occurrence = jobs.lease_token AND r.lease_token IS NOT NULL "
    f"AND NOT ({takeable('r')}))"
)


def takeable_args(now: datetime, instance: str | None) -> tuple[object, ...]:
    return (micros(now), micros(ENDED_LEASE_UNTIL), instance)


def shard_end_sql(execution: Execution) -> tuple[str, tuple[Any, ...]]:
    """The fenced update that ends a shard's run on its entry: the lease goes; the entry is
    ended, unless the run was abandoned (then the shard is due again)."""
    assert execution.finished_at is not None
    fence = (execution.job_id, execution.token)
    where = "WHERE job_id = ? AND lease_token = ?"
    if execution.status is Status.ABANDONED:
        return f"UPDATE run_requests SET {CLEAR_LEASE} {where}", fence
    summary = execution.summary()
    ended = summary_text(summary)
    return f"UPDATE run_requests SET {CLEAR_LEASE}, ended = ? {where}", (ended, *fence)


def summary_text(summary: ExecutionSummary | None) -> str:
    """summary_to_doc as JSON."""
    return json.dumps(to_json_ready(summary_to_doc(summary)))


# The schedule moves only if ops did not change when the job runs during the run (see Advance):
# it is still enabled and due at the time the run claimed, or, for runs that do not know that
# time, still at the revision the run claimed. Every SET sees the row as it was before the update.
_UNMOVED = "CASE WHEN enabled = 1 AND next_run_at = ? THEN ? ELSE {0} END"
_UNCHANGED = "CASE WHEN revision = ? THEN ? ELSE {0} END"


def _release_and_advance_sql(unchanged: str) -> str:
    return (
        f"UPDATE jobs SET {CLEAR_LEASE}, consecutive_failures = ?, last_execution = ?, "
        f"next_run_at = {unchanged.format('next_run_at')}, "
        f"enabled = {unchanged.format('enabled')}, "
        f"paused_reason = {unchanged.format('paused_reason')} "
        "WHERE id = ? AND lease_token = ?"
    )


# Made once: sqlite3 finds a statement in its cache by its text.
RELEASE_SQL = f"UPDATE jobs SET {CLEAR_LEASE} WHERE id = ? AND lease_token = ?"
RELEASE_AND_ADVANCE_SQL = _release_and_advance_sql(_UNMOVED)
RELEASE_AND_ADVANCE_AT_REVISION_SQL = _release_and_advance_sql(_UNCHANGED)


def release_sql(
    job_id: str, token: int | None, advance: Advance | None
) -> tuple[str, tuple[Any, ...]]:
    """The fenced update that ends a run: applies only while the run's token holds the lease."""
    if advance is None:
        return RELEASE_SQL, (job_id, token)
    sql, unchanged = RELEASE_AND_ADVANCE_AT_REVISION_SQL, advance.revision
    if advance.claimed_next_run_at is not None:
        sql, unchanged = RELEASE_AND_ADVANCE_SQL, exact_micros(advance.claimed_next_run_at)
    return (
        sql,
        (
            advance.consecutive_failures,
            summary_text(advance.last_execution),
            unchanged,
            micros(advance.next_run_at),
            unchanged,
            int(advance.enabled),
            unchanged,
            advance.paused_reason,
            job_id,
            token,
        ),
    )


def add_missing_columns(db: sqlite3.Connection) -> None:
    """Bring a database made by an older tickd up to the schema (see ADDED_COLUMNS)."""
    for table, columns in ADDED_COLUMNS.items():
        present = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        for column, kind in columns:
            if column not in present:
                db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
    db.executescript(LATE_SCHEMA)


def record_change_row(db: sqlite3.Connection, change: JobChange | None) -> None:
    if change is not None:
        db.execute(
            insert_sql("job_changes", CHANGE_COLUMNS),
            to_row(dataclasses.asdict(change), CHANGE_COLUMNS),
        )


def job_filters(query: JobQuery) -> tuple[list[str], list[Any]]:
    conditions: list[tuple[str, Any]] = [
        ("handler = ?", query.handler),
        ("enabled = ?", None if query.enabled is None else int(query.enabled)),
        ("name >= ? AND name < ? || char(1114111)", query.name_prefix),
        ("next_run_at >= ?", micros(query.next_run_from)),
        ("next_run_at < ?", micros(query.next_run_to)),
        ("name > ?", query.after_name),
    ]
    where, args = [], []
    for condition, value in conditions:
        if value is not None:
            where.append(condition)
            args += [value] * condition.count("?")
    return where, args


def execution_filters(query: ExecutionQuery) -> tuple[list[str], list[Any]]:
    conditions: list[tuple[str, Any]] = [
        ("job_id = ?", query.job_id),
        ("status = ?", None if query.status is None else str(query.status)),
        ("handler = ?", query.handler),
        ("scheduled_at >= ?", micros(query.since)),
        ("scheduled_at < ?", micros(query.until)),
        ("dead_letter = ?", None if query.dead_letter is None else str(query.dead_letter)),
    ]
    where = [condition for condition, value in conditions if value is not None]
    args = [value for _, value in conditions if value is not None]
    if query.before is not None:
        where.append("(scheduled_at, id) < (?, ?)")
        args += [micros(query.before[0]), query.before[1]]
    return where, args


def to_row(doc: Doc, columns: Sequence[str]) -> tuple[Any, ...]:
    values = []
    for column in columns:
        value = doc[column]
        if column in JSON_COLUMNS:
            value = None if value is None else json.dumps(to_json_ready(value))
        elif column in TIME_COLUMNS:
            value = micros(value)
        elif isinstance(value, bool):
            value = int(value)
        values.append(value)
    return tuple(values)


def from_row(row: sqlite3.Row, key: str = "_id") -> Doc:
    doc: Doc = {}
    for column in row.keys():  # noqa: SIM118 - sqlite3.Row is not a mapping
        value = row[column]
        if column in JSON_COLUMNS and value is not None:
            value = json.loads(value)
        elif column in TIME_COLUMNS:
            value = from_micros(value)
        doc[column] = value
    doc[key] = doc.pop("id")
    return doc


def job_doc(job: Job) -> Doc:
    doc = job_to_doc(job)
    doc["id"] = doc.pop("_id")
    return doc


def job_row(job: Job) -> tuple[Any, ...]:
    doc = job_doc(job)
    lease = doc.pop("lease") or {}
    doc.update(
        lease_owner=lease.get("owner"),
        lease_token=lease.get("token"),
        lease_until=lease.get("until"),
    )
    return to_row(doc, JOB_COLUMNS)


# The columns a job is decoded from, in the order job_from_row unpacks them.
JOB_DECODED = (
    "id", "name", "handler", "params", "schedule", "enabled", "next_run_at", "timeout_seconds",
    "max_retries", "priority", "misfire", "jitter_seconds", "lease_owner", "lease_token",
    "lease_until", "fence", "revision", "consecutive_failures", "paused_reason",
    "last_execution", "system", "redrive", "shards", "managed_by", "created_at", "updated_at",
)  # fmt: skip
PRIORITY_OF = {int(priority): priority for priority in Priority}


@functools.lru_cache(maxsize=16)
def _job_columns(columns: tuple[str, ...]) -> operator.itemgetter[tuple[Any, ...]]:
    """JOB_DECODED out of a row with these columns: a database made by an older tickd has the
    columns added since (ADDED_COLUMNS) last, so the positions are looked up, once a shape."""
    return operator.itemgetter(*(columns.index(name) for name in JOB_DECODED))


def job_from_row(row: sqlite3.Row) -> Job:
    """The dispatcher decodes every job it fetches and claims: read by position, with the few
    distinct schedules, misfire policies and re-drive policies decoded once each."""
    (
        id_, name, handler, params, schedule, enabled, next_run_at, timeout_seconds,
        max_retries, priority, misfire, jitter_seconds, lease_owner, lease_token, lease_until,
        fence, revision, consecutive_failures, paused_reason, last_execution, system, redrive,
        shards, managed_by, created_at, updated_at,
    ) = _job_columns(tuple(row.keys()))(tuple(row))  # fmt: skip
    return Job(
        id=id_,
        name=name,
        handler=handler,
        schedule=_schedule(schedule),
        params={} if params == "{}" else dict(json.loads(params) or {}),
        enabled=bool(enabled),
        next_run_at=None if next_run_at is None else _time(next_run_at),
        timeout_seconds=float(timeout_seconds),
        max_retries=int(max_retries),
        priority=PRIORITY_OF[priority] if priority in PRIORITY_OF else Priority(priority),
        misfire=_misfire(misfire),
        jitter_seconds=float(jitter_seconds),
        lease=None
        if lease_token is None
        else Lease(owner=lease_owner, token=int(lease_token), until=_time(lease_until)),
        fence=int(fence),
        revision=int(revision),
        consecutive_failures=int(consecutive_failures),
        paused_reason=paused_reason,
        last_execution=_summary(last_execution),
        system=bool(system),
        redrive=_redrive(redrive),
        shards=int(shards),
        managed_by=managed_by,
        created_at=_time(created_at),
        updated_at=_time(updated_at),
    )


# What a claim writes: a claimed job's row differs from the one the due query read only here.
CLAIM_COLUMNS = frozenset({"lease_owner", "lease_token", "lease_until", "fence"})


def unclaimed_part(columns: Sequence[str]) -> operator.itemgetter[tuple[Any, ...]]:
    """What of a job's row (as a tuple, of these columns) a claim leaves as it was."""
    return operator.itemgetter(*(i for i, name in enumerate(columns) if name not in CLAIM_COLUMNS))


# The id and the claim's columns of a claimed row, by position (see claim_part).
CLAIM_PART = ("id", "lease_owner", "lease_token", "lease_until", "fence")


def claim_part(columns: Sequence[str]) -> operator.itemgetter[tuple[Any, ...]]:
    """CLAIM_PART out of a row (as a tuple) of these columns."""
    return operator.itemgetter(*(list(columns).index(name) for name in CLAIM_PART))


def with_claim(job: Job, claim: tuple[Any, ...]) -> Job:
    """`job` with the lease and fence of its claimed row (`claim`, its CLAIM_PART); the rest
    is unchanged (unclaimed_part), so it is copied, not read again."""
    _, owner, token, until, fence = claim
    lease = None if token is None else Lease(owner=owner, token=int(token), until=_time(until))
    return dataclasses.replace(job, lease=lease, fence=int(fence))


# Distinct values are few (the same schedule text for every job of a kind), the objects frozen.
DECODED_VALUES_KEPT = 4096


@functools.lru_cache(maxsize=DECODED_VALUES_KEPT)
def _schedule(text: str) -> Schedule:
    return schedule_from_doc(json.loads(text))


@functools.lru_cache(maxsize=DECODED_VALUES_KEPT)
def _misfire(text: str | None) -> Misfire:
    return misfire_from_doc(json.loads(text) if text else None)


@functools.lru_cache(maxsize=DECODED_VALUES_KEPT)
def _redrive(text: str | None) -> RedrivePolicy | None:
    return None if text is None else redrive_from_doc(json.loads(text))


def _summary(text: str | None) -> ExecutionSummary | None:
    return None if text is None else summary_from_doc(json.loads(text))


def _time(value: int) -> datetime:
    return EPOCH + timedelta(microseconds=value)


def execution_row(execution: Execution) -> tuple[Any, ...]:
    """The executions' columns, in EXECUTION_COLUMNS' order (two writes per run)."""
    e, error, result = execution, execution.error, execution.result
    return (
        e.id,
        e.job_id,
        e.job_name,
        e.handler,
        micros(e.scheduled_at),
        micros(e.started_at),
        micros(e.finished_at),
        e.duration_ms,
        str(e.status),
        e.attempts,
        None if error is None else json.dumps(error_to_doc(error)),
        None if result is None else json.dumps(to_json_ready(result)),
        e.owner,
        e.token,
        None if e.dead_letter is None else str(e.dead_letter),
        e.shard,
        e.shards,
        e.requested,
        json.dumps([attempt_to_doc(attempt) for attempt in e.attempt_log])
        if e.attempt_log
        else None,
    )


# What a run's end changes of its execution as recorded when it started; the other columns
# are the WHERE of the update that writes the end (END_SQL), so that it matches only a record
# the end leaves otherwise as it was.
ENDED_COLUMNS = (
    "status",
    "started_at",
    "finished_at",
    "duration_ms",
    "attempts",
    "error",
    "result",
    "dead_letter",
    "attempt_log",
)
_KEPT_COLUMNS = tuple(c for c in EXECUTION_COLUMNS if c not in ENDED_COLUMNS and c != "id")
END_SQL = (
    f"UPDATE executions SET {', '.join(f'{c} = ?' for c in ENDED_COLUMNS)} WHERE id = ? AND "
    + " AND ".join(f"{c} IS ?" for c in _KEPT_COLUMNS)
)
_end_values = operator.itemgetter(
    *(EXECUTION_COLUMNS.index(c) for c in (*ENDED_COLUMNS, "id", *_KEPT_COLUMNS))
)


def end_row(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """An execution_row's values in END_SQL's order."""
    return _end_values(row)  # type: ignore[no-any-return]


OUTBOX_INSERT = "INSERT OR IGNORE INTO outbox (id, job_id, event, written_at) VALUES (?, ?, ?, ?)"


def write_events(
    db: sqlite3.Connection, executions: Sequence[Execution], source: str | None
) -> None:
    """The executions' events into the outbox, in this transaction; an event stored already
    (same id: a replayed batch) is left as it is. No source: no events (a tool's write)."""
    if source is None:
        return
    rows = []
    for execution in executions:
        event = execution_event(execution, source=source)
        rows.append(
            (
                event["id"],
                execution.job_id,
                json.dumps(event, separators=(",", ":")),
                micros(event_time(execution)),
            )
        )
    db.executemany(OUTBOX_INSERT, rows)


def outbox_event_from_row(row: sqlite3.Row) -> OutboxEvent:
    written_at = from_micros(row["written_at"])
    assert written_at is not None
    return OutboxEvent(
        id=row["id"], job_id=row["job_id"], event=json.loads(row["event"]), written_at=written_at
    )


def request_row(request: RunRequest) -> tuple[Any, ...]:
    doc = request_to_doc(request)
    doc["id"] = doc.pop("_id")
    lease = doc.pop("lease") or {}
    doc.update(
        lease_owner=lease.get("owner"),
        lease_token=lease.get("token"),
        lease_until=lease.get("until"),
    )
    return to_row(doc, REQUEST_COLUMNS)


def request_from_row(row: sqlite3.Row) -> RunRequest:
    doc = from_row(row)
    owner, token, until = doc.pop("lease_owner"), doc.pop("lease_token"), doc.pop("lease_until")
    doc["lease"] = None if token is None else {"owner": owner, "token": token, "until": until}
    return request_from_doc(doc)


def execution_from_row(row: sqlite3.Row) -> Execution:
    return execution_from_doc(from_row(row))
