"""The embedded store: one SQLite file in WAL mode, for a fresh checkout and single-host setups.

sqlite3 blocks, so every statement runs on one dedicated thread that owns the connection; a batch
of the engine is one transaction there, not one per job. Times are integer microseconds since the
epoch, so a compare-and-set compares exactly what it read.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from scheduler.codec import (
    EPOCH,
    Doc,
    execution_from_doc,
    execution_to_doc,
    job_from_doc,
    job_to_doc,
    micros,
    summary_to_doc,
    to_json_ready,
)
from scheduler.model import Execution, ExecutionError, Job, Status
from scheduler.ports import (
    Advance,
    Claim,
    DuplicateJobName,
    ExecutionQuery,
    JobChange,
    JobQuery,
    RunRequest,
    StoreError,
)
from scheduler.urls import local_path

T = TypeVar("T")

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    handler TEXT NOT NULL,
    params TEXT NOT NULL,
    schedule TEXT NOT NULL,
    enabled INTEGER NOT NULL,
    next_run_at INTEGER,
    timeout_seconds REAL NOT NULL,
    max_retries INTEGER NOT NULL,
    priority INTEGER NOT NULL,
    misfire TEXT NOT NULL,
    jitter_seconds REAL NOT NULL,
    lease_owner TEXT,
    lease_token INTEGER,
    lease_until INTEGER,
    fence INTEGER NOT NULL,
    revision INTEGER NOT NULL,
    consecutive_failures INTEGER NOT NULL,
    paused_reason TEXT,
    last_execution TEXT,
    system INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
-- The due query walks this index in order: free, enabled jobs by urgency.
CREATE INDEX IF NOT EXISTS jobs_due ON jobs (priority, next_run_at)
    WHERE enabled = 1 AND lease_token IS NULL;
CREATE INDEX IF NOT EXISTS jobs_next ON jobs (next_run_at)
    WHERE enabled = 1 AND lease_token IS NULL;
CREATE INDEX IF NOT EXISTS jobs_leased ON jobs (lease_until) WHERE lease_token IS NOT NULL;

CREATE TABLE IF NOT EXISTS executions (
    id TEXT PRIMARY KEY,
    job_id TEXT NOT NULL,
    job_name TEXT NOT NULL,
    handler TEXT NOT NULL,
    scheduled_at INTEGER NOT NULL,
    started_at INTEGER,
    finished_at INTEGER,
    duration_ms REAL,
    status TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    error TEXT,
    result TEXT,
    owner TEXT,
    token INTEGER
);
CREATE INDEX IF NOT EXISTS executions_by_job ON executions (job_id, scheduled_at DESC, id DESC);
CREATE INDEX IF NOT EXISTS executions_by_time ON executions (scheduled_at DESC, id DESC);
CREATE INDEX IF NOT EXISTS executions_by_status ON executions (status, scheduled_at DESC);

CREATE TABLE IF NOT EXISTS job_changes (
    id TEXT PRIMARY KEY,
    job_id TEXT NOT NULL,
    job_name TEXT NOT NULL,
    at INTEGER NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    changes TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS job_changes_by_job ON job_changes (job_id, at DESC, id DESC);

CREATE TABLE IF NOT EXISTS run_requests (
    id TEXT PRIMARY KEY,
    job_id TEXT NOT NULL,
    scheduled_at INTEGER NOT NULL,
    reason TEXT NOT NULL,
    not_before INTEGER NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS run_requests_due ON run_requests (not_before);
CREATE INDEX IF NOT EXISTS run_requests_by_job ON run_requests (job_id, scheduled_at);
"""

