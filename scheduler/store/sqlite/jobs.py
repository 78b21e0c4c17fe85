"""Jobs and their history on SQLite, as ops change them (the store's JobStore role)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from tickd.scheduler.codec import (
    micros,
)
from tickd.scheduler.model import Job
from tickd.scheduler.ports.backends import (
    DuplicateJobName,
    JobChange,
    JobQuery,
    unchanged_state,
)
from tickd.scheduler.store.sqlite.base import SQLiteTables
from tickd.scheduler.store.sqlite.rows import (
    from_row,
    job_doc,
    job_from_row,
    job_row,
    to_row,
)
from tickd.scheduler.store.sqlite.schema import (
    DEFINITION_COLUMNS,
    JOB_COLUMNS,
)
from tickd.scheduler.store.sqlite.statements import (
    insert_sql,
    job_filters,
    record_change_row,
)


class SQLiteJobs(SQLiteTables):
    """The jobs of SQLiteStore."""

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
            # Nothing would re-drive them any more: handled, kept for reading until pruned.
            db.execute(
                "UPDATE executions SET dead_letter = 'discarded' "
                "WHERE job_id = ? AND dead_letter IN ('open', 'redriving')",
                (job_id,),
            )
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
