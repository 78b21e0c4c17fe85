"""The engine's dispatch on PostgreSQL (the store's DispatchStore role): what is due, claiming it
fenced, recording the runs it starts, giving back and reaping leases. The due reads' SQL is
due.py's; the run requests' and shards' part of the role, requests.py's."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime

from tickd.scheduler.codec import micros, to_json_ready
from tickd.scheduler.model import Execution, Job, Status
from tickd.scheduler.ports.backends import EVERY_DUE, Claim, DueFilter, LeaseTerms, RunEnd
from tickd.scheduler.store.postgresql.base import Args, PostgresTables, Tx
from tickd.scheduler.store.postgresql.completion import write_ends_in
from tickd.scheduler.store.postgresql.due import FREE, claim_due_sql, claim_lanes_sql, due_sql
from tickd.scheduler.store.postgresql.statements import (
    CLEAR_LEASE,
    IGNORE,
    LEASE_EXPIRED_TYPE,
    abandoned_for_good_in,
    insert_events,
    takeable_job_lease,
    upsert_executions,
    write_events,
)
from tickd.scheduler.store.sqlite.rows import Row, execution_from_row, execution_row, job_from_row

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


class PostgresDispatch(PostgresTables):
    """The dispatch of PostgresStore."""

    # A claim's UPDATE locks each row it compares and sets, and checks it again as it is once
    # locked: two instances never both win a job, so the lease is the run's lock. Each instance
    # claims in the partitions it holds: SKIP LOCKED keeps claims apart, not shares (the first
    # to read a burst within its lookahead would take all of it).
    claim_is_the_lock = True
    reads_partitions_in_turn = False

    async def due_jobs(self, now: datetime, limit: int, where: DueFilter = EVERY_DUE) -> list[Job]:
        # One statement reads every partition given, `in_turn` or not.
        sql, args = due_sql(now, limit, where)
        return [job_from_row(row) for row in await self._fetch(sql, *args)]

    async def claim_due_jobs(
        self,
        now: datetime,
        horizon: datetime,
        limit: int,
        *,
        lease: LeaseTerms,
        where: DueFilter = EVERY_DUE,
    ) -> list[Job] | None:
        sql, args = claim_due_sql(now, horizon, limit, lease, where)
        return [job_from_row(row) for row in await self._fetch(sql, *args)]

    async def claim_due_lanes(
        self,
        now: datetime,
        horizon: datetime,
        lanes: Sequence[tuple[int, DueFilter]],
        *,
        lease: LeaseTerms,
    ) -> list[list[Job]] | None:
        sql, args = claim_lanes_sql(now, horizon, lanes, lease)
        claimed: list[list[Job]] = [[] for _ in lanes]
        for row in await self._fetch(sql, *args):
            claimed[row["lane"]].append(job_from_row(row))
        return claimed

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
