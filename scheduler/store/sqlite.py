"""The embedded store: one SQLite file in WAL mode, for a fresh checkout and single-host setups.

sqlite3 blocks, so every statement runs on one dedicated thread that owns the connection; a batch
of the engine is one transaction there, not one per job. Times are integer microseconds since the
epoch, so a compare-and-set compares exactly what it read.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from tickd.scheduler.codec import (
    EPOCH,
    exact_micros,
    micros,
    to_json_ready,
)
from tickd.scheduler.model import DeadLetter, Execution, ExecutionError, Job, Priority, Status
from tickd.scheduler.ports import (
    ENDED_LEASE_UNTIL,
    Backlog,
    Claim,
    DuplicateJobName,
    ExecutionQuery,
    Finish,
    JobChange,
    JobQuery,
    unchanged_state,
)
from tickd.scheduler.store.sqlite_housekeeping import SQLiteHousekeeping
from tickd.scheduler.store.sqlite_requests import SQLiteRequests
from tickd.scheduler.store.sqlite_rows import (
    DEFINITION_COLUMNS,
    END_SQL,
    EXECUTION_COLUMNS,
    FREE,
    JOB_COLUMNS,
    REQUEST_COLUMNS,
    TAKEABLE_JOB_LEASE,
    UNHANDLED,
    claim_part,
    end_row,
    execution_filters,
    execution_from_row,
    execution_row,
    from_micros,
    from_row,
    insert_sql,
    job_doc,
    job_filters,
    job_from_row,
    job_row,
    record_change_row,
    release_sql,
    request_row,
    shard_end_sql,
    takeable_args,
    to_row,
    unclaimed_part,
    with_claim,
    write_events,
)
from tickd.scheduler.store.sqlite_views import SQLiteViews
from tickd.scheduler.store_kit.sqlite import AT_ONCE_MAX_ROWS

T = TypeVar("T")

PRIORITIES = f"({', '.join(str(int(p)) for p in Priority)})"


class SQLiteStore(SQLiteRequests, SQLiteHousekeeping, SQLiteViews):
    """Jobs and executions in one SQLite file: a batch of the engine is one transaction."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        # The last due query's jobs by id, with their rows: the claim that follows it reads the
        # winners back and decodes only those whose row changed beyond the claim's own columns.
        self._due_read: dict[str, tuple[tuple[Any, ...], Job]] = {}

    # -- jobs -----------------------------------------------------------------------------------

    async def insert_job(self, job: Job, change: JobChange | None = None) -> None:
        row = job_row(job)

        def insert(db: sqlite3.Connection) -> None:
            try:
                db.execute(insert_sql("jobs", JOB_COLUMNS), row)
            except sqlite3.IntegrityError:
                raise DuplicateJobName(job.name) from None
            record_change_row(db, change)

        await self._run(insert)

    async def replace_job(
        self, job: Job, expected_revision: int, change: JobChange, *, read: Job | None = None
    ) -> Job | None:
        columns = [c for c in DEFINITION_COLUMNS if c not in unchanged_state(job, read)]
        values = to_row(job_doc(job), columns)
        assignments = ", ".join(f"{column} = ?" for column in columns)
        sql = (
            f"UPDATE jobs SET {assignments}, revision = revision + 1 WHERE id = ? AND revision = ?"
        )

        def replace(db: sqlite3.Connection) -> sqlite3.Row | None:
            try:
                updated = db.execute(sql, (*values, job.id, expected_revision)).rowcount
            except sqlite3.IntegrityError:
                raise DuplicateJobName(job.name) from None
            if not updated:
                return None
            record_change_row(db, change)
            row: sqlite3.Row = db.execute("SELECT * FROM jobs WHERE id = ?", (job.id,)).fetchone()
            return row

        row = await self._run(replace)
        return None if row is None else job_from_row(row)

    async def insert_missing_jobs(self, jobs: Sequence[Job]) -> list[Job]:
        rows = [job_row(job) for job in jobs]
        sql = insert_sql("jobs", JOB_COLUMNS).replace("INSERT", "INSERT OR IGNORE", 1)

        def insert(db: sqlite3.Connection) -> list[Job]:
            return [
                job for job, row in zip(jobs, rows, strict=True) if db.execute(sql, row).rowcount
            ]

        return await self._run(insert)

    async def get_job(self, job_id: str) -> Job | None:
        return await self._one_job("SELECT * FROM jobs WHERE id = ?", (job_id,))

    async def get_job_by_name(self, name: str) -> Job | None:
        return await self._one_job("SELECT * FROM jobs WHERE name = ?", (name,))

    async def list_jobs(self, query: JobQuery | None = None) -> list[Job]:
        query = query or JobQuery()
        where, args = job_filters(query)
        sql = "SELECT * FROM jobs" + (" WHERE " + " AND ".join(where) if where else "")
        return await self._jobs(sql + " ORDER BY name LIMIT ?", (*args, query.limit))

    async def delete_job(
        self, job_id: str, change: JobChange | None = None, *, expected_revision: int | None = None
    ) -> bool:
        sql = "DELETE FROM jobs WHERE id = ?"
        args: list[Any] = [job_id]
        if expected_revision is not None:
            sql += " AND revision = ?"
            args.append(expected_revision)

        def delete(db: sqlite3.Connection) -> bool:
            if not db.execute(sql, args).rowcount:
                return False
            db.execute("DELETE FROM run_requests WHERE job_id = ?", (job_id,))
            record_change_row(db, change)
            return True

        return await self._run(delete)

    async def list_changes(
        self, job_id: str, *, limit: int = 100, before: tuple[datetime, str] | None = None
    ) -> list[JobChange]:
        sql = "SELECT * FROM job_changes WHERE job_id = ?"
        args: list[Any] = [job_id]
        if before is not None:
            sql += " AND (at, id) < (?, ?)"
            args += [micros(before[0]), before[1]]
        sql += " ORDER BY at DESC, id DESC LIMIT ?"
        rows = await self._run(lambda db: db.execute(sql, (*args, limit)).fetchall())
        return [JobChange(**from_row(row, key="id")) for row in rows]

    async def record_change(self, change: JobChange) -> None:
        await self._run(lambda db: record_change_row(db, change))

    # -- the engine's batch operations ----------------------------------------------------------

    async def due_jobs(
        self,
        now: datetime,
        limit: int,
        *,
        exclude_handlers: Sequence[str] = (),
        starved_before: datetime | None = None,
        first: Sequence[str] = (),
    ) -> list[Job]:
        due = f"SELECT * FROM jobs WHERE {FREE} AND next_run_at <= ?"
        others: tuple[object, ...] = tuple(exclude_handlers)  # the arguments after the time
        if exclude_handlers:
            due += f" AND handler NOT IN ({','.join('?' * len(exclude_handlers))})"
        # One seek per priority into the due index, in its order: no sort, and jobs not due yet
        # are never read (without the IN, SQLite walks them or sorts every due job).
        by_urgency = f" AND priority IN {PRIORITIES} ORDER BY priority, next_run_at LIMIT ?"
        reads: list[tuple[str, tuple[object, ...]]] = []
        if first:
            ids = ",".join("?" * len(first))
            named = f" AND id IN ({ids}) ORDER BY next_run_at LIMIT ?"
            reads.append((due + named, (micros(now), *others, *first)))
            due, others = due + f" AND id NOT IN ({ids})", (*others, *first)
        if starved_before is None:
            reads.append((due + by_urgency, (micros(now), *others)))
        else:
            # The starved first, as if more urgent than critical, oldest first; then the others
            # by urgency. Two queries, each walking an index and stopping at its limit: one
            # ORDER BY over both would sort every due job (a burst of 30,000, every tick).
            bound = micros(starved_before)
            reads.append((due + " ORDER BY next_run_at LIMIT ?", (bound, *others)))
            newer = due + " AND next_run_at > ?" + by_urgency
            reads.append((newer, (micros(now), *others, bound)))
        rows = await self._run(lambda db: read_due(db, reads, limit), at_once=True)
        return self._decode_due(rows)

    def _decode_due(self, rows: list[sqlite3.Row]) -> list[Job]:
        jobs = [job_from_row(row) for row in rows]
        self._due_read = {job.id: (tuple(row), job) for row, job in zip(rows, jobs, strict=True)}
        return jobs

    def _decode_claimed(self, rows: list[sqlite3.Row]) -> list[Job]:
        """The winners of a claim: a job the due query read, and whose row the claim changed
        only in its lease and fence, is that job with the claim's lease, not decoded again."""
        read, self._due_read = self._due_read, {}
        if not rows:
            return []
        columns = rows[0].keys()  # every row of the batch has the same shape
        unclaimed, claim = unclaimed_part(columns), claim_part(columns)
        claimed = []
        for row in rows:
            values = tuple(row)
            lease = claim(values)
            seen = read.get(lease[0])
            if seen is not None and unclaimed(values) == unclaimed(seen[0]):
                claimed.append(with_claim(seen[1], lease))
            else:
                claimed.append(job_from_row(row))
        return claimed

    async def due_backlog(self, now: datetime) -> Backlog:
        sql = f"SELECT count(*), min(next_run_at) FROM jobs WHERE {FREE} AND next_run_at <= ?"
        row = await self._run(lambda db: db.execute(sql, (micros(now),)).fetchone())
        return Backlog(due=int(row[0]), oldest_due_at=from_micros(row[1]))

    async def claim_jobs(self, claims: Sequence[Claim], now: datetime) -> list[Job]:
        if not claims:
            return []
        update = (
            "UPDATE jobs SET lease_owner = ?, lease_until = ?, fence = fence + 1, "
            "lease_token = fence + 1 "
            f"WHERE id = ? AND revision = ? AND next_run_at IS ? AND {FREE}"
        )
        rows = [
            (c.owner, micros(c.until), c.job_id, c.revision, micros(c.next_run_at)) for c in claims
        ]
        ids = [c.job_id for c in claims]
        owner = claims[0].owner
        select = f"SELECT * FROM jobs WHERE lease_owner = ? AND id IN ({','.join('?' * len(ids))})"

        def claim(db: sqlite3.Connection) -> list[sqlite3.Row]:
            db.executemany(update, rows)
            # Read the winners back: the set of rows that now carry our lease.
            return db.execute(select, (owner, *ids)).fetchall()

        return self._decode_claimed(await self._run(claim, at_once=True))

    async def renew_lease(self, job_id: str, token: int, until: datetime) -> bool:
        sql = "UPDATE jobs SET lease_until = ? WHERE id = ? AND lease_token = ?"
        args = (micros(until), job_id, token)
        return bool(await self._run(lambda db: db.execute(sql, args).rowcount))

    async def insert_executions(
        self, executions: Sequence[Execution], *, event_source: str | None = None
    ) -> None:
        rows = [execution_row(e) for e in executions]
        sql = insert_sql("executions", EXECUTION_COLUMNS).replace("INSERT", "INSERT OR IGNORE", 1)

        def insert(db: sqlite3.Connection) -> None:
            db.executemany(sql, rows)
            write_events(db, executions, event_source)

        await self._run(insert, at_once=len(rows) <= AT_ONCE_MAX_ROWS)

    async def finish_executions(
        self, finishes: Sequence[Finish], *, event_source: str | None = None
    ) -> list[bool]:
        """One transaction for the batch: the executions and their events, their dead letters,
        then each job's fenced release."""
        rows = [execution_row(f.execution) for f in finishes]
        sql = insert_sql("executions", EXECUTION_COLUMNS).replace("INSERT", "REPLACE", 1)
        releases = [
            shard_end_sql(f.execution)
            if f.shard is not None
            else release_sql(f.execution.job_id, f.execution.token, f.advance)
            for f in finishes
        ]

        # Ended requests leave the queue, whether or not the run was fenced off: they ran.
        done_requests = [(f.request_id,) for f in finishes if f.request_id is not None]

        def finish(db: sqlite3.Connection) -> list[bool]:
            self._write_ends(db, rows, sql)
            write_events(db, [f.execution for f in finishes], event_source)
            applied = [bool(db.execute(release, args).rowcount) for release, args in releases]
            self._settle_and_redrive(db, finishes, applied)
            if done_requests:
                db.executemany("DELETE FROM run_requests WHERE id = ?", done_requests)
            return applied

        return await self._run(finish, at_once=len(rows) <= AT_ONCE_MAX_ROWS) if finishes else []

    @staticmethod
    def _write_ends(db: sqlite3.Connection, rows: list[tuple[Any, ...]], replace: str) -> None:
        """Each execution as it ended: an update of the columns an end changes, which leaves the
        indexes on the others alone. Should any record be missing (a run recorded only at its
        end) or differ in another column, the batch replaces its rows whole (the same rows, so
        the updated ones stay)."""
        if db.executemany(END_SQL, [end_row(row) for row in rows]).rowcount != len(rows):
            db.executemany(replace, rows)

    @staticmethod
    def _settle_and_redrive(
        db: sqlite3.Connection, finishes: Sequence[Finish], applied: Sequence[bool]
    ) -> None:
        settle = (
            "UPDATE executions SET dead_letter = ? WHERE job_id = ? AND scheduled_at = ? "
            f"AND shard = ? AND id != ? AND dead_letter IN {UNHANDLED}"
        )
        db.executemany(
            settle,
            [
                (DeadLetter.REDRIVEN, e.job_id, micros(e.scheduled_at), e.shard, e.id)
                for f in finishes
                if f.settles
                for e in [f.execution]
            ],
        )
        # A run fenced off (its lease lapsed, the occurrence is another instance's now) queues
        # no re-drive: that instance runs the occurrence, and a re-drive would run it again.
        # Its dead letter is `open` for ops, not left `redriving` for ever with nothing queued:
        # nothing says that instance ran it (it may have skipped it, past its grace).
        # (A run without a token held no lease to lose.)
        held = [
            released or f.execution.token is None
            for f, released in zip(finishes, applied, strict=True)
        ]
        requests = [
            f.redrive for f, still in zip(finishes, held, strict=True) if f.redrive and still
        ]
        fenced_off = [
            (DeadLetter.OPEN, f.execution.id)
            for f, still in zip(finishes, held, strict=True)
            if f.redrive and not still
        ]
        db.executemany("UPDATE executions SET dead_letter = ? WHERE id = ?", fenced_off)
        queue = insert_sql("run_requests", REQUEST_COLUMNS).replace("INSERT", "INSERT OR IGNORE", 1)
        for request, change in requests:
            if db.execute(queue, request_row(request)).rowcount:
                record_change_row(db, change)

    async def beat(self, instance: str, now: datetime) -> None:
        sql = (
            "INSERT INTO instances (id, beat_at) VALUES (?, ?) "
            "ON CONFLICT (id) DO UPDATE SET beat_at = excluded.beat_at"
        )
        await self._run(lambda db: db.execute(sql, (instance, micros(now))))

    async def instances(self) -> dict[str, datetime]:
        sql = "SELECT id, beat_at FROM instances"
        rows = await self._run(lambda db: db.execute(sql).fetchall())
        return {str(row[0]): EPOCH + timedelta(microseconds=row[1]) for row in rows}

    async def forget_instances(self, beats: Mapping[str, datetime]) -> None:
        sql = "DELETE FROM instances WHERE id = ? AND beat_at = ?"
        rows = [(instance, micros(beat)) for instance, beat in beats.items()]
        if rows:
            await self._run(lambda db: db.executemany(sql, rows))

    async def end_leases(self, owners: Sequence[str]) -> list[tuple[str, int | None]]:
        if not owners:
            return []
        ended = exact_micros(ENDED_LEASE_UNTIL)
        sql = (
            "UPDATE jobs SET lease_until = ? WHERE lease_token IS NOT NULL AND lease_until > ? "
            f"AND lease_owner IN ({','.join('?' * len(owners))}) RETURNING id"
        )
        args = (ended, ended, *owners)
        shards = sql.replace("UPDATE jobs", "UPDATE run_requests", 1).replace(
            "RETURNING id", "RETURNING job_id, shard", 1
        )

        def end(db: sqlite3.Connection) -> list[tuple[str, int | None]]:
            jobs = [(str(row[0]), None) for row in db.execute(sql, args).fetchall()]
            return jobs + [(str(r[0]), int(r[1])) for r in db.execute(shards, args).fetchall()]

        return await self._run(end)

    async def give_back(self, leases: Sequence[tuple[str, int]]) -> None:
        sql = (
            "UPDATE jobs SET lease_owner = NULL, lease_token = NULL, lease_until = NULL "
            "WHERE id = ? AND lease_token = ?"
        )
        if leases:
            await self._run(lambda db: db.executemany(sql, list(leases)))

    async def reap_expired_leases(
        self, now: datetime, *, instance: str | None = None, event_source: str | None = None
    ) -> list[Execution]:
        error = ExecutionError(
            type="LeaseExpired", message="the lease expired before the run ended"
        )
        error_json = json.dumps(to_json_ready({"type": error.type, "message": error.message}))
        at = micros(now)

        def reap(db: sqlite3.Connection) -> list[sqlite3.Row]:
            expired = db.execute(
                "SELECT id, lease_token FROM jobs WHERE lease_token IS NOT NULL "
                f"AND {TAKEABLE_JOB_LEASE}",
                takeable_args(now, instance) * 2,
            ).fetchall()
            abandoned = []
            for job in expired:
                abandoned += db.execute(
                    "UPDATE executions SET status = ?, finished_at = ?, error = ? "
                    "WHERE job_id = ? AND token = ? AND status = ? RETURNING *",
                    (
                        Status.ABANDONED,
                        at,
                        error_json,
                        job["id"],
                        job["lease_token"],
                        Status.RUNNING,
                    ),
                ).fetchall()
            db.executemany(
                "UPDATE jobs SET lease_owner = NULL, lease_token = NULL, lease_until = NULL "
                "WHERE id = ? AND lease_token = ?",
                [(job["id"], job["lease_token"]) for job in expired],
            )
            # outbox: the abandoned executions' events, in this transaction
            write_events(db, [execution_from_row(row) for row in abandoned], event_source)
            return abandoned

        return [execution_from_row(row) for row in await self._run(reap)]

    # -- executions -----------------------------------------------------------------------------

    async def get_execution(self, execution_id: str) -> Execution | None:
        sql = "SELECT * FROM executions WHERE id = ?"
        row = await self._run(lambda db: db.execute(sql, (execution_id,)).fetchone())
        return None if row is None else execution_from_row(row)

    async def list_executions(self, query: ExecutionQuery) -> list[Execution]:
        where, args = execution_filters(query)
        sql = "SELECT * FROM executions"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY scheduled_at DESC, id DESC LIMIT ?"
        rows = await self._run(lambda db: db.execute(sql, (*args, query.limit)).fetchall())
        return [execution_from_row(row) for row in rows]


def read_due(
    db: sqlite3.Connection, reads: Sequence[tuple[str, tuple[object, ...]]], limit: int
) -> list[sqlite3.Row]:
    """The rows of each read in turn (each ends in `LIMIT ?`; no job in two of them), up to
    `limit`: a later read stops where the earlier ones left off."""
    rows: list[sqlite3.Row] = []
    for sql, args in reads:
        if len(rows) >= limit:
            break
        rows += db.execute(sql, (*args, limit - len(rows))).fetchall()
    return rows
