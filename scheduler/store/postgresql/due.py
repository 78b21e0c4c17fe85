"""The due reads on PostgreSQL as SQL (DispatchStore.due_jobs and claim_due_jobs): each read
seeks an index in its order and stops at the limit."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from tickd.scheduler.codec import exact_micros
from tickd.scheduler.model import Priority
from tickd.scheduler.ports.backends import EVERY_DUE, DueFilter, LeaseTerms
from tickd.scheduler.store.postgresql.base import Args
from tickd.scheduler.store.postgresql.statements import without_keys

PRIORITIES = [int(p) for p in Priority]
# A claim's reads lock the rows they take and pass over those another claimer holds.
LOCKING = " FOR UPDATE SKIP LOCKED"
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


def _oldest_first(due: str, lock: str, cut: str) -> str:
    return f"SELECT * FROM jobs WHERE {due} ORDER BY next_run_at LIMIT {cut}{lock}"


def _by_urgency(args: Args, due: str, lock: str, cut: str) -> str:
    """One seek per priority into jobs_due, in its order, each stopping at the limit (`cut`):
    jobs not due yet are never read, and no due job is sorted but those the seeks return."""
    return (
        f"SELECT j.* FROM unnest({args(PRIORITIES, 'int4[]')}) AS p(priority) CROSS JOIN LATERAL "
        f"(SELECT * FROM jobs WHERE priority = p.priority AND {due} ORDER BY next_run_at "
        f"LIMIT {cut}{lock}) AS j ORDER BY j.priority, j.next_run_at LIMIT {cut}"
    )


def _reads(args: Args, now: datetime, where: DueFilter, lock: str, cut: str = "$1") -> list[str]:
    """The due reads in turn (the jobs named `first`; the starved, oldest first; the others by
    urgency), each walking an index and stopping at the limit (`cut`), no job in two of them.
    The last is by urgency."""
    at = exact_micros(now)
    reads = []
    if where.first:
        reads.append(_oldest_first(due_where(args, at, where, among_first=True), lock, cut))
    if where.starved_before is None:
        reads.append(_by_urgency(args, due_where(args, at, where), lock, cut))
    else:
        # The starved first, as if more urgent than critical, oldest first; then the others by
        # urgency.
        bound = exact_micros(where.starved_before)
        reads.append(_oldest_first(due_where(args, bound, where), lock, cut))
        newer = f"{due_where(args, at, where)} AND next_run_at > {args(bound, 'int8')}"
        reads.append(_by_urgency(args, newer, lock, cut))
    return reads


def _in_turn(reads: list[str], cut: str = "$1") -> str:
    """The reads as one, each row with its read's number (`read`), in their order, cut at the
    limit."""
    union = " UNION ALL ".join(
        f"(SELECT {n} AS read, d.* FROM ({read}) AS d)" for n, read in enumerate(reads)
    )
    return f"SELECT * FROM ({union}) AS u ORDER BY {_order_in_turn('u', len(reads))} LIMIT {cut}"


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
    the jobs as claimed, in the reads' order. A seek locks up to the limit of its own (one per
    priority); the rows the union's limit then leaves are unlocked as the statement ends."""
    args = Args(limit)
    reads = _reads(args, horizon, where, LOCKING)
    order = _order_in_turn("due", len(reads))
    return _claiming(args, now, lease, _in_turn(reads), order), args.values


def claim_lanes_sql(
    now: datetime,
    horizon: datetime,
    lanes: Sequence[tuple[int, DueFilter]],
    lease: LeaseTerms,
) -> tuple[str, list[Any]]:
    """DispatchStore.claim_due_lanes in one statement, and its arguments: each lane's reads as
    claim_due_sql's, cut at the lane's own limit, its rows numbered by lane (`lane`) and by
    place in the lane's order (`place`); one claim of them all; the jobs as claimed, by lane,
    each lane's in its order."""
    args = Args()
    numbered = []
    for lane, (limit, where) in enumerate(lanes):
        cut = args(limit, "int8")
        reads = _reads(args, horizon, where, LOCKING, cut)
        place = f"row_number() OVER (ORDER BY {_order_in_turn('t', len(reads))})"
        numbered.append(
            f"(SELECT {lane} AS lane, {place} AS place, t.* FROM ({_in_turn(reads, cut)}) AS t)"
        )
    due = " UNION ALL ".join(numbered)
    sql = _claiming(args, now, lease, due, "due.lane, due.place", also="due.lane, ")
    return sql, args.values


def _claiming(
    args: Args, now: datetime, lease: LeaseTerms, due: str, order: str, also: str = ""
) -> str:
    """The claim of the jobs `due` reads (each row a job, with the columns `order` names), and
    the jobs as claimed (after the columns of `due` named in `also`), in that order. Each lease
    lasts until the job's time (or now), its timeout and the margin, as Claimer's do."""
    start = args(exact_micros(now), "int8")
    until = (
        f"GREATEST({start}, jobs.next_run_at) + "
        f"((jobs.timeout_seconds + {args(lease.margin_seconds, 'float8')}) * 1000000)::int8"
    )
    return f"""
WITH due AS ({due}), claimed AS (
    UPDATE jobs SET lease_owner = {args(lease.owner, "text")}, lease_until = {until},
        fence = jobs.fence + 1, lease_token = jobs.fence + 1
    FROM due WHERE jobs.id = due.id
    RETURNING jobs.*
)
SELECT {also}claimed.* FROM claimed JOIN due ON claimed.id = due.id ORDER BY {order}
"""
