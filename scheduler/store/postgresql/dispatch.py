"""The engine's dispatch on PostgreSQL (the store's DispatchStore role): what is due, claiming it
fenced, recording the runs it starts, giving back and reaping leases. The run requests' and
shards' part of the role is requests.py's."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from tickd.scheduler.codec import exact_micros, micros, to_json_ready
from tickd.scheduler.model import Execution, Job, Priority, Status
from tickd.scheduler.ports.backends import Claim, LeaseTerms, RunEnd
from tickd.scheduler.store.postgresql.base import Args, PostgresTables, Tx
from tickd.scheduler.store.postgresql.completion import write_ends_in
from tickd.scheduler.store.postgresql.statements import (
    CLEAR_LEASE,
    IGNORE,
    LEASE_EXPIRED_TYPE,
    abandoned_for_good_in,
    insert_events,
    takeable_job_lease,
    upsert_executions,
    without_keys,
    write_events,
)
from tickd.scheduler.store.sqlite.rows import Row, execution_from_row, execution_row, job_from_row

PRIORITIES = [int(p) for p in Priority]
FREE = "enabled = 1 AND lease_token IS NULL"
LEASE_EXPIRED = json.dumps(
    to_json_ready({"type": LEASE_EXPIRED_TYPE, "message": "the lease expired before the run ended"})
)

# Compare-and-set a batch in one statement: the claims' jobs still as read and free are locked,
# those another claimer holds at that moment are skipped (it wins them, or they stay free for
# the next claim), and the locked ones take their leases and tokens. Under read committed, a
# job another claimer took and committed meanwhile is checked again as it is now, and is free
# no longer: two claimers never win the same job.
CLAIM_SQL = f"""
WITH c AS (
    SELECT * FROM unnest($1::text[], $2::int4[], $3::int8[], $4::text[], $5::int8[])
        AS c(id, revision, next_run_at, owner, until)
), due AS (
    SELECT j.id, c.owner, c.until FROM jobs j JOIN c ON j.id = c.id
    WHERE j.revision = c.revision AND j.next_run_at IS NOT DISTINCT FROM c.next_run_at
        AND j.{FREE.replace(" AND ", " AND j.")}
    FOR UPDATE OF j SKIP LOCKED
)
UPDATE jobs SET lease_owner = due.owner, lease_until = due.until, fence = jobs.fence + 1,
    lease_token = jobs.fence + 1
