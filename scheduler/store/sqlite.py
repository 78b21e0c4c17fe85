"""The embedded store: one SQLite file in WAL mode, for a fresh checkout and single-host setups.

sqlite3 blocks, so every statement runs on one dedicated thread that owns the connection; a batch
of the engine is one transaction there, not one per job. Times are integer microseconds since the
epoch, so a compare-and-set compares exactly what it read.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from scheduler.codec import (
    exact_micros,
    micros,
    to_json_ready,
)
from scheduler.model import DeadLetter, Execution, ExecutionError, Job, Status
from scheduler.ports import (
    Backlog,
    Claim,
    DuplicateJobName,
    ExecutionQuery,
    Finish,
    JobChange,
    JobQuery,
    OutboxBacklog,
    OutboxEvent,
    Retention,
    RunRequest,
    StoreError,
)
from scheduler.storage.sqlite import (
    SQLiteFile,
)
from scheduler.store.sqlite_rows import (
    DEFINITION_COLUMNS,
    EXECUTION_COLUMNS,
    FREE,
    JOB_COLUMNS,
    REQUEST_COLUMNS,
    SCHEMA,
    UNHANDLED,
    add_missing_columns,
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
    outbox_event_from_row,
    record_change_row,
    release_sql,
    to_row,
    write_events,
)

T = TypeVar("T")


class SQLiteStore(SQLiteFile):
    SCHEMA = SCHEMA

    # -- plumbing -------------------------------------------------------------------------------

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        def call() -> T:
            if self._db is None:
                raise StoreError("the store is not open")
            try:
                with self._db:  # one transaction: committed on return, rolled back on error
                    return fn(self._db)
            except sqlite3.Error as exc:
                error = StoreError(f"sqlite: {exc}")
                # A constraint no retry satisfies; a busy or locked database is worth another go.
                error.transient = not isinstance(exc, sqlite3.IntegrityError)
                raise error from exc

        return await self._in_thread(call)

    def _connected(self, db: sqlite3.Connection) -> sqlite3.Connection:
        add_missing_columns(db)
        # Python's sqlite3 opens transactions itself only for DML; make them explicit.
        db.isolation_level = "DEFERRED"
        return db

    async def ping(self) -> None:
        await self._run(lambda db: db.execute("SELECT 1").fetchone())

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

    async def replace_job(self, job: Job, expected_revision: int, change: JobChange) -> Job | None:
        values = to_row(job_doc(job), DEFINITION_COLUMNS)
        assignments = ", ".join(f"{column} = ?" for column in DEFINITION_COLUMNS)
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

    async def _one_job(self, sql: str, args: tuple[Any, ...]) -> Job | None:
        row = await self._run(lambda db: db.execute(sql, args).fetchone())
        return None if row is None else job_from_row(row)

    async def list_jobs(self, query: JobQuery | None = None) -> list[Job]:
        query = query or JobQuery()
        where, args = job_filters(query)
        sql = "SELECT * FROM jobs" + (" WHERE " + " AND ".join(where) if where else "")
        return await self._jobs(sql + " ORDER BY name LIMIT ?", (*args, query.limit))

    async def _jobs(self, sql: str, args: Sequence[Any]) -> list[Job]:
        rows = await self._run(lambda db: db.execute(sql, args).fetchall())
        return [job_from_row(row) for row in rows]

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

    # -- run requests (trigger, retry, backfill) -------------------------------------------------

    async def record_change(self, change: JobChange) -> None:
        await self._run(lambda db: record_change_row(db, change))

    async def run_request_pending(self, job_id: str, scheduled_at: datetime) -> bool:
        sql = "SELECT 1 FROM run_requests WHERE job_id = ? AND scheduled_at = ? LIMIT 1"
        args = (job_id, micros(scheduled_at))
        return await self._run(lambda db: db.execute(sql, args).fetchone()) is not None

    async def count_pending_requests(self, job_id: str, *, reason: str) -> int:
        sql = "SELECT COUNT(*) FROM run_requests WHERE job_id = ? AND reason = ?"
        row = await self._run(lambda db: db.execute(sql, (job_id, reason)).fetchone())
        return int(row[0])

    async def insert_run_requests(self, requests: Sequence[RunRequest]) -> None:
        rows = [to_row(dataclasses.asdict(r), REQUEST_COLUMNS) for r in requests]
        sql = insert_sql("run_requests", REQUEST_COLUMNS).replace("INSERT", "INSERT OR IGNORE", 1)
        await self._run(lambda db: db.executemany(sql, rows))

    async def due_run_requests(self, now: datetime, limit: int) -> list[tuple[RunRequest, Job]]:
        sql = (
            "SELECT r.id AS request_id FROM run_requests r JOIN jobs j ON j.id = r.job_id "
            "WHERE r.not_before <= ? AND j.lease_token IS NULL ORDER BY r.not_before, r.id LIMIT ?"
        )

        def due(db: sqlite3.Connection) -> list[tuple[sqlite3.Row, sqlite3.Row]]:
            pairs = []
            for (request_id,) in db.execute(sql, (micros(now), limit)).fetchall():
                request = db.execute("SELECT * FROM run_requests WHERE id = ?", (request_id,))
                row = request.fetchone()
                job = db.execute("SELECT * FROM jobs WHERE id = ?", (row["job_id"],)).fetchone()
                pairs.append((row, job))
            return pairs

        return [
            (RunRequest(**from_row(request, key="id")), job_from_row(job))
            for request, job in await self._run(due)
        ]

    async def claim_run_requests(
        self, requests: Sequence[RunRequest], claims: Sequence[Claim], now: datetime
    ) -> list[tuple[RunRequest, Job]]:
        update = (
            "UPDATE jobs SET lease_owner = ?, lease_until = ?, fence = fence + 1, "
            "lease_token = fence + 1 WHERE id = ? AND revision = ? AND lease_token IS NULL"
        )

        def claim(db: sqlite3.Connection) -> list[tuple[RunRequest, sqlite3.Row]]:
            won = []
            for request, c in zip(requests, claims, strict=True):
                if db.execute(update, (c.owner, micros(c.until), c.job_id, c.revision)).rowcount:
                    db.execute("DELETE FROM run_requests WHERE id = ?", (request.id,))
                    job = db.execute("SELECT * FROM jobs WHERE id = ?", (c.job_id,)).fetchone()
                    won.append((request, job))
            return won

        return [(request, job_from_row(row)) for request, row in await self._run(claim)]

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
        rows = await self._run(
            lambda db: db.execute(sql, (job_id, *times, job_id, *times)).fetchall()
        )
        return {from_micros(row[0]) for row in rows if row[0] is not None}  # type: ignore[misc]

    # -- the engine's batch operations ----------------------------------------------------------

    async def due_jobs(
        self,
        now: datetime,
        limit: int,
        *,
        exclude_handlers: Sequence[str] = (),
        starved_before: datetime | None = None,
    ) -> list[Job]:
        excluded = ",".join("?" * len(exclude_handlers))
        sql = f"SELECT * FROM jobs WHERE {FREE} AND next_run_at <= ?"
        if excluded:
            sql += f" AND handler NOT IN ({excluded})"
        if starved_before is None:
            sql += " ORDER BY priority, next_run_at LIMIT ?"
            return await self._jobs(sql, (micros(now), *exclude_handlers, limit))
        # The starved first, as if more urgent than critical, oldest first.
        sql += " ORDER BY CASE WHEN next_run_at <= ? THEN -1 ELSE priority END, next_run_at LIMIT ?"
        return await self._jobs(
            sql, (micros(now), *exclude_handlers, micros(starved_before), limit)
        )

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

        return [job_from_row(row) for row in await self._run(claim)]

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

        await self._run(insert)

    async def finish_executions(
        self, finishes: Sequence[Finish], *, event_source: str | None = None
    ) -> list[bool]:
        """One transaction for the batch: the executions and their events, their dead letters,
        then each job's fenced release."""
        rows = [execution_row(f.execution) for f in finishes]
        sql = insert_sql("executions", EXECUTION_COLUMNS).replace("INSERT", "REPLACE", 1)
        releases = [release_sql(f.execution, f.advance) for f in finishes]

        def finish(db: sqlite3.Connection) -> list[bool]:
            db.executemany(sql, rows)
            write_events(db, [f.execution for f in finishes], event_source)
            self._settle_and_redrive(db, finishes)
            return [bool(db.execute(release, args).rowcount) for release, args in releases]

        return await self._run(finish) if finishes else []

    @staticmethod
    def _settle_and_redrive(db: sqlite3.Connection, finishes: Sequence[Finish]) -> None:
        settle = (
            "UPDATE executions SET dead_letter = ? WHERE job_id = ? AND scheduled_at = ? "
            f"AND id != ? AND dead_letter IN {UNHANDLED}"
        )
        db.executemany(
            settle,
            [
                (DeadLetter.REDRIVEN, e.job_id, micros(e.scheduled_at), e.id)
                for f in finishes
                if f.settles
                for e in [f.execution]
            ],
        )
        requests = [f.redrive for f in finishes if f.redrive is not None]
        queue = insert_sql("run_requests", REQUEST_COLUMNS).replace("INSERT", "INSERT OR IGNORE", 1)
        for request, change in requests:
            if db.execute(queue, to_row(dataclasses.asdict(request), REQUEST_COLUMNS)).rowcount:
                record_change_row(db, change)

    async def beat(self, instance: str, now: datetime) -> None:
        sql = (
            "INSERT INTO instances (id, beat_at) VALUES (?, ?) "
            "ON CONFLICT (id) DO UPDATE SET beat_at = excluded.beat_at"
        )
        await self._run(lambda db: db.execute(sql, (instance, micros(now))))

    async def expire_lapsed_leases(self, lapsed_before: datetime, now: datetime, alive: str) -> int:
        sql = (
            "UPDATE jobs SET lease_until = ? WHERE lease_token IS NOT NULL AND lease_until > ? "
            "AND lease_owner != ? AND lease_owner IN (SELECT id FROM instances WHERE beat_at < ?)"
        )
        at = exact_micros(now)
        args = (at - 1, at, alive, exact_micros(lapsed_before))
        return int(await self._run(lambda db: db.execute(sql, args).rowcount))

    async def give_back(self, leases: Sequence[tuple[str, int]]) -> None:
        sql = (
            "UPDATE jobs SET lease_owner = NULL, lease_token = NULL, lease_until = NULL "
            "WHERE id = ? AND lease_token = ?"
        )
        if leases:
            await self._run(lambda db: db.executemany(sql, list(leases)))

    async def reap_expired_leases(
        self, now: datetime, *, event_source: str | None = None
    ) -> list[Execution]:
        error = ExecutionError(
            type="LeaseExpired", message="the lease expired before the run ended"
        )
        error_json = json.dumps(to_json_ready({"type": error.type, "message": error.message}))
        at = micros(now)

        def reap(db: sqlite3.Connection) -> list[sqlite3.Row]:
            expired = db.execute(
                "SELECT id, lease_token FROM jobs WHERE lease_token IS NOT NULL "
                "AND lease_until < ?",
                (at,),
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

    # -- the outbox -------------------------------------------------------------------------------

    async def unsent_events(self, limit: int) -> list[OutboxEvent]:
        sql = "SELECT * FROM outbox WHERE sent_at IS NULL ORDER BY seq LIMIT ?"
        rows = await self._run(lambda db: db.execute(sql, (limit,)).fetchall())
        return [outbox_event_from_row(row) for row in rows]

    async def mark_events_sent(self, event_ids: Sequence[str], now: datetime) -> None:
        sql = "UPDATE outbox SET sent_at = ? WHERE id = ? AND sent_at IS NULL"
        rows = [(micros(now), event_id) for event_id in event_ids]
        if rows:
            await self._run(lambda db: db.executemany(sql, rows))

    async def prune_sent_events(self, before: datetime, *, limit: int) -> int:
        sql = (
            "DELETE FROM outbox WHERE seq IN (SELECT seq FROM outbox WHERE sent_at IS NOT NULL "
            "AND sent_at < ? ORDER BY sent_at LIMIT ?)"
        )
        args = (micros(before), limit)
        return int(await self._run(lambda db: db.execute(sql, args).rowcount))

    async def outbox_backlog(self) -> OutboxBacklog:
        sql = "SELECT count(*), min(written_at) FROM outbox WHERE sent_at IS NULL"
        row = await self._run(lambda db: db.execute(sql).fetchone())
        return OutboxBacklog(unsent=int(row[0]), oldest_written_at=from_micros(row[1]))

    # -- dead letters and retention ----------------------------------------------------------------

    async def mark_dead_letters(
        self, execution_ids: Sequence[str], *, states: Sequence[DeadLetter], to: DeadLetter
    ) -> set[str]:
        if not execution_ids or not states:
            return set()
        ids = ",".join("?" * len(execution_ids))
        marks = ",".join("?" * len(states))
        sql = (
            f"UPDATE executions SET dead_letter = ? WHERE id IN ({ids}) "
            f"AND dead_letter IN ({marks}) RETURNING id"
        )
        args = (str(to), *execution_ids, *(str(state) for state in states))
        rows = await self._run(lambda db: db.execute(sql, args).fetchall())
        return {row[0] for row in rows}

    async def count_dead_letters(self) -> dict[str, int]:
        sql = "SELECT handler, count(*) FROM executions WHERE dead_letter = ? GROUP BY handler"
        rows = await self._run(lambda db: db.execute(sql, (DeadLetter.OPEN,)).fetchall())
        return {row[0]: int(row[1]) for row in rows}

    async def prune_executions(self, retention: Retention, now: datetime, *, limit: int) -> int:
        """The age bound walks executions_by_finish; the count bound ranks each job's
        executions in one pass of executions_by_job (a window function)."""
        where, args = _retention_scope(retention)
        prunable = (
            f"status != 'running' AND (dead_letter IS NULL OR dead_letter NOT IN {UNHANDLED})"
        )
        statements: list[tuple[str, tuple[Any, ...]]] = []
        if retention.days:
            before = micros(now - timedelta(days=retention.days))
            statements.append(
                (
                    "SELECT e.id FROM executions e WHERE e.finished_at < ? "
                    f"AND {prunable} {where} AND EXISTS (SELECT 1 FROM executions n WHERE "
                    "n.job_id = e.job_id AND (n.scheduled_at, n.id) > (e.scheduled_at, e.id)) "
                    "ORDER BY e.finished_at LIMIT ?",
                    (before, *args),
                )
            )
        if retention.max_per_job:
            statements.append(
                (
                    "SELECT id FROM (SELECT id, status, dead_letter, ROW_NUMBER() OVER ("
                    "PARTITION BY job_id ORDER BY scheduled_at DESC, id DESC) AS newer "
                    f"FROM executions e WHERE 1 = 1 {where}) "
                    f"WHERE newer > ? AND {prunable} LIMIT ?",
                    (*args, retention.max_per_job),
                )
            )

        def prune(db: sqlite3.Connection) -> int:
            deleted = 0
            for select, select_args in statements:
                if deleted >= limit:
                    break
                ids = [row[0] for row in db.execute(select, (*select_args, limit - deleted))]
                marks = ",".join("?" * len(ids))
                if ids:
                    deleted += db.execute(
                        f"DELETE FROM executions WHERE id IN ({marks})", ids
                    ).rowcount
            return deleted

        return await self._run(prune)

    async def prune_changes(self, before: datetime, *, limit: int) -> int:
        sql = (
            "DELETE FROM job_changes WHERE id IN (SELECT c.id FROM job_changes c WHERE c.at < ? "
            "AND EXISTS (SELECT 1 FROM job_changes n WHERE n.job_id = c.job_id "
            "AND (n.at, n.id) > (c.at, c.id)) ORDER BY c.at LIMIT ?)"
        )
        args = (micros(before), limit)
        return int(await self._run(lambda db: db.execute(sql, args).rowcount))


def _retention_scope(retention: Retention) -> tuple[str, tuple[str, ...]]:
    """The executions a retention covers, as a condition on `e` to AND with others."""
    if retention.handler is not None:
        return "AND e.handler = ?", (retention.handler,)
    if retention.except_handlers:
        marks = ",".join("?" * len(retention.except_handlers))
        return f"AND e.handler NOT IN ({marks})", retention.except_handlers
    return "", ()
