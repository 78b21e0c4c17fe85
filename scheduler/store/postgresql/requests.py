"""Runs asked for outside the schedule (trigger, retry, backfill) on PostgreSQL: queued, read
when due, and claimed with their jobs; and the shard entries of sharded occurrences."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from tickd.scheduler.codec import micros
from tickd.scheduler.model import Execution, Job, Status
from tickd.scheduler.ports.backends import OCCURRENCE_OWNER, Advance, Claim, RunRequest
from tickd.scheduler.store.postgresql.base import Args, PostgresTables, Tx
from tickd.scheduler.store.postgresql.dispatch import LEASE_EXPIRED
from tickd.scheduler.store.postgresql.statements import (
    CLEAR_LEASE,
    IGNORE,
    insert_rows,
    release_sql,
    release_values,
    takeable,
    without_keys,
    write_events,
)
from tickd.scheduler.store.sqlite.rows import (
    Row,
    execution_from_row,
    from_micros,
    job_from_row,
    request_from_row,
    request_row,
)
from tickd.scheduler.store.sqlite.schema import REQUEST_COLUMNS

# A requested run claims its job whenever it is free, at the revision the due query read. A job
# another transaction holds (another instance's claim, or a run's end) is passed over, not
# waited for: two instances claiming requests of the same jobs in different orders would
# otherwise each wait for the other (a deadlock), and the request stays queued for the next tick.
CLAIM_FOR_REQUEST = (
    "WITH free AS (SELECT id FROM jobs WHERE id = $3 AND revision = $4 "
    "AND lease_token IS NULL FOR UPDATE SKIP LOCKED) "
    "UPDATE jobs SET lease_owner = $1, lease_until = $2, fence = jobs.fence + 1, "
    "lease_token = jobs.fence + 1 FROM free WHERE jobs.id = free.id RETURNING jobs.*"
)
# A shard's occurrence outlives the shard's lease by as long again (see Store.claim_run_requests).
EXTEND_OCCURRENCE = (
    "UPDATE jobs SET lease_until = greatest(lease_until, $1) WHERE id = $2 AND lease_token = $3"
)
CLAIM_SHARD = (
    "UPDATE run_requests SET lease_owner = $1, lease_until = $2, fence = fence + 1, "
    "lease_token = fence + 1 WHERE id = $3 AND fence = $4 "
    "AND lease_until IS NOT DISTINCT FROM $5::int8 AND ended IS NULL "
    "AND EXISTS (SELECT 1 FROM jobs WHERE id = $6 AND lease_token = $7) RETURNING *"
)
ABANDON_RUN = (
    "UPDATE executions SET status = $1, finished_at = $2, error = $3 "
    "WHERE job_id = $4 AND token = $5 AND status = $6 RETURNING *"
)


def keyed_in(args: Args, partitions: Sequence[int]) -> str:
    """The jobs naming no key, and those naming one whose partition is among `partitions`."""
    return f"(j.concurrency_key IS NULL OR j.part = ANY ({args(list(partitions), 'int4[]')}))"


class PostgresRequests(PostgresTables):
    """The run requests of PostgresStore."""

    # -- run requests (trigger, retry, backfill) -------------------------------------------------

    async def run_request_pending(self, job_id: str, scheduled_at: datetime) -> bool:
        sql = "SELECT 1 FROM run_requests WHERE job_id = $1 AND scheduled_at = $2 LIMIT 1"
        return await self._fetchrow(sql, job_id, micros(scheduled_at)) is not None

    async def count_pending_requests(self, job_id: str, *, reason: str) -> int:
        # Not the one being run: taken by the job's lease now (one whose lease lapsed is
        # pending again).
        sql = (
            "SELECT count(*) FROM run_requests r JOIN jobs j ON j.id = r.job_id "
            "WHERE r.job_id = $1 AND r.reason = $2 "
            "AND (r.taken IS NULL OR r.taken IS DISTINCT FROM j.lease_token)"
        )
        return int(await self._fetchval(sql, job_id, reason))

    async def insert_run_requests(self, requests: Sequence[RunRequest]) -> None:
        if requests:
            args = Args()
            rows = [request_row(r) for r in requests]
            await self._execute(
                insert_rows(args, "run_requests", REQUEST_COLUMNS, rows, IGNORE), *args.values
            )

    async def due_run_requests(
        self,
        now: datetime,
        limit: int,
        *,
        exclude_handlers: Sequence[str] = (),
        exclude_domains: Sequence[str] = (),
        exclude_keys: Sequence[str] = (),
        instance: str | None = None,
        partitions: Sequence[int] | None = None,
    ) -> list[tuple[RunRequest, Job]]:
        args = Args(micros(now))
        # A request, of a free job; or a shard entry of the occurrence holding its job, not
        # ended, and free or whose lease may be taken over.
        sql = (
            "SELECT r.* FROM run_requests r JOIN jobs j ON j.id = r.job_id "
            "WHERE r.not_before <= $1 AND ((r.occurrence IS NULL AND j.lease_token IS NULL) "
            "OR (r.occurrence = j.lease_token AND r.ended IS NULL "
            f"AND (r.lease_token IS NULL OR ({takeable('r', args, now, instance)})))) "
            f"AND j.handler <> ALL ({args(list(exclude_handlers), 'text[]')}) "
            f"AND j.domain <> ALL ({args(list(exclude_domains), 'text[]')}) "
            + (f"AND {without_keys(args, exclude_keys, 'j')} " if exclude_keys else "")
            + (f"AND {keyed_in(args, partitions)} " if partitions is not None else "")
            + f"ORDER BY r.not_before, r.id LIMIT {args(limit, 'int8')}"
        )

        requests = await self._fetch(sql, *args.values)
        if not requests:  # the usual answer: one statement
            return []
        # Each job as it is now, read after its requests: a claim compares what it read anyway.
        ids = list({row["job_id"] for row in requests})
        jobs = await self._fetch("SELECT * FROM jobs WHERE id = ANY ($1::text[])", ids)
        by_id = {row["id"]: job_from_row(row) for row in jobs}
        return [
            (request_from_row(row), by_id[row["job_id"]])
            for row in requests
            if row["job_id"] in by_id
        ]

    async def claim_run_requests(
        self,
        requests: Sequence[RunRequest],
        claims: Sequence[Claim],
        now: datetime,
        *,
        event_source: str | None = None,
    ) -> list[tuple[RunRequest, Job]]:
        async def claim(tx: Tx) -> list[tuple[RunRequest, Row]]:
            won: list[tuple[RunRequest, Row]] = []
            abandoned: list[Execution] = []
            for request, c in zip(requests, claims, strict=True):
                if request.occurrence is not None:
                    shard = await _claim_shard(tx, request, c, now, abandoned)
                    if shard is not None:
                        job = await tx.fetchrow("SELECT * FROM jobs WHERE id = $1", c.job_id)
                        assert job is not None
                        won.append((request_from_row(shard), job))
                elif (claimed := await _claim_request(tx, request, c)) is not None:
                    won.append((request, claimed))
            await write_events(tx, abandoned, event_source)
            return won

        if not requests:
            return []
        return [(request, job_from_row(job)) for request, job in await self._run(claim)]

    # -- sharded occurrences (ports.Store.start_occurrence) --------------------------------------

    async def start_occurrence(
        self, job_id: str, token: int, until: datetime, shards: Sequence[RunRequest]
    ) -> bool:
        hand_over = (
            "UPDATE jobs SET lease_owner = $1, lease_until = $2 WHERE id = $3 AND lease_token = $4"
        )
        args = Args()
        rows = [request_row(entry) for entry in shards]
        queue = insert_rows(args, "run_requests", REQUEST_COLUMNS, rows, IGNORE)

        async def start(tx: Tx) -> bool:
            if not await tx.execute(hand_over, OCCURRENCE_OWNER, micros(until), job_id, token):
                return False
            await tx.execute(
                "DELETE FROM run_requests WHERE job_id = $1 "
                "AND (occurrence IS NOT NULL OR taken = $2)",
                job_id,
                token,
            )
            if rows:
                await tx.execute(queue, *args.values)
            return True

        return await self._run(start)

    async def renew_shard_lease(
        self, shard: RunRequest, token: int, until: datetime, now: datetime
    ) -> bool:
        renew = "UPDATE run_requests SET lease_until = $1 WHERE id = $2 AND lease_token = $3"
        outlives = micros(until + (until - now))

        async def renewed(tx: Tx) -> bool:
            if not await tx.execute(renew, micros(until), shard.id, token):
                return False
            await tx.execute(EXTEND_OCCURRENCE, outlives, shard.job_id, shard.occurrence)
            return True

        return await self._run(renewed)

    async def give_back_shards(self, shards: Sequence[tuple[RunRequest, int]]) -> None:
        if shards:
            await self._execute(
                f"UPDATE run_requests AS q SET {CLEAR_LEASE} "
                "FROM unnest($1::text[], $2::int8[]) AS s(id, token) "
                "WHERE q.id = s.id AND q.lease_token = s.token",
                [entry.id for entry, _ in shards],
                [token for _, token in shards],
            )

    async def occurrence_shards(self, job_id: str, occurrence: int) -> list[RunRequest]:
        sql = "SELECT * FROM run_requests WHERE job_id = $1 AND occurrence = $2 ORDER BY shard"
        return [request_from_row(row) for row in await self._fetch(sql, job_id, occurrence)]

    async def end_occurrence(self, job_id: str, occurrence: int, advance: Advance) -> bool:
        args = Args()
        release = release_sql(args, [release_values(job_id, occurrence, advance)])
        drop = "DELETE FROM run_requests WHERE job_id = $1 AND occurrence = $2"

        async def end(tx: Tx) -> bool:
            if not await tx.fetch(release, *args.values):
                return False
            await tx.execute(drop, job_id, occurrence)
            return True

        return await self._run(end)

    async def executions_at(self, job_id: str, scheduled_ats: Sequence[datetime]) -> set[datetime]:
        if not scheduled_ats:
            return set()
        sql = (
            "SELECT scheduled_at FROM executions WHERE job_id = $1 "
            "AND scheduled_at = ANY ($2::int8[]) "
            "UNION SELECT scheduled_at FROM run_requests WHERE job_id = $1 "
            "AND scheduled_at = ANY ($2::int8[])"
        )
        rows = await self._fetch(sql, job_id, [micros(t) for t in scheduled_ats])
        return {from_micros(row[0]) for row in rows if row[0] is not None}  # type: ignore[misc]


async def _claim_request(tx: Tx, request: RunRequest, claim: Claim) -> Row | None:
    """The job, claimed for a plain request, which is marked taken by the new token and stays
    queued until the run's end (see Store.claim_run_requests). A request read before another
    instance claimed it, ran it and freed its job would win the job again (same revision, no
    lease) and run a second time: it must still be queued, and it stays locked until this
    commits. One another transaction holds (another claimer's, or the end of its run taking it
    off the queue) is passed over, not waited for: that one decides it."""
    queued = "SELECT 1 FROM run_requests WHERE id = $1 FOR UPDATE SKIP LOCKED"
    if await tx.fetchrow(queued, request.id) is None:
        return None
    args = (claim.owner, micros(claim.until), claim.job_id, claim.revision)
    job = await tx.fetchrow(CLAIM_FOR_REQUEST, *args)
    if job is None:
        return None
    await tx.execute(
        "UPDATE run_requests SET taken = $1 WHERE id = $2", job["lease_token"], request.id
    )
    return job


async def _claim_shard(
    tx: Tx, entry: RunRequest, claim: Claim, now: datetime, abandoned: list[Execution]
) -> Row | None:
    """Compare-and-set on the entry as the due query read it, while its occurrence holds the
    job; a lease it had expired, and the run it guarded is abandoned."""
    taken = await tx.fetchrow(
        CLAIM_SHARD,
        claim.owner,
        micros(claim.until),
        entry.id,
        entry.fence,
        micros(entry.lease.until) if entry.lease else None,
        entry.job_id,
        entry.occurrence,
    )
    if taken is None:
        return None
    if entry.lease is not None:
        rows = await tx.fetch(
            ABANDON_RUN,
            str(Status.ABANDONED),
            micros(now),
            LEASE_EXPIRED,
            entry.job_id,
            entry.lease.token,
            str(Status.RUNNING),
        )
        abandoned += [execution_from_row(row) for row in rows]
    outlives = claim.until + (claim.until - now)
    await tx.execute(EXTEND_OCCURRENCE, micros(outlives), entry.job_id, entry.occurrence)
    return taken
