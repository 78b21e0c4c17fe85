"""Runs asked for outside the schedule (trigger, retry, backfill) on SQLite: queued, read when
due, and claimed with their jobs."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import TypeVar

from scheduler.codec import (
    micros,
)
from scheduler.model import Job
from scheduler.ports import (
    Claim,
    RunRequest,
)
from scheduler.store.sqlite_base import SQLiteTables
from scheduler.store.sqlite_rows import (
    REQUEST_COLUMNS,
    from_micros,
    from_row,
    insert_sql,
    job_from_row,
    to_row,
)

T = TypeVar("T")


class SQLiteRequests(SQLiteTables):
    """The run requests of SQLiteStore."""

    # -- run requests (trigger, retry, backfill) -------------------------------------------------

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

    async def due_run_requests(
        self, now: datetime, limit: int, *, exclude_handlers: Sequence[str] = ()
    ) -> list[tuple[RunRequest, Job]]:
        excluded = ",".join("?" * len(exclude_handlers))
        sql = (
            "SELECT r.id AS request_id FROM run_requests r JOIN jobs j ON j.id = r.job_id "
            "WHERE r.not_before <= ? AND j.lease_token IS NULL"
            + (f" AND j.handler NOT IN ({excluded})" if excluded else "")
            + " ORDER BY r.not_before, r.id LIMIT ?"
        )
        args = (micros(now), *exclude_handlers, limit)

        def due(db: sqlite3.Connection) -> list[tuple[sqlite3.Row, sqlite3.Row]]:
            pairs = []
            for (request_id,) in db.execute(sql, args).fetchall():
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
