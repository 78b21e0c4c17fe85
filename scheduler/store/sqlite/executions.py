"""Executions and their dead letters on SQLite, as the API reads and re-drives them (the
store's ExecutionStore role)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tickd.scheduler.codec import exact_micros
from tickd.scheduler.model import CancelRequest, DeadLetter, Execution
from tickd.scheduler.ports.backends import (
    ExecutionQuery,
)
from tickd.scheduler.store.sqlite.base import SQLiteTables
from tickd.scheduler.store.sqlite.rows import (
    execution_from_row,
)
from tickd.scheduler.store.sqlite.statements import (
    execution_filters,
)


def in_domains(domains: frozenset[str], column: str = "job_id") -> tuple[str, list[Any]]:
    """The condition that keeps the rows whose job (`column` its id) is in `domains`, read with
    the jobs table in the same statement; a deleted job's rows are in none."""
    names = sorted(domains)
    marks = ", ".join("?" * len(names))
    return f"{column} IN (SELECT id FROM jobs WHERE domain IN ({marks}))", names


class SQLiteExecutions(SQLiteTables):
    """The executions of SQLiteStore."""

    async def get_execution(self, execution_id: str) -> Execution | None:
        sql = "SELECT * FROM executions WHERE id = ?"
        row = await self._read(lambda db: db.execute(sql, (execution_id,)).fetchone())
        return None if row is None else execution_from_row(row)

    async def list_executions(self, query: ExecutionQuery) -> list[Execution]:
        where, args = execution_filters(query)
        if query.domains is not None:
            scope, names = in_domains(query.domains)
            where, args = [*where, scope], [*args, *names]
        sql = "SELECT * FROM executions"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY scheduled_at DESC, id DESC LIMIT ?"
        rows = await self._read(lambda db: db.execute(sql, (*args, query.limit)).fetchall())
        return [execution_from_row(row) for row in rows]

    async def request_cancel(self, request: CancelRequest) -> None:
        sql = "INSERT OR IGNORE INTO cancel_requests VALUES (?, ?, ?, ?)"
        args = (
            request.execution_id,
            request.requested_by,
            request.reason,
            exact_micros(request.requested_at),
        )
        await self._run(lambda db: db.execute(sql, args))

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
