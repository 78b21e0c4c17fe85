"""Jobs and their history on PostgreSQL, as ops change them (the store's JobStore role)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import asyncpg

from tickd.scheduler.codec import micros
from tickd.scheduler.model import Job
from tickd.scheduler.partitions import job_partition
from tickd.scheduler.ports.backends import DuplicateJobName, JobChange, JobQuery, unchanged_state
from tickd.scheduler.store.postgresql.base import Args, PostgresTables, Tx
from tickd.scheduler.store.postgresql.statements import (
    COLUMN_TYPES,
    IGNORE,
    insert_rows,
    job_filters,
    record_change_row,
)
from tickd.scheduler.store.sqlite.rows import Row, from_row, job_doc, job_from_row, job_row, to_row
from tickd.scheduler.store.sqlite.schema import DEFINITION_COLUMNS, JOB_COLUMNS

# A job's row, then its partition (a column of PostgreSQL's alone).
COLUMNS = [*JOB_COLUMNS, "part"]
INSERT_JOB = (
    f"INSERT INTO jobs ({', '.join(COLUMNS)}) "
    f"VALUES ({', '.join(f'${n}' for n in range(1, len(COLUMNS) + 1))})"
)


class PostgresJobs(PostgresTables):
    """The jobs of PostgresStore."""

    async def insert_job(self, job: Job, change: JobChange | None = None) -> None:
        row = self._row(job)

        async def insert(tx: Tx) -> None:
            try:
                await tx.execute(INSERT_JOB, *row)
            except asyncpg.UniqueViolationError:
                raise DuplicateJobName(job.name) from None
            await record_change_row(tx, change)

        await (self._run(insert) if change is not None else self._single(insert))

    async def replace_job(
        self, job: Job, expected_revision: int, change: JobChange, *, read: Job | None = None
    ) -> Job | None:
        columns = [c for c in DEFINITION_COLUMNS if c not in unchanged_state(job, read)]
        args = Args()
        assignments = ", ".join(
            f"{column} = {args(value, COLUMN_TYPES[column])}"
            for column, value in zip(columns, to_row(job_doc(job), columns), strict=True)
        )
        # The partition follows the concurrency key: the key's owner admits the job's runs.
        part = args(job_partition(job, self.partition_count), "int4")
        sql = (
            f"UPDATE jobs SET {assignments}, part = {part}, revision = revision + 1 "
            f"WHERE id = {args(job.id, 'text')} AND revision = {args(expected_revision, 'int4')} "
            "RETURNING *"
        )

        async def replace(tx: Tx) -> Row | None:
            try:
                row = await tx.fetchrow(sql, *args.values)
            except asyncpg.UniqueViolationError:
                raise DuplicateJobName(job.name) from None
            if row is not None:
                await record_change_row(tx, change)
            return row

        row = await self._run(replace)
        return None if row is None else job_from_row(row)

    async def insert_missing_jobs(self, jobs: Sequence[Job]) -> list[Job]:
        if not jobs:
            return []
        args = Args()
        rows = [self._row(job) for job in jobs]
        sql = insert_rows(args, "jobs", COLUMNS, rows, f"{IGNORE} RETURNING id")
        inserted = {row["id"] for row in await self._fetch(sql, *args.values)}
        return [job for job in jobs if job.id in inserted]

    def _row(self, job: Job) -> tuple[Any, ...]:
        return (*job_row(job), job_partition(job, self.partition_count))

    async def get_job(self, job_id: str) -> Job | None:
        return await self._one_job("SELECT * FROM jobs WHERE id = $1", job_id)

    async def get_job_by_name(self, name: str) -> Job | None:
        return await self._one_job("SELECT * FROM jobs WHERE name = $1", name)

    async def list_jobs(self, query: JobQuery | None = None) -> list[Job]:
        query = query or JobQuery()
        args = Args()
        where = job_filters(args, query)
        sql = "SELECT * FROM jobs" + (" WHERE " + " AND ".join(where) if where else "")
        sql += f" ORDER BY name LIMIT {args(query.limit, 'int8')}"
        return await self._jobs(sql, args.values)

    async def delete_job(
        self, job_id: str, change: JobChange | None = None, *, expected_revision: int | None = None
    ) -> bool:
        sql = "DELETE FROM jobs WHERE id = $1"
        args: list[object] = [job_id]
        if expected_revision is not None:
            sql += " AND revision = $2"
            args.append(expected_revision)

        async def delete(tx: Tx) -> bool:
            if not await tx.execute(sql, *args):
                return False
            await tx.execute("DELETE FROM run_requests WHERE job_id = $1", job_id)
            # Nothing would re-drive them any more: handled, kept for reading until pruned.
            await tx.execute(
                "UPDATE executions SET dead_letter = 'discarded' "
                "WHERE job_id = $1 AND dead_letter IN ('open', 'redriving')",
                job_id,
            )
            await record_change_row(tx, change)
            return True

        return await self._run(delete)

    async def list_changes(
        self, job_id: str, *, limit: int = 100, before: tuple[datetime, str] | None = None
    ) -> list[JobChange]:
        args = Args(job_id)
        sql = "SELECT * FROM job_changes WHERE job_id = $1"
        if before is not None:
            sql += f" AND (at, id) < ({args(micros(before[0]), 'int8')}, {args(before[1], 'text')})"
        sql += f" ORDER BY at DESC, id DESC LIMIT {args(limit, 'int8')}"
        rows = await self._fetch(sql, *args.values)
        return [JobChange(**from_row(row, key="id")) for row in rows]

    async def record_change(self, change: JobChange) -> None:
        await self._single(lambda tx: record_change_row(tx, change))
