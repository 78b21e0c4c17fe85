"""The job store's statements on SQLite that more than one role runs: inserts, the lease's
release and take-over, the filters of the jobs and executions lists, a run's end, history
entries and the outbox's events."""

from __future__ import annotations

import dataclasses
import json
import operator
import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from tickd.scheduler.codec import (
    exact_micros,
    micros,
    summary_to_doc,
    to_json_ready,
)
from tickd.scheduler.dead_letters import abandoned_for_good
from tickd.scheduler.events import event_time, execution_event
from tickd.scheduler.model import (
    Execution,
    ExecutionSummary,
    Status,
)
from tickd.scheduler.ports.backends import (
    ENDED_LEASE_UNTIL,
    Advance,
    ExecutionQuery,
    JobChange,
    JobQuery,
    RunEnd,
)
from tickd.scheduler.store.sqlite.rows import (
    execution_from_row,
    job_from_row,
    request_from_row,
    to_row,
)
from tickd.scheduler.store.sqlite.schema import CHANGE_COLUMNS, EXECUTION_COLUMNS


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


# The error a reap marks the run of an expired lease with.
LEASE_EXPIRED_TYPE = "LeaseExpired"

# The runs a reap abandoned under these leases, (job id, token) each, not yet judged: this
# reap's, or those of a reap that stopped before their dead letter was written.
_UNJUDGED_SQL = (
    "SELECT * FROM executions WHERE job_id = ? AND token = ? AND status = ? AND shards = 1 "
    "AND dead_letter IS NULL AND json_extract(error, '$.type') = ?"
)
# How many times an occurrence (job, scheduled_at, a plain run) was abandoned by a reap since
# it last ended for good (a dead letter: its re-drive has a budget of its own).
_ABANDONMENTS_SQL = (
    "SELECT count(*) FROM executions WHERE job_id = ?1 AND scheduled_at = ?2 AND shards = 1 "
    "AND status = ?3 AND json_extract(error, '$.type') = ?4 AND finished_at > coalesce(("
    "SELECT max(finished_at) FROM executions WHERE job_id = ?1 AND scheduled_at = ?2 "
    "AND shards = 1 AND dead_letter IS NOT NULL), -1)"
)


def abandoned_for_good_in(
    db: sqlite3.Connection, leases: Sequence[tuple[str, int]]
) -> list[RunEnd]:
    """The dead letters of the runs these expired leases guarded whose occurrences were
    abandoned past their jobs' retries (dead_letters.abandoned_for_good)."""
    finishes = []
    for job_id, token in leases:
        args = (job_id, token, Status.ABANDONED, LEASE_EXPIRED_TYPE)
        for row in db.execute(_UNJUDGED_SQL, args).fetchall():
            finish = _judged(db, execution_from_row(row))
            finishes += [finish] if finish is not None else []
    return finishes


def _judged(db: sqlite3.Connection, execution: Execution) -> RunEnd | None:
    job_row = db.execute("SELECT * FROM jobs WHERE id = ?", (execution.job_id,)).fetchone()
    if job_row is None:
        return None
    count_args = (
        execution.job_id,
        micros(execution.scheduled_at),
        Status.ABANDONED,
        LEASE_EXPIRED_TYPE,
    )
    [abandonments] = db.execute(_ABANDONMENTS_SQL, count_args).fetchone()
    request_row = db.execute(
        "SELECT * FROM run_requests WHERE job_id = ? AND taken = ? AND occurrence IS NULL",
        (execution.job_id, execution.token),
    ).fetchone()
    request = None if request_row is None else request_from_row(request_row)
    return abandoned_for_good(job_from_row(job_row), request, execution, int(abandonments))


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


def record_change_row(db: sqlite3.Connection, change: JobChange | None) -> None:
    if change is not None:
        db.execute(
            insert_sql("job_changes", CHANGE_COLUMNS),
            to_row(dataclasses.asdict(change), CHANGE_COLUMNS),
        )


def job_filters(query: JobQuery) -> tuple[list[str], list[Any]]:
    conditions: list[tuple[str, Any]] = [
        ("handler = ?", query.handler),
        ("domain = ?", query.domain),
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
    "log",
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


# Each instance with the partitions it holds.
INSTANCE_VIEWS = (
    "SELECT i.id, i.beat_at, i.status, (SELECT count(*) FROM partitions AS p WHERE p.owner = i.id) "
    "FROM instances AS i ORDER BY i.id"
)


def without_keys(count: int, table: str = "") -> str:
    """The jobs (of `table`, the alias, if given) naming no key or none of `count` keys (its
    arguments): NOT IN alone would leave out the jobs naming none (NULL)."""
    key = f"{table}.concurrency_key" if table else "concurrency_key"
    return f"({key} IS NULL OR {key} NOT IN ({','.join('?' * count)}))"
