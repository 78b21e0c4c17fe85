"""The job store's housekeeping on PostgreSQL (the store's HousekeepingStore role): the counts
behind the gauges, and retention (pruning old executions and history in bounded batches, off
the hot path)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from tickd.scheduler.codec import exact_micros, micros
from tickd.scheduler.model import DeadLetter
from tickd.scheduler.ports.backends import Backlog, DueFilter, Retention
from tickd.scheduler.store.postgresql.base import Args, PostgresTables, Tx
from tickd.scheduler.store.postgresql.due import due_where
from tickd.scheduler.store.sqlite.rows import from_micros

# Dead letters that pruning must keep (DeadLetter.unhandled).
UNHANDLED = f"('{DeadLetter.OPEN}', '{DeadLetter.REDRIVING}')"
PRUNABLE = f"status <> 'running' AND (dead_letter IS NULL OR dead_letter NOT IN {UNHANDLED})"


class PostgresHousekeeping(PostgresTables):
    """The counts and the retention of PostgresStore."""

    async def due_backlog(
        self,
        now: datetime,
        *,
        partitions: Sequence[int] | None = None,
        domains: frozenset[str] | None = None,
    ) -> Backlog:
        args = Args()
        named = None if domains is None else sorted(domains)
        due = due_where(args, exact_micros(now), DueFilter(partitions=partitions, domains=named))
        row = await self._fetchrow(
            f"SELECT count(*), min(next_run_at) FROM jobs WHERE {due}", *args.values
        )
        assert row is not None
        return Backlog(due=int(row[0]), oldest_due_at=from_micros(row[1]))

    async def count_dead_letters(self) -> dict[tuple[str, str], int]:
        sql = (
            "SELECT e.handler, coalesce(j.domain, ''), count(*) FROM executions e "
            "LEFT JOIN jobs j ON j.id = e.job_id WHERE e.dead_letter = $1 "
            "GROUP BY e.handler, j.domain"
        )
        rows = await self._fetch(sql, str(DeadLetter.OPEN))
        return {(row[0], row[1]): int(row[2]) for row in rows}

    async def prune_executions(self, retention: Retention, now: datetime, *, limit: int) -> int:
        """The age bound walks executions_by_finish; the count bound ranks each job's
        executions in one pass of executions_by_job (a window function)."""
        selects: list[tuple[str, Args]] = []
        if retention.days:
            args = Args()
            before = args(micros(now - timedelta(days=retention.days)), "int8")
            selects.append(
                (
                    f"SELECT e.id FROM executions e WHERE e.finished_at < {before} "
                    f"AND {PRUNABLE} {_scope(args, retention)} AND EXISTS (SELECT 1 FROM "
                    "executions n WHERE n.job_id = e.job_id AND (n.scheduled_at, n.id) > "
                    "(e.scheduled_at, e.id)) ORDER BY e.finished_at LIMIT ",
                    args,
                )
            )
        if retention.max_per_job:
            args = Args()
            scope = _scope(args, retention)
            selects.append(
                (
                    "SELECT id FROM (SELECT id, status, dead_letter, row_number() OVER ("
                    "PARTITION BY job_id ORDER BY scheduled_at DESC, id DESC) AS newer "
                    f"FROM executions e WHERE true {scope}) AS ranked "
                    f"WHERE newer > {args(retention.max_per_job, 'int8')} AND {PRUNABLE} LIMIT ",
                    args,
                )
            )

        async def prune(tx: Tx) -> int:
            deleted = 0
            for select, args in selects:
                if deleted >= limit:
                    break
                values = [*args.values, limit - deleted]
                ids = [row[0] for row in await tx.fetch(f"{select}${len(values)}", *values)]
                if ids:
                    sql = "DELETE FROM executions WHERE id = ANY ($1::text[])"
                    deleted += await tx.execute(sql, ids)
            return deleted

        return await self._run(prune) if selects else 0

    async def prune_changes(self, before: datetime, *, limit: int) -> int:
        sql = (
            "DELETE FROM job_changes WHERE id IN (SELECT c.id FROM job_changes c WHERE c.at < $1 "
            "AND EXISTS (SELECT 1 FROM job_changes n WHERE n.job_id = c.job_id "
            "AND (n.at, n.id) > (c.at, c.id)) ORDER BY c.at LIMIT $2)"
        )
        return await self._execute(sql, micros(before), limit)


def _scope(args: Args, retention: Retention) -> str:
    """The executions a retention covers, as a condition on `e` to AND with others."""
    if retention.handler is not None:
        return f"AND e.handler = {args(retention.handler, 'text')}"
    if retention.except_handlers:
        return f"AND e.handler <> ALL ({args(list(retention.except_handlers), 'text[]')})"
    return ""
