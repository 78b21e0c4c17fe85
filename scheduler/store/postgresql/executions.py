"""Executions and their dead letters on PostgreSQL, as the API reads and re-drives them (the
store's ExecutionStore role)."""

from __future__ import annotations

from collections.abc import Sequence

from tickd.scheduler.codec import exact_micros
from tickd.scheduler.model import CancelRequest, DeadLetter, Execution
from tickd.scheduler.ports.backends import ExecutionQuery
from tickd.scheduler.store.postgresql.base import Args, PostgresTables
from tickd.scheduler.store.postgresql.statements import execution_filters
from tickd.scheduler.store.sqlite.rows import execution_from_row


def in_domains(args: Args, domains: frozenset[str]) -> str:
    """The condition that keeps the executions whose job is in `domains`, read with the jobs
    table in the same statement; a deleted job's executions are in none."""
    return f"job_id IN (SELECT id FROM jobs WHERE domain = ANY ({args(sorted(domains), 'text[]')}))"


class PostgresExecutions(PostgresTables):
    """The executions of PostgresStore."""

    async def get_execution(self, execution_id: str) -> Execution | None:
        row = await self._fetchrow("SELECT * FROM executions WHERE id = $1", execution_id)
        return None if row is None else execution_from_row(row)

    async def list_executions(self, query: ExecutionQuery) -> list[Execution]:
        args = Args()
        where = execution_filters(args, query)
        if query.domains is not None:
            where.append(in_domains(args, query.domains))
        sql = "SELECT * FROM executions" + (" WHERE " + " AND ".join(where) if where else "")
        sql += f" ORDER BY scheduled_at DESC, id DESC LIMIT {args(query.limit, 'int8')}"
        return [execution_from_row(row) for row in await self._fetch(sql, *args.values)]

    async def request_cancel(self, request: CancelRequest) -> None:
        await self._execute(
            "INSERT INTO cancel_requests (execution_id, requested_by, reason, requested_at) "
            "VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
            request.execution_id,
            request.requested_by,
            request.reason,
            exact_micros(request.requested_at),
        )

    async def mark_dead_letters(
        self, execution_ids: Sequence[str], *, states: Sequence[DeadLetter], to: DeadLetter
    ) -> set[str]:
        if not execution_ids or not states:
            return set()
        rows = await self._fetch(
            "UPDATE executions SET dead_letter = $1 WHERE id = ANY ($2::text[]) "
            "AND dead_letter = ANY ($3::text[]) RETURNING id",
            str(to),
            list(execution_ids),
            [str(state) for state in states],
        )
        return {row["id"] for row in rows}