FROM due WHERE jobs.id = due.id
RETURNING jobs.*
"""
# The runs of the expired leases, abandoned. A run whose end is being written at this moment
# (its row locked) is skipped rather than waited for: that end then finds its lease gone, as if
# it came after the reap, and waiting could deadlock with it (it locks the execution, then the
# job; the reap, the job, then the execution).
ABANDON_SQL = """
UPDATE executions SET status = $1, finished_at = $2, error = $3
WHERE id IN (
    SELECT x.id FROM executions x JOIN unnest($4::text[], $5::int8[]) AS l(id, token)
        ON x.job_id = l.id AND x.token = l.token
    WHERE x.status = $6 FOR UPDATE OF x SKIP LOCKED
) AND status = $6
RETURNING *
"""
# A seek into jobs_keyed_leased for each key: only the leased jobs that name one are read.
RUNNING_BY_KEY = (
    "SELECT concurrency_key, count(*) FROM jobs WHERE concurrency_key = ANY ($1::text[]) "
    "AND lease_token IS NOT NULL GROUP BY concurrency_key"
)
GIVE_BACK_SQL = (
    f"UPDATE jobs SET {CLEAR_LEASE} FROM unnest($1::text[], $2::int8[]) AS l(id, token) "
    "WHERE jobs.id = l.id AND jobs.lease_token = l.token"
)


def due_where(
    args: Args,
    before: int,
    excluded: Sequence[str],
    first: Sequence[str],
    parts: Sequence[int] | None,
    *,
    among_first: bool = False,
    domains: Sequence[str] | None = None,
    exclude_domains: Sequence[str] = (),
    exclude_keys: Sequence[str] = (),
) -> str:
    """Free jobs due by `before` whose handlers are not `excluded`, in `parts` (None: in any
    partition; a job an older tickd wrote, without one, is in every), in `domains` (None: in
    any) and not in `exclude_domains`, naming no key or one not in `exclude_keys`; with
    `first`, those named there (`among_first`) or the others."""
    due = (
        f"{FREE} AND next_run_at <= {args(before, 'int8')} "
        f"AND handler <> ALL ({args(list(excluded), 'text[]')})"
    )
    if parts is not None:
        due += f" AND (part = ANY ({args(list(parts), 'int4[]')}) OR part IS NULL)"
    if domains is not None and len(domains) == 1:
        # An equality: the seek of a priority into jobs_due_by_domain comes in the order asked
        # for, and stops at the limit, so the planner takes it however many jobs are due.
        due += f" AND domain = {args(domains[0], 'text')}"
    elif domains is not None:
        due += f" AND domain = ANY ({args(list(domains), 'text[]')})"
    if exclude_domains:
        due += f" AND domain <> ALL ({args(list(exclude_domains), 'text[]')})"
    if exclude_keys:
        due += f" AND {without_keys(args, exclude_keys)}"
    if first:
        named = f"id = ANY ({args(list(first), 'text[]')})"
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


def _reads(
    args: Args,
    now: datetime,
    excluded: Sequence[str],
    starved_before: datetime | None,
    first: Sequence[str],
    parts: Sequence[int] | None,
    lock: str,
    domains: Sequence[str] | None,
    exclude_domains: Sequence[str],
    exclude_keys: Sequence[str] = (),
) -> list[str]:
    """The due reads in turn (the jobs named `first`; the starved, oldest first; the others by
    urgency), each walking an index and stopping at the limit, no job in two of them. The last
    is by urgency."""

    def where(before: int, *, among_first: bool = False) -> str:
        return due_where(
            args,
            before,
            excluded,
            first,
            parts,
            among_first=among_first,
            domains=domains,
            exclude_domains=exclude_domains,
            exclude_keys=exclude_keys,
        )

    at = exact_micros(now)
    reads = []
    if first:
        reads.append(_oldest_first(where(at, among_first=True), lock))
    if starved_before is None:
        reads.append(_by_urgency(args, where(at), lock))
    else:
        # The starved first, as if more urgent than critical, oldest first; then the others by
        # urgency.
        bound = exact_micros(starved_before)
        reads.append(_oldest_first(where(bound), lock))
        newer = f"{where(at)} AND next_run_at > {args(bound, 'int8')}"
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


def due_sql(
    now: datetime,
    limit: int,
    excluded: Sequence[str],
    starved_before: datetime | None,
    first: Sequence[str],
    parts: Sequence[int] | None = None,
    *,
    domains: Sequence[str] | None = None,
    exclude_domains: Sequence[str] = (),
    exclude_keys: Sequence[str] = (),
) -> tuple[str, list[Any]]:
    """DispatchStore.due_jobs in one statement, and its arguments."""
    args = Args(limit)
    reads = _reads(
        args,
        now,
        excluded,
        starved_before,
        first,
        parts,
        "",
        domains,
        exclude_domains,
        exclude_keys,
    )
    return (reads[0] if len(reads) == 1 else _in_turn(reads)), args.values


def claim_due_sql(
    now: datetime,
    horizon: datetime,
    limit: int,
    lease: LeaseTerms,
    excluded: Sequence[str],
    starved_before: datetime | None,
    first: Sequence[str],
    parts: Sequence[int] | None = None,
    *,
    domains: Sequence[str] | None = None,
    exclude_domains: Sequence[str] = (),
    exclude_keys: Sequence[str] = (),
) -> tuple[str, list[Any]]:
    """DispatchStore.claim_due_jobs in one statement, and its arguments: the due reads, each
    locking the rows it takes and passing over those another claimer holds, so that two
    instances take two different heads of the queue; then the claim of what they read, and
    the jobs as claimed, in the reads' order. Each lease lasts until the job's time (or now),
    its timeout and the margin, as Claimer's do. A seek locks up to the limit of its own (one
    per priority); the rows the union's limit then leaves are unlocked as the statement ends."""
    args = Args(limit)
    lock = " FOR UPDATE SKIP LOCKED"
    reads = _reads(
        args,
        horizon,
        excluded,
        starved_before,
        first,
        parts,
        lock,
        domains,
        exclude_domains,
        exclude_keys,
    )
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


