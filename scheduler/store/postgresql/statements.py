"""The job store's statements on PostgreSQL that more than one role runs: batches passed as
arrays and read back with unnest (one statement for a batch), the lease's release and
take-over, the filters of the jobs and executions lists, history entries and the outbox's
events."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from tickd.scheduler.codec import exact_micros, micros
from tickd.scheduler.dead_letters import abandoned_for_good
from tickd.scheduler.events import event_time, execution_event
from tickd.scheduler.model import Execution, Status
from tickd.scheduler.ports.backends import (
    ENDED_LEASE_UNTIL,
    Advance,
    ExecutionQuery,
    JobChange,
    JobQuery,
    JobSearch,
    RunEnd,
)
from tickd.scheduler.store.postgresql.base import Args, Tx
from tickd.scheduler.store.sqlite.rows import (
    execution_from_row,
    job_from_row,
    request_from_row,
    to_row,
)
from tickd.scheduler.store.sqlite.schema import CHANGE_COLUMNS, EXECUTION_COLUMNS
from tickd.scheduler.store.sqlite.statements import summary_text

# Each column's type, for the arrays a batch is passed in (asyncpg must know them).
COLUMN_TYPES = {
    "id": "text", "job_id": "text", "job_name": "text", "name": "text", "handler": "text",
    "params": "text", "schedule": "text", "enabled": "int4", "next_run_at": "int8",
    "timeout_seconds": "float8", "max_retries": "int4", "priority": "int4", "misfire": "text",
    "jitter_seconds": "float8", "lease_owner": "text", "lease_token": "int8",
    "lease_until": "int8", "fence": "int8", "revision": "int4", "consecutive_failures": "int4",
    "paused_reason": "text", "last_execution": "text", "system": "int4", "created_at": "int8",
    "updated_at": "int8", "redrive": "text", "shards": "int4", "managed_by": "text",
    "domain": "text", "concurrency_key": "text", "concurrency_limit": "int4",
    "scheduled_at": "int8", "started_at": "int8", "finished_at": "int8",
    "duration_ms": "float8", "status": "text", "attempts": "int4", "error": "text",
    "result": "text", "owner": "text", "token": "int8", "dead_letter": "text", "shard": "int4",
    "requested": "text", "attempt_log": "text", "log": "text", "reason": "text",
    "not_before": "int8", "redrives": "int4", "occurrence": "int8", "advance_from": "int8",
    "ended": "text", "claimed_next_run_at": "int8", "at": "int8", "actor": "text",
    "action": "text", "changes": "text", "part": "int4",
}  # fmt: skip

CLEAR_LEASE = "lease_owner = NULL, lease_token = NULL, lease_until = NULL"


def unnest(args: Args, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """The rows (in `columns`' order) as a set to select from, `r`: one array argument a
    column, so a batch of any size is one statement of the same text."""
    arrays = [list(values) for values in zip(*rows, strict=True)] if rows else [[]] * len(columns)
    parts = ", ".join(
        args(values, f"{COLUMN_TYPES[column]}[]")
        for column, values in zip(columns, arrays, strict=True)
    )
    return f"unnest({parts}) AS r({', '.join(columns)})"


def insert_rows(
    args: Args, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], conflict: str
) -> str:
    """An INSERT of the rows, with its ON CONFLICT clause."""
    names = ", ".join(columns)
    return (
        f"INSERT INTO {table} ({names}) SELECT {names} FROM {unnest(args, columns, rows)} "
        f"ON CONFLICT {conflict}"
    )


# An execution stored already is replaced whole by the batch's (a run's end, or a replay).
REPLACE_EXECUTION = "(id) DO UPDATE SET " + ", ".join(
    f"{column} = EXCLUDED.{column}" for column in EXECUTION_COLUMNS if column != "id"
)
IGNORE = "DO NOTHING"


def upsert_executions(args: Args, rows: Sequence[tuple[Any, ...]], conflict: str) -> str:
    """The executions' rows (execution_row), once each: a row given twice keeps the last."""
    unique = list({row[0]: row for row in rows}.values())
    return insert_rows(args, "executions", EXECUTION_COLUMNS, unique, conflict)


def event_rows(executions: Sequence[Execution], source: str) -> list[tuple[Any, ...]]:
    rows = []
    for execution in executions:
        event = execution_event(execution, source=source)
        text = json.dumps(event, separators=(",", ":"))
        rows.append((event["id"], execution.job_id, text, micros(event_time(execution))))
    return rows


EVENT_COLUMNS = ("id", "job_id", "event", "written_at")
_EVENT_TYPES = {"event": "text", "written_at": "int8"}


def insert_events(args: Args, executions: Sequence[Execution], source: str) -> str:
    """The executions' events into the outbox; an event stored already (same id: a replayed
    batch) is left as it is."""
    rows = event_rows(executions, source)
    arrays = [list(values) for values in zip(*rows, strict=True)] if rows else [[]] * 4
    parts = ", ".join(
        args(values, f"{_EVENT_TYPES.get(column, 'text')}[]")
        for column, values in zip(EVENT_COLUMNS, arrays, strict=True)
    )
    names = ", ".join(EVENT_COLUMNS)
    return (
        f"INSERT INTO outbox ({names}) SELECT {names} FROM unnest({parts}) AS e({names}) "
        "ON CONFLICT (id) DO NOTHING"
    )


async def write_events(tx: Tx, executions: Sequence[Execution], source: str | None) -> None:
    """The executions' events into the outbox, on `tx`. No source: no events (a tool's write)."""
    if source is not None and executions:
        args = Args()
        await tx.execute(insert_events(args, executions, source), *args.values)


# -- the lease: release with the schedule's advance, take-over -----------------------------------

RELEASE_COLUMNS = (
    "job_id", "token", "mode", "consecutive_failures", "last_execution", "unchanged",
    "next_run_at", "enabled", "paused_reason",
)  # fmt: skip
_RELEASE_TYPES = {"mode": "int4", "unchanged": "int8", "token": "int8"}
# How a release advances the job (see Advance): not at all; only if ops left it enabled and due
# when the run claimed it; only if ops left it at the revision the run claimed.
RELEASE_ONLY, UNMOVED, UNCHANGED = 0, 1, 2


def release_values(job_id: str, token: int | None, advance: Advance | None) -> tuple[Any, ...]:
    """A release's values in RELEASE_COLUMNS' order."""
    if advance is None:
        return (job_id, token, RELEASE_ONLY, None, None, None, None, None, None)
    mode, unchanged = UNCHANGED, advance.revision
    if advance.claimed_next_run_at is not None:
        mode, unchanged = UNMOVED, exact_micros(advance.claimed_next_run_at)
    return (
        job_id,
        token,
        mode,
        advance.consecutive_failures,
        summary_text(advance.last_execution),
        unchanged,
        micros(advance.next_run_at),
        int(advance.enabled),
        advance.paused_reason,
    )


# The schedule moves only if ops did not change when the job runs during the run (see Advance).
# Every SET sees the row as it was before the update.
_MOVES = (
    f"((f.mode = {UNMOVED} AND j.enabled = 1 AND j.next_run_at = f.unchanged) "
    f"OR (f.mode = {UNCHANGED} AND j.revision = f.unchanged))"
)


def release_sql(args: Args, releases: Sequence[tuple[Any, ...]]) -> str:
    """The fenced update that ends runs (release_values each), applied to each job only while
    its run's token holds the lease; returns the ordinals (from 1) of the releases applied."""
    arrays = [list(v) for v in zip(*releases, strict=True)] if releases else [[]] * 9
    parts = ", ".join(
        args(values, f"{_RELEASE_TYPES.get(column) or COLUMN_TYPES[column]}[]")
        for column, values in zip(RELEASE_COLUMNS, arrays, strict=True)
    )
    kept = f"CASE WHEN f.mode = {RELEASE_ONLY} THEN j.{{0}} ELSE f.{{0}} END"
    moved = f"CASE WHEN {_MOVES} THEN f.{{0}} ELSE j.{{0}} END"
    return (
        f"UPDATE jobs AS j SET {CLEAR_LEASE}, "
        f"consecutive_failures = {kept.format('consecutive_failures')}, "
        f"last_execution = {kept.format('last_execution')}, "
        f"next_run_at = {moved.format('next_run_at')}, "
        f"enabled = {moved.format('enabled')}, "
        f"paused_reason = {moved.format('paused_reason')} "
        f"FROM unnest({parts}) WITH ORDINALITY AS f({', '.join(RELEASE_COLUMNS)}, n) "
        "WHERE j.id = f.job_id AND j.lease_token = f.token RETURNING f.n"
    )


def takeable(at: str, args: Args, now: datetime, instance: str | None) -> str:
    """A lease of `at` (a table or its alias) the caller may take over (see
    Store.reap_expired_leases): ended, or expired by the caller's clock and held by the caller
    or by an owner that never beat. The expiry of another instance that beats was written by
    another clock, and is never compared with the caller's."""
    return (
        f"{at}.lease_until < {args(micros(now), 'int8')} AND ("
        f"{at}.lease_until = {args(micros(ENDED_LEASE_UNTIL), 'int8')} "
        f"OR {at}.lease_owner IS NOT DISTINCT FROM {args(instance, 'text')} "
        f"OR {at}.lease_owner NOT IN (SELECT id FROM instances))"
    )


def takeable_job_lease(args: Args, now: datetime, instance: str | None) -> str:
    """A job's lease the caller may take over: takeable, and if it is a sharded occurrence's,
    none of its shards leased by another instance that beats (the occurrence lives while one
    runs there)."""
    return (
        f"{takeable('jobs', args, now, instance)} AND NOT EXISTS (SELECT 1 FROM run_requests r "
        "WHERE r.job_id = jobs.id AND r.occurrence = jobs.lease_token "
        f"AND r.lease_token IS NOT NULL AND NOT ({takeable('r', args, now, instance)}))"
    )


# The error a reap marks the run of an expired lease with.
LEASE_EXPIRED_TYPE = "LeaseExpired"
ERROR_TYPE = "((error::jsonb) ->> 'type')"

# The runs a reap abandoned under these leases, not yet judged: this reap's, or those of a reap
# that stopped before their dead letter was written.
_UNJUDGED_SQL = (
    "SELECT x.* FROM executions x JOIN unnest($1::text[], $2::int8[]) AS l(job_id, token) "
    "ON x.job_id = l.job_id AND x.token = l.token WHERE x.status = $3 AND x.shards = 1 "
    f"AND x.dead_letter IS NULL AND {ERROR_TYPE.replace('error', 'x.error')} = $4"
)
# How many times an occurrence (job, scheduled_at, a plain run) was abandoned by a reap since
# it last ended for good (a dead letter: its re-drive has a budget of its own).
_ABANDONMENTS_SQL = (
    "SELECT count(*) FROM executions WHERE job_id = $1 AND scheduled_at = $2 AND shards = 1 "
    f"AND status = $3 AND {ERROR_TYPE} = $4 AND finished_at > coalesce(("
    "SELECT max(finished_at) FROM executions WHERE job_id = $1 AND scheduled_at = $2 "
    "AND shards = 1 AND dead_letter IS NOT NULL), -1)"
)


async def abandoned_for_good_in(tx: Tx, leases: Sequence[tuple[str, int]]) -> list[RunEnd]:
    """The dead letters of the runs these expired leases guarded whose occurrences were
    abandoned past their jobs' retries (dead_letters.abandoned_for_good)."""
    if not leases:
        return []
    ids, tokens = [job_id for job_id, _ in leases], [token for _, token in leases]
    abandoned = str(Status.ABANDONED)
    rows = await tx.fetch(_UNJUDGED_SQL, ids, tokens, abandoned, LEASE_EXPIRED_TYPE)
    finishes = []
    for row in rows:
        finish = await _judged(tx, execution_from_row(row))
        finishes += [finish] if finish is not None else []
    return finishes


async def _judged(tx: Tx, execution: Execution) -> RunEnd | None:
    job_row = await tx.fetchrow("SELECT * FROM jobs WHERE id = $1", execution.job_id)
    if job_row is None:
        return None
    abandonments = await tx.fetchval(
        _ABANDONMENTS_SQL,
        execution.job_id,
        micros(execution.scheduled_at),
        str(Status.ABANDONED),
        LEASE_EXPIRED_TYPE,
    )
    request_row = await tx.fetchrow(
        "SELECT * FROM run_requests WHERE job_id = $1 AND taken = $2 AND occurrence IS NULL",
        execution.job_id,
        execution.token,
    )
    request = None if request_row is None else request_from_row(request_row)
    return abandoned_for_good(job_from_row(job_row), request, execution, int(abandonments))


# -- history, filters ----------------------------------------------------------------------------

CHANGE_INSERT = (
    f"INSERT INTO job_changes ({', '.join(CHANGE_COLUMNS)}) "
    f"VALUES ({', '.join(f'${n}' for n in range(1, len(CHANGE_COLUMNS) + 1))})"
)


async def record_change_row(tx: Tx, change: JobChange | None) -> None:
    if change is not None:
        await tx.execute(CHANGE_INSERT, *to_row(dataclasses.asdict(change), CHANGE_COLUMNS))


def name_prefix(args: Args, prefix: str) -> str:
    """Names starting with `prefix`, as a range the name index serves (byte order)."""
    at = args(prefix, "text")
    return f"name >= {at} AND name < {at} || chr(1114111)"


def job_filters(args: Args, query: JobQuery | JobSearch) -> list[str]:
    """The filters a jobs list and a jobs search share, and a list's cursor (`after_name`; a
    search's cursor depends on its order: views.page_reads)."""
    where = []
    if query.handler is not None:
        where.append(f"handler = {args(query.handler, 'text')}")
    if query.domain is not None:
        where.append(f"domain = {args(query.domain, 'text')}")
    if query.enabled is not None:
        where.append(f"enabled = {args(int(query.enabled), 'int4')}")
    if query.name_prefix is not None:
        where.append(name_prefix(args, query.name_prefix))
    if query.next_run_from is not None:
        where.append(f"next_run_at >= {args(micros(query.next_run_from), 'int8')}")
    if query.next_run_to is not None:
        where.append(f"next_run_at < {args(micros(query.next_run_to), 'int8')}")
    if isinstance(query, JobQuery) and query.after_name is not None:
        where.append(f"name > {args(query.after_name, 'text')}")
    return where


def execution_filters(args: Args, query: ExecutionQuery) -> list[str]:
    conditions: list[tuple[str, Any, str]] = [
        ("job_id", query.job_id, "text"),
        ("status", None if query.status is None else str(query.status), "text"),
        ("handler", query.handler, "text"),
        ("dead_letter", None if query.dead_letter is None else str(query.dead_letter), "text"),
    ]
    where = [
        f"{column} = {args(value, cast)}" for column, value, cast in conditions if value is not None
    ]
    if query.since is not None:
        where.append(f"scheduled_at >= {args(micros(query.since), 'int8')}")
    if query.until is not None:
        where.append(f"scheduled_at < {args(micros(query.until), 'int8')}")
    if query.before is not None:
        at, before_id = args(micros(query.before[0]), "int8"), args(query.before[1], "text")
        where.append(f"(scheduled_at, id) < ({at}, {before_id})")
    return where


def without_keys(args: Args, keys: Sequence[str], table: str = "") -> str:
    """The jobs (of `table`, the alias, if given) naming no key or one not among `keys`: `<>
    ALL` alone would leave out the jobs naming none (NULL)."""
    key = f"{table}.concurrency_key" if table else "concurrency_key"
    return f"({key} IS NULL OR {key} <> ALL ({args(list(keys), 'text[]')}))"
