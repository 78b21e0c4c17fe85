"""The job store's housekeeping on SQLite (the store's HousekeepingStore role): the counts
behind the gauges, and retention (pruning old executions and history in bounded batches, off
the hot path)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from tickd.scheduler.codec import (
    micros,
)
from tickd.scheduler.model import DeadLetter
from tickd.scheduler.ports.backends import (
    Backlog,
    Retention,
)
from tickd.scheduler.store.sqlite.base import SQLiteTables
from tickd.scheduler.store.sqlite.rows import (
    from_micros,
)
from tickd.scheduler.store.sqlite.schema import (
    FREE,
    UNHANDLED,
)


class SQLiteHousekeeping(SQLiteTables):
    """The counts and the retention of SQLiteStore."""

    async def due_backlog(
        self,
        now: datetime,
        *,
        # Unused: a SQLite file is one process's, which owns every partition.
        partitions: Sequence[int] | None = None,
        domains: frozenset[str] | None = None,
    ) -> Backlog:
        sql = f"SELECT count(*), min(next_run_at) FROM jobs WHERE {FREE} AND next_run_at <= ?"
        args: list[Any] = [micros(now)]
        if domains is not None:
            sql += f" AND domain IN ({', '.join('?' * len(domains))})"
            args += sorted(domains)
        row = await self._run(lambda db: db.execute(sql, args).fetchone())
        return Backlog(due=int(row[0]), oldest_due_at=from_micros(row[1]))

    async def count_dead_letters(self) -> dict[tuple[str, str], int]:
        sql = (
            "SELECT e.handler, coalesce(j.domain, ''), count(*) FROM executions e "
            "LEFT JOIN jobs j ON j.id = e.job_id WHERE e.dead_letter = ? "
            "GROUP BY e.handler, j.domain"
        )
        rows = await self._run(lambda db: db.execute(sql, (DeadLetter.OPEN,)).fetchall())
        return {(row[0], row[1]): int(row[2]) for row in rows}

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
