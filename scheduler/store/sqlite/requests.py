"""Runs asked for outside the schedule (trigger, retry, backfill) on SQLite: queued, read when
due, and claimed with their jobs."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import datetime

from tickd.scheduler.codec import (
    micros,
    to_json_ready,
)
from tickd.scheduler.model import Execution, Job, Status
from tickd.scheduler.ports.backends import (
    OCCURRENCE_OWNER,
    Advance,
    Claim,
    RunRequest,
)
from tickd.scheduler.store.sqlite.base import SQLiteTables
from tickd.scheduler.store.sqlite.rows import (
    execution_from_row,
    from_micros,
    job_from_row,
    request_from_row,
    request_row,
)
from tickd.scheduler.store.sqlite.schema import REQUEST_COLUMNS
from tickd.scheduler.store.sqlite.statements import (
    CLEAR_LEASE,
    insert_sql,
    release_sql,
    takeable,
    takeable_args,
    without_keys,
    write_events,
)

LEASE_EXPIRED = json.dumps(
    to_json_ready({"type": "LeaseExpired", "message": "the lease expired before the run ended"})
)
# A requested run claims its job whenever it is free, at the revision the due query read.
CLAIM_FOR_REQUEST = (
    "UPDATE jobs SET lease_owner = ?, lease_until = ?, fence = fence + 1, "
    "lease_token = fence + 1 WHERE id = ? AND revision = ? AND lease_token IS NULL"
)
# A shard's occurrence outlives the shard's lease by as long again (see Store.claim_run_requests).
EXTEND_OCCURRENCE = (
    "UPDATE jobs SET lease_until = max(lease_until, ?) WHERE id = ? AND lease_token = ?"
)


class SQLiteRequests(SQLiteTables):
    """The run requests of SQLiteStore."""

    # -- run requests (trigger, retry, backfill) -------------------------------------------------

    async def run_request_pending(self, job_id: str, scheduled_at: datetime) -> bool:
        sql = "SELECT 1 FROM run_requests WHERE job_id = ? AND scheduled_at = ? LIMIT 1"
        args = (job_id, micros(scheduled_at))
        return await self._read(lambda db: db.execute(sql, args).fetchone()) is not None

    async def count_pending_requests(self, job_id: str, *, reason: str) -> int:
        # Not the one being run: taken by the job's lease now (one whose lease lapsed is
        # pending again).
        sql = (
            "SELECT COUNT(*) FROM run_requests r JOIN jobs j ON j.id = r.job_id "
            "WHERE r.job_id = ? AND r.reason = ? "
            "AND (r.taken IS NULL OR r.taken IS NOT j.lease_token)"
        )
        row = await self._read(lambda db: db.execute(sql, (job_id, reason)).fetchone())
        return int(row[0])

    async def insert_run_requests(self, requests: Sequence[RunRequest]) -> None:
        rows = [request_row(r) for r in requests]
        sql = insert_sql("run_requests", REQUEST_COLUMNS).replace("INSERT", "INSERT OR IGNORE", 1)
        await self._run(lambda db: db.executemany(sql, rows))

    async def due_run_requests(
        self,
        now: datetime,
        limit: int,
        *,
        exclude_handlers: Sequence[str] = (),
        exclude_domains: Sequence[str] = (),
        exclude_keys: Sequence[str] = (),
        instance: str | None = None,
        # Unused: a SQLite file is one process's, which owns every partition.
        partitions: Sequence[int] | None = None,
    ) -> list[tuple[RunRequest, Job]]:
        excluded = ",".join("?" * len(exclude_handlers))
        capped = ",".join("?" * len(exclude_domains))
        # A request, of a free job; or a shard entry of the occurrence holding its job, not
        # ended, and free or whose lease may be taken over.
        sql = (
            "SELECT r.id AS request_id FROM run_requests r JOIN jobs j ON j.id = r.job_id "
            "WHERE r.not_before <= ? AND ((r.occurrence IS NULL AND j.lease_token IS NULL) "
            "OR (r.occurrence = j.lease_token AND r.ended IS NULL "
            f"AND (r.lease_token IS NULL OR ({takeable('r')}))))"
            + (f" AND j.handler NOT IN ({excluded})" if excluded else "")
            + (f" AND j.domain NOT IN ({capped})" if capped else "")
            + (f" AND {without_keys(len(exclude_keys), 'j')}" if exclude_keys else "")
            + " ORDER BY r.not_before, r.id LIMIT ?"
        )
        args = (
            micros(now),
            *takeable_args(now, instance),
            *exclude_handlers,
            *exclude_domains,
            *exclude_keys,
            limit,
        )

        def due(db: sqlite3.Connection) -> list[tuple[sqlite3.Row, sqlite3.Row]]:
            pairs = []
            for (request_id,) in db.execute(sql, args).fetchall():
                request = db.execute("SELECT * FROM run_requests WHERE id = ?", (request_id,))
                row = request.fetchone()
                job = db.execute("SELECT * FROM jobs WHERE id = ?", (row["job_id"],)).fetchone()
                pairs.append((row, job))
            return pairs

        return [
            (request_from_row(request), job_from_row(job))
            for request, job in await self._run(due, at_once=True)
        ]

    async def claim_run_requests(
        self,
        requests: Sequence[RunRequest],
        claims: Sequence[Claim],
        now: datetime,
        *,
        event_source: str | None = None,
    ) -> list[tuple[RunRequest, Job]]:
        def claim(db: sqlite3.Connection) -> list[tuple[RunRequest, sqlite3.Row]]:
            won = []
            abandoned: list[Execution] = []
            for request, c in zip(requests, claims, strict=True):
                if request.occurrence is not None:
                    if self._claim_shard(db, request, c, now, abandoned):
                        row = db.execute("SELECT * FROM run_requests WHERE id = ?", (request.id,))
                        job = db.execute("SELECT * FROM jobs WHERE id = ?", (c.job_id,))
                        won.append((request_from_row(row.fetchone()), job.fetchone()))
                elif (claimed := self._claim_request(db, request, c)) is not None:
                    won.append((request, claimed))
            write_events(db, abandoned, event_source)
            return won

        return [(request, job_from_row(job)) for request, job in await self._run(claim)]

    @staticmethod
    def _claim_request(
        db: sqlite3.Connection, request: RunRequest, claim: Claim
    ) -> sqlite3.Row | None:
        """The job, claimed for a plain request, which is marked taken by the new token and
        stays queued until the run's end (see Store.claim_run_requests). A request read before
        another instance claimed it, ran it and freed its job would win the job again (same
        revision, no lease) and run a second time: it must still be queued."""
        if db.execute("SELECT 1 FROM run_requests WHERE id = ?", (request.id,)).fetchone() is None:
            return None
        args = (claim.owner, micros(claim.until), claim.job_id, claim.revision)
        if not db.execute(CLAIM_FOR_REQUEST, args).rowcount:
            return None
        job: sqlite3.Row = db.execute("SELECT * FROM jobs WHERE id = ?", (claim.job_id,)).fetchone()
        db.execute(
            "UPDATE run_requests SET taken = ? WHERE id = ?", (job["lease_token"], request.id)
        )
        return job

    @staticmethod
    def _claim_shard(
        db: sqlite3.Connection,
        entry: RunRequest,
        claim: Claim,
        now: datetime,
        abandoned: list[Execution],
    ) -> bool:
        """Compare-and-set on the entry as the due query read it, while its occurrence holds
        the job; a lease it had expired, and the run it guarded is abandoned."""
        taken = db.execute(
            "UPDATE run_requests SET lease_owner = ?, lease_until = ?, fence = fence + 1, "
            "lease_token = fence + 1 WHERE id = ? AND fence = ? AND lease_until IS ? "
            "AND ended IS NULL AND EXISTS (SELECT 1 FROM jobs WHERE id = ? AND lease_token = ?)",
            (
                claim.owner,
                micros(claim.until),
                entry.id,
                entry.fence,
                micros(entry.lease.until) if entry.lease else None,
                entry.job_id,
                entry.occurrence,
            ),
        ).rowcount
        if not taken:
            return False
        if entry.lease is not None:
            rows = db.execute(
                "UPDATE executions SET status = ?, finished_at = ?, error = ? "
                "WHERE job_id = ? AND token = ? AND status = ? RETURNING *",
                (
                    Status.ABANDONED,
                    micros(now),
                    LEASE_EXPIRED,
                    entry.job_id,
                    entry.lease.token,
                    Status.RUNNING,
                ),
            ).fetchall()
            abandoned += [execution_from_row(row) for row in rows]
        outlives = claim.until + (claim.until - now)
        db.execute(EXTEND_OCCURRENCE, (micros(outlives), entry.job_id, entry.occurrence))
        return True

    # -- sharded occurrences (ports.Store.start_occurrence) --------------------------------------

    async def start_occurrence(
        self, job_id: str, token: int, until: datetime, shards: Sequence[RunRequest]
    ) -> bool:
        hand_over = (
            "UPDATE jobs SET lease_owner = ?, lease_until = ? WHERE id = ? AND lease_token = ?"
        )
        queue = insert_sql("run_requests", REQUEST_COLUMNS).replace("INSERT", "INSERT OR IGNORE", 1)
        rows = [request_row(entry) for entry in shards]

        def start(db: sqlite3.Connection) -> bool:
            args = (OCCURRENCE_OWNER, micros(until), job_id, token)
            if not db.execute(hand_over, args).rowcount:
                return False
            stale = "DELETE FROM run_requests WHERE job_id = ? AND occurrence IS NOT NULL"
            db.execute(stale, (job_id,))
            db.execute("DELETE FROM run_requests WHERE job_id = ? AND taken = ?", (job_id, token))
            db.executemany(queue, rows)
            return True

        return await self._run(start)

    async def renew_shard_lease(
        self, shard: RunRequest, token: int, until: datetime, now: datetime
    ) -> bool:
        renew = "UPDATE run_requests SET lease_until = ? WHERE id = ? AND lease_token = ?"
        outlives = micros(until + (until - now))

        def renewed(db: sqlite3.Connection) -> bool:
            if not db.execute(renew, (micros(until), shard.id, token)).rowcount:
                return False
            db.execute(EXTEND_OCCURRENCE, (outlives, shard.job_id, shard.occurrence))
            return True

        return await self._run(renewed)

    async def give_back_shards(self, shards: Sequence[tuple[RunRequest, int]]) -> None:
        sql = f"UPDATE run_requests SET {CLEAR_LEASE} WHERE id = ? AND lease_token = ?"
        if shards:
            args = [(entry.id, token) for entry, token in shards]
            await self._run(lambda db: db.executemany(sql, args))

    async def occurrence_shards(self, job_id: str, occurrence: int) -> list[RunRequest]:
        sql = "SELECT * FROM run_requests WHERE job_id = ? AND occurrence = ? ORDER BY shard"
        rows = await self._run(lambda db: db.execute(sql, (job_id, occurrence)).fetchall())
        return [request_from_row(row) for row in rows]

    async def end_occurrence(self, job_id: str, occurrence: int, advance: Advance) -> bool:
        release, args = release_sql(job_id, occurrence, advance)
        drop = "DELETE FROM run_requests WHERE job_id = ? AND occurrence = ?"

        def end(db: sqlite3.Connection) -> bool:
            if not db.execute(release, args).rowcount:
                return False
            db.execute(drop, (job_id, occurrence))
            return True

        return await self._run(end)

    async def executions_at(self, job_id: str, scheduled_ats: Sequence[datetime]) -> set[datetime]:
        if not scheduled_ats:
            return set()
        marks = ",".join("?" * len(scheduled_ats))
        times = [micros(t) for t in scheduled_ats]
        sql = (
            f"SELECT scheduled_at FROM executions WHERE job_id = ? AND scheduled_at IN ({marks}) "
            f"UNION SELECT scheduled_at FROM run_requests WHERE job_id = ? "
            f"AND scheduled_at IN ({marks})"
        )
        rows = await self._read(
            lambda db: db.execute(sql, (job_id, *times, job_id, *times)).fetchall()
        )
        return {from_micros(row[0]) for row in rows if row[0] is not None}  # type: ignore[misc]