JOB_COLUMNS = [
    "id",
    "name",
    "handler",
    "params",
    "schedule",
    "enabled",
    "next_run_at",
    "timeout_seconds",
    "max_retries",
    "priority",
    "misfire",
    "jitter_seconds",
    "lease_owner",
    "lease_token",
    "lease_until",
    "fence",
    "revision",
    "consecutive_failures",
    "paused_reason",
    "last_execution",
    "system",
    "created_at",
    "updated_at",
]
EXECUTION_COLUMNS = [
    "id",
    "job_id",
    "job_name",
    "handler",
    "scheduled_at",
    "started_at",
    "finished_at",
    "duration_ms",
    "status",
    "attempts",
    "error",
    "result",
    "owner",
    "token",
]
CHANGE_COLUMNS = ["id", "job_id", "job_name", "at", "actor", "action", "changes"]
REQUEST_COLUMNS = ["id", "job_id", "scheduled_at", "reason", "not_before", "created_at"]
# What ops may change of a job; the lease, fence and run state are the engine's.
DEFINITION_COLUMNS = [
    "name",
    "handler",
    "params",
    "schedule",
    "enabled",
    "next_run_at",
    "timeout_seconds",
    "max_retries",
    "priority",
    "misfire",
    "jitter_seconds",
    "consecutive_failures",
    "paused_reason",
    "system",
    "updated_at",
]
JSON_COLUMNS = {"params", "schedule", "misfire", "last_execution", "error", "result", "changes"}
TIME_COLUMNS = {
    "next_run_at",
    "lease_until",
    "created_at",
    "updated_at",
    "scheduled_at",
    "started_at",
    "finished_at",
    "at",
    "not_before",
}
FREE = "enabled = 1 AND lease_token IS NULL"


def from_micros(value: int | None) -> datetime | None:
    return None if value is None else EPOCH + timedelta(microseconds=value)


