"""The due reads on PostgreSQL as SQL (DispatchStore.due_jobs and claim_due_jobs): each read
seeks an index in its order and stops at the limit."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tickd.scheduler.codec import exact_micros
from tickd.scheduler.model import Priority
from tickd.scheduler.ports.backends import EVERY_DUE, DueFilter, LeaseTerms
from tickd.scheduler.store.postgresql.base import Args
from tickd.scheduler.store.postgresql.statements import without_keys

PRIORITIES = [int(p) for p in Priority]
FREE = "enabled = 1 AND lease_token IS NULL"


def due_where(args: Args, before: int, where: DueFilter, *, among_first: bool = False) -> str:
    """Free jobs due by `before` of `where`'s handlers, partitions (a job an older tickd wrote,
    without one, is in every), domains and keys; with `where.first`, those named there
    (`among_first`) or the others."""
    due = (
        f"{FREE} AND next_run_at <= {args(before, 'int8')} "
        f"AND handler <> ALL ({args(list(where.exclude_handlers), 'text[]')})"
    )
    if (parts := where.partitions) is not None:
        due += f" AND (part = ANY ({args(list(parts), 'int4[]')}) OR part IS NULL)"
    if (domains := where.domains) is not None and len(domains) == 1:
        # An equality: the seek of a priority into jobs_due_by_domain comes in the order asked
        # for, and stops at the limit, so the planner takes it however many jobs are due.
        due += f" AND domain = {args(domains[0], 'text')}"
    elif domains is not None:
        due += f" AND domain = ANY ({args(list(domains), 'text[]')})"
    if where.exclude_domains:
        due += f" AND domain <> ALL ({args(list(where.exclude_domains), 'text[]')})"
    if where.exclude_keys:
        due += f" AND {without_keys(args, where.exclude_keys)}"
    if where.first:
        named = f"id = ANY ({args(list(where.first), 'text[]')})"
        due += f" AND {named}" if among_first else f" AND NOT {named}"
    return due


def _oldest_first(due: str, lock: str) -> str:
    return f"SELECT * FROM jobs WHERE {due} ORDER BY next_run_at LIMIT $1{lock}"


def _by_urgency(args: Args, due: str, lock: str) -> str:
    """One seek per priority into jobs_due, in its order, each stopping at the limit: jobs not
    due yet are never read, and no due job is sorted but those the seeks return."""
    return (
        f"SELECT j.* FROM unnest({args(PRIORITIES, 'int4[]')}) AS p(priority) CROSS JOIN LATERAL "
        f"(SELECT * FROM jobs WHERE priority = p.priority AND {due} ORDER BY next_run_at LIMIT $1"
        f"{lock}) AS j ORDER BY j.priority, j.next_run_at LIMIT $1"
    )


def _reads(args: Args, now: datetime, where: DueFilter, lock: str) -> list[str]:
    """The due reads in turn (the jobs named `first`; the starved, oldest first; the others by
    urgency), each walking an index and stopping at the limit, no job in two of them. The last
    is by urgency."""
    at = exact_micros(now)
    reads = []
    if where.first:
        reads.append(_oldest_first(due_where(args, at, where, among_first=True), lock))
    if where.starved_before is None:
        reads.append(_by_urgency(args, due_where(args, at, where), lock))
    else:
        # The starved first, as if more urgent than critical, oldest first; then the others by
        # urgency.
        bound = exact_micros(where.starved_before)
        reads.append(_oldest_first(due_where(args, bound, where), lock))
        newer = f"{due_where(args, at, where)} AND next_run_at > {args(bound, 'int8')}"
        reads.append(_by_urgency(args, newer, lock))
    return reads


def _in_turn(reads: list[str]) -> str:
    """The reads as one, each row with its read's number (`read`), in their order, cut at the
    limit."""
    union = " UNION ALL ".join(
        f"(SELECT {n} AS read, d.* FROM ({read}) AS d)" for n, read in enumerate(reads)
    )
    return f"SELECT * FROM ({union}) AS u ORDER BY {_order_in_turn('u', len(reads))} LIMIT $1"


def _order_in_turn(table: str, reads: int) -> str:
    """The order of _in_turn's rows, for any table holding them."""
    by_urgency = reads - 1  # the last read
    return (
        f"{table}.read, CASE WHEN {table}.read = {by_urgency} THEN {table}.priority END, "
        f"{table}.next_run_at"
    )


def due_sql(now: datetime, limit: int, where: DueFilter = EVERY_DUE) -> tuple[str, list[Any]]:
    """DispatchStore.due_jobs in one statement, and its arguments."""
    args = Args(limit)
    reads = _reads(args, now, where, "")
    return (reads[0] if len(reads) == 1 else _in_turn(reads)), args.values


def claim_due_sql(
    now: datetime,
    horizon: datetime,
    limit: int,
    lease: LeaseTerms,
    where: DueFilter = EVERY_DUE,
) -> tuple[str, list[Any]]:
    """DispatchStore.claim_due_jobs in one statement, and its arguments: the due reads, each
    locking the rows it takes and passing over those another claimer holds, so that two
    instances take two different heads of the queue; then the claim of what they read, and
    the jobs as claimed, in the reads' order. Each lease lasts until the job's time (or now),
    its timeout and the margin, as Claimer's do. A seek locks up to the limit of its own (one
    per priority); the rows the union's limit then leaves are unlocked as the statement ends."""
    args = Args(limit)
    reads = _reads(args, horizon, where, " FOR UPDATE SKIP LOCKED")
    start = args(exact_micros(now), "int8")
    until = (
        f"GREATEST({start}, jobs.next_run_at) + "
        f"((jobs.timeout_seconds + {args(lease.margin_seconds, 'float8')}) * 1000000)::int8"
    )
    sql = f"""
WITH due AS ({_in_turn(reads)}), claimed AS (
    UPDATE jobs SET lease_owner = {args(lease.owner, "text")}, lease_until = {until},
        fence = jobs.fence + 1, lease_token = jobs.fence + 1
    FROM due WHERE jobs.id = due.id
    RETURNING jobs.*
)
SELECT claimed.* FROM claimed JOIN due ON claimed.id = due.id
ORDER BY {_order_in_turn("due", len(reads))}
"""
    return sql, args.values
