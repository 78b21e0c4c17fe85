"""The job store's housekeeping on SQLite: the event outbox the relay drains, dead letters, and
retention (pruning old executions and history in bounded batches, off the hot path)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from tickd.scheduler.codec import (
    micros,
)
from tickd.scheduler.model import DeadLetter
from tickd.scheduler.ports import (
    OutboxBacklog,
    OutboxEvent,
    Retention,
)
from tickd.scheduler.store.sqlite_base import SQLiteTables
from tickd.scheduler.store.sqlite_rows import (
    UNHANDLED,
    from_micros,
    outbox_event_from_row,
)

T = TypeVar("T")


class SQLiteHousekeeping(SQLiteTables):
    """The outbox, dead letters and retention of SQLiteStore."""

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