class SQLiteFile:
    """What the job store and the product store share: one SQLite file (or memory) in WAL mode
    with its schema, its connection owned by one thread of its own, since sqlite3 blocks."""

    SCHEMA: ClassVar[str] = ""
    THREAD: ClassVar[str] = "tickd-sqlite"

    def __init__(self, url: str) -> None:
        self._path = local_path(url) or ":memory:"
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self.THREAD)
        self._db: sqlite3.Connection | None = None

    async def _in_thread(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    async def open(self) -> None:
        def connect() -> None:
            if self._path != ":memory:":
                Path(self._path).parent.mkdir(parents=True, exist_ok=True)
            # Autocommit while the schema is applied; `_connected` chooses the transactions.
            db = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None)
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA busy_timeout=5000")
            db.executescript(self.SCHEMA)
            self._db = self._connected(db)

        await self._in_thread(connect)

    def _connected(self, db: sqlite3.Connection) -> sqlite3.Connection:
        return db

    async def close(self) -> None:
        def disconnect() -> None:
            if self._db is not None:
                self._db.close()
                self._db = None

        await self._in_thread(disconnect)
        self._executor.shutdown(wait=True)


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
            except sqlite3.IntegrityError:
                raise
            except sqlite3.Error as exc:
                raise StoreError(f"sqlite: {exc}") from exc

        return await self._in_thread(call)

    def _connected(self, db: sqlite3.Connection) -> sqlite3.Connection:
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
            _record(db, change)

        await self._run(insert)

    async def replace_job(self, job: Job, expected_revision: int, change: JobChange) -> Job | None:
        values = _to_row(_job_doc(job), DEFINITION_COLUMNS)
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
            _record(db, change)
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
        where, args = _job_filters(query)
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
            _record(db, change)
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
        return [JobChange(**_from_row(row, key="id")) for row in rows]

    # -- run requests (trigger, retry, backfill) -------------------------------------------------

    async def record_change(self, change: JobChange) -> None:
        await self._run(lambda db: _record(db, change))

    async def run_request_pending(self, job_id: str, scheduled_at: datetime) -> bool:
        sql = "SELECT 1 FROM run_requests WHERE job_id = ? AND scheduled_at = ? LIMIT 1"
        args = (job_id, micros(scheduled_at))
        return await self._run(lambda db: db.execute(sql, args).fetchone()) is not None

    async def insert_run_requests(self, requests: Sequence[RunRequest]) -> None:
        rows = [_to_row(dataclasses.asdict(r), REQUEST_COLUMNS) for r in requests]
        sql = insert_sql("run_requests", REQUEST_COLUMNS)
        await self._run(lambda db: db.executemany(sql, rows))

    async def due_run_requests(self, now: datetime, limit: int) -> list[tuple[RunRequest, Job]]:
        sql = (
            "SELECT r.id AS request_id FROM run_requests r JOIN jobs j ON j.id = r.job_id "
            "WHERE r.not_before <= ? AND j.lease_token IS NULL ORDER BY r.not_before LIMIT ?"
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
            (RunRequest(**_from_row(request, key="id")), job_from_row(job))
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
        self, now: datetime, limit: int, *, exclude_handlers: Sequence[str] = ()
    ) -> list[Job]:
        excluded = ",".join("?" * len(exclude_handlers))
        sql = f"SELECT * FROM jobs WHERE {FREE} AND next_run_at <= ?"
        if excluded:
            sql += f" AND handler NOT IN ({excluded})"
        sql += " ORDER BY priority, next_run_at LIMIT ?"
        return await self._jobs(sql, (micros(now), *exclude_handlers, limit))

    async def count_due(self, now: datetime) -> int:
        sql = f"SELECT count(*) FROM jobs WHERE {FREE} AND next_run_at <= ?"
        row = await self._run(lambda db: db.execute(sql, (micros(now),)).fetchone())
        return int(row[0])

    async def next_due_at(self) -> datetime | None:
        sql = f"SELECT min(next_run_at) FROM jobs WHERE {FREE}"
        row = await self._run(lambda db: db.execute(sql).fetchone())
        return from_micros(row[0])

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

    async def insert_executions(self, executions: Sequence[Execution]) -> None:
        rows = [execution_row(e) for e in executions]
        sql = insert_sql("executions", EXECUTION_COLUMNS)
        await self._run(lambda db: db.executemany(sql, rows))

    async def finish_execution(self, execution: Execution, advance: Advance | None) -> bool:
        row = execution_row(execution)
        sql = insert_sql("executions", EXECUTION_COLUMNS).replace("INSERT", "REPLACE", 1)
        release, args = release_sql(execution, advance)

        def finish(db: sqlite3.Connection) -> bool:
            db.execute(sql, row)
            return bool(db.execute(release, args).rowcount)

        return await self._run(finish)

    async def reap_expired_leases(self, now: datetime) -> list[Execution]:
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
            return abandoned

        return [execution_from_row(row) for row in await self._run(reap)]

    # -- executions -----------------------------------------------------------------------------

    async def get_execution(self, execution_id: str) -> Execution | None:
        sql = "SELECT * FROM executions WHERE id = ?"
        row = await self._run(lambda db: db.execute(sql, (execution_id,)).fetchone())
        return None if row is None else execution_from_row(row)

    async def list_executions(self, query: ExecutionQuery) -> list[Execution]:
        where, args = _execution_filters(query)
        sql = "SELECT * FROM executions"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY scheduled_at DESC, id DESC LIMIT ?"
        rows = await self._run(lambda db: db.execute(sql, (*args, query.limit)).fetchall())
        return [execution_from_row(row) for row in rows]


def insert_sql(table: str, columns: Sequence[str]) -> str:
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"