class PostgresDispatch(PostgresTables):
    """The dispatch of PostgresStore."""

    # A claim's UPDATE locks each row it compares and sets, and checks it again as it is once
    # locked: two instances never both win a job, so the lease is the run's lock. Each instance
    # claims in the partitions it holds: SKIP LOCKED keeps claims apart, not shares (the first
    # to read a burst within its lookahead would take all of it).
    claim_is_the_lock = True
    reads_partitions_in_turn = False

    async def due_jobs(
        self,
        now: datetime,
        limit: int,
        *,
        exclude_handlers: Sequence[str] = (),
        starved_before: datetime | None = None,
        first: Sequence[str] = (),
        partitions: Sequence[int] | None = None,
        in_turn: bool = False,  # one statement reads every partition given
        domains: Sequence[str] | None = None,
        exclude_domains: Sequence[str] = (),
        exclude_keys: Sequence[str] = (),
    ) -> list[Job]:
        sql, args = due_sql(
            now,
            limit,
            exclude_handlers,
            starved_before,
            first,
            partitions,
            domains=domains,
            exclude_domains=exclude_domains,
            exclude_keys=exclude_keys,
        )
        return [job_from_row(row) for row in await self._fetch(sql, *args)]

    async def claim_due_jobs(
        self,
        now: datetime,
        horizon: datetime,
        limit: int,
        *,
        lease: LeaseTerms,
        exclude_handlers: Sequence[str] = (),
        starved_before: datetime | None = None,
        first: Sequence[str] = (),
        partitions: Sequence[int] | None = None,
        domains: Sequence[str] | None = None,
        exclude_domains: Sequence[str] = (),
        exclude_keys: Sequence[str] = (),
    ) -> list[Job] | None:
        sql, args = claim_due_sql(
            now,
            horizon,
            limit,
            lease,
            exclude_handlers,
            starved_before,
            first,
            partitions,
            domains=domains,
            exclude_domains=exclude_domains,
            exclude_keys=exclude_keys,
        )
        return [job_from_row(row) for row in await self._fetch(sql, *args)]

    async def running_by_key(self, keys: Sequence[str]) -> dict[str, int]:
        if not keys:
            return {}
        rows = await self._fetch(RUNNING_BY_KEY, list(keys))
        return {str(row[0]): int(row[1]) for row in rows}

    async def claim_jobs(self, claims: Sequence[Claim], now: datetime) -> list[Job]:
        if not claims:
            return []
        rows = await self._fetch(
            CLAIM_SQL,
            [c.job_id for c in claims],
            [c.revision for c in claims],
            [micros(c.next_run_at) for c in claims],
            [c.owner for c in claims],
            [micros(c.until) for c in claims],
        )
        order = {c.job_id: i for i, c in enumerate(claims)}
        return sorted((job_from_row(row) for row in rows), key=lambda job: order[job.id])

    async def insert_executions(
        self, executions: Sequence[Execution], *, event_source: str | None = None
    ) -> None:
        if not executions:
            return
        args = Args()
        sql = upsert_executions(args, [execution_row(e) for e in executions], IGNORE)
        if event_source is not None:
            sql = f"WITH ex AS ({sql}) {insert_events(args, executions, event_source)}"
        await self._execute(sql, *args.values)

    async def give_back(self, leases: Sequence[tuple[str, int]]) -> None:
        if leases:
            ids, tokens = zip(*leases, strict=True)
            await self._execute(GIVE_BACK_SQL, list(ids), list(tokens))

    async def reap_expired_leases(
        self, now: datetime, *, instance: str | None = None, event_source: str | None = None
    ) -> list[Execution]:
        args = Args()
        expired = f"lease_token IS NOT NULL AND {takeable_job_lease(args, now, instance)}"
        expired_sql = f"SELECT id, lease_token FROM jobs WHERE {expired} FOR UPDATE SKIP LOCKED"

        async def reap(tx: Tx) -> tuple[list[Row], list[RunEnd]]:
            expired = await tx.fetch(expired_sql, *args.values)
            if not expired:
                return [], []
            leases = [(str(job["id"]), int(job["lease_token"])) for job in expired]
            ids, tokens = [job_id for job_id, _ in leases], [token for _, token in leases]
            abandoned = await tx.fetch(
                ABANDON_SQL,
                str(Status.ABANDONED),
                micros(now),
                LEASE_EXPIRED,
                ids,
                tokens,
                str(Status.RUNNING),
            )
            # Those abandoned past their retries keep their leases until their ends (dead
            # letters) are written, here: another instance's reap, right after this one commits,
            # must find them judged, or it would judge them again.
            given_up = await abandoned_for_good_in(tx, leases)
            held = {(f.execution.job_id, f.execution.token) for f in given_up}
            freed = [lease for lease in leases if lease not in held]
            if freed:
                await tx.execute(
                    GIVE_BACK_SQL, [job_id for job_id, _ in freed], [t for _, t in freed]
                )
            # outbox: the abandoned executions' events, in this transaction
            await write_events(tx, [execution_from_row(row) for row in abandoned], event_source)
            if given_up:
                await write_ends_in(tx, given_up, event_source)
            return abandoned, given_up

        # Most reaps find nothing: one statement, without the lock, says so.
        if not await self._fetch(f"SELECT 1 FROM jobs WHERE {expired} LIMIT 1", *args.values):
            return []
        rows, given_up = await self._run(reap)
        dead = {finish.execution.id: finish.execution for finish in given_up}
        return [dead.get(row["id"], execution_from_row(row)) for row in rows]