def release_sql(execution: Execution, advance: Advance | None) -> tuple[str, tuple[Any, ...]]:
    """The fenced update that ends a run: applies only while the run's token holds the lease."""
    clear = "lease_owner = NULL, lease_token = NULL, lease_until = NULL"
    fence = (execution.job_id, execution.token)
    if advance is None:
        return f"UPDATE jobs SET {clear} WHERE id = ? AND lease_token = ?", fence
    summary = json.dumps(to_json_ready(summary_to_doc(advance.last_execution)))
    # The schedule moves only if ops did not change the job during the run (see Advance).
    unchanged = "CASE WHEN revision = ? THEN ? ELSE {0} END"
    return (
        f"UPDATE jobs SET {clear}, consecutive_failures = ?, last_execution = ?, "
        f"next_run_at = {unchanged.format('next_run_at')}, "
        f"enabled = {unchanged.format('enabled')}, "
        f"paused_reason = {unchanged.format('paused_reason')} "
        "WHERE id = ? AND lease_token = ?",
        (
            advance.consecutive_failures,
            summary,
            advance.revision,
            micros(advance.next_run_at),
            advance.revision,
            int(advance.enabled),
            advance.revision,
            advance.paused_reason,
            *fence,
        ),
    )


def _record(db: sqlite3.Connection, change: JobChange | None) -> None:
    if change is not None:
        db.execute(
            insert_sql("job_changes", CHANGE_COLUMNS),
            _to_row(dataclasses.asdict(change), CHANGE_COLUMNS),
        )


def _job_filters(query: JobQuery) -> tuple[list[str], list[Any]]:
    conditions: list[tuple[str, Any]] = [
        ("handler = ?", query.handler),
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


def _execution_filters(query: ExecutionQuery) -> tuple[list[str], list[Any]]:
    conditions: list[tuple[str, Any]] = [
        ("job_id = ?", query.job_id),
        ("status = ?", None if query.status is None else str(query.status)),
        ("handler = ?", query.handler),
        ("scheduled_at >= ?", micros(query.since)),
        ("scheduled_at < ?", micros(query.until)),
    ]
    where = [condition for condition, value in conditions if value is not None]
    args = [value for _, value in conditions if value is not None]
    if query.before is not None:
        where.append("(scheduled_at, id) < (?, ?)")
        args += [micros(query.before[0]), query.before[1]]
    return where, args


def _to_row(doc: Doc, columns: Sequence[str]) -> tuple[Any, ...]:
    values = []
    for column in columns:
        value = doc[column]
        if column in JSON_COLUMNS:
            value = None if value is None else json.dumps(to_json_ready(value))
        elif column in TIME_COLUMNS:
            value = micros(value)
        elif isinstance(value, bool):
            value = int(value)
        values.append(value)
    return tuple(values)


def _from_row(row: sqlite3.Row, key: str = "_id") -> Doc:
    doc: Doc = {}
    for column in row.keys():  # noqa: SIM118 - sqlite3.Row is not a mapping
        value = row[column]
        if column in JSON_COLUMNS and value is not None:
            value = json.loads(value)
        elif column in TIME_COLUMNS:
            value = from_micros(value)
        doc[column] = value
    doc[key] = doc.pop("id")
    return doc


def _job_doc(job: Job) -> Doc:
    doc = job_to_doc(job)
    doc["id"] = doc.pop("_id")
    return doc


def job_row(job: Job) -> tuple[Any, ...]:
    doc = _job_doc(job)
    lease = doc.pop("lease") or {}
    doc.update(
        lease_owner=lease.get("owner"),
        lease_token=lease.get("token"),
        lease_until=lease.get("until"),
    )
    return _to_row(doc, JOB_COLUMNS)


def job_from_row(row: sqlite3.Row) -> Job:
    doc = _from_row(row)
    owner, token, until = doc.pop("lease_owner"), doc.pop("lease_token"), doc.pop("lease_until")
    doc["lease"] = None if token is None else {"owner": owner, "token": token, "until": until}
    doc["misfire"] = doc["misfire"] or {}
    return job_from_doc(doc)


def execution_row(execution: Execution) -> tuple[Any, ...]:
    doc = execution_to_doc(execution)
    doc["id"] = doc.pop("_id")
    return _to_row(doc, EXECUTION_COLUMNS)


def execution_from_row(row: sqlite3.Row) -> Execution:
    return execution_from_doc(_from_row(row))
