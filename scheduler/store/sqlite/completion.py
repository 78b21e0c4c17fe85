"""The engine's runs as they end on SQLite (the store's CompletionStore role): keeping their
leases and writing their ends, dead letters and re-drives in one transaction a batch. The
shards' part of the role is requests.py's."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from tickd.scheduler.codec import (
    micros,
)
from tickd.scheduler.model import CancelRequest, DeadLetter
from tickd.scheduler.ports.backends import (
    RunEnd,
)
from tickd.scheduler.store.kit.sqlite import AT_ONCE_MAX_ROWS
from tickd.scheduler.store.sqlite.base import SQLiteTables
from tickd.scheduler.store.sqlite.rows import (
    execution_row,
    from_micros,
    request_row,
)
from tickd.scheduler.store.sqlite.schema import (
    EXECUTION_COLUMNS,
    REQUEST_COLUMNS,
    UNHANDLED,
)
from tickd.scheduler.store.sqlite.statements import (
    END_SQL,
    end_row,
    insert_sql,
    record_change_row,
    release_sql,
    shard_end_sql,
    write_events,
)


class SQLiteCompletion(SQLiteTables):
    """The completion of SQLiteStore."""

    async def cancel_requests(self, execution_ids: Sequence[str]) -> list[CancelRequest]:
        if not execution_ids:
            return []
        ids = ",".join("?" * len(execution_ids))
        sql = f"SELECT * FROM cancel_requests WHERE execution_id IN ({ids})"
        rows = await self._read(lambda db: db.execute(sql, tuple(execution_ids)).fetchall())
        return [_cancel_request(row) for row in rows]

    async def renew_lease(self, job_id: str, token: int, until: datetime) -> bool:
        sql = "UPDATE jobs SET lease_until = ? WHERE id = ? AND lease_token = ?"
        args = (micros(until), job_id, token)
        return bool(await self._run(lambda db: db.execute(sql, args).rowcount))

    async def write_ends(
        self, finishes: Sequence[RunEnd], *, event_source: str | None = None
    ) -> list[bool]:
        """One transaction for the batch: the executions and their events, their dead letters,
        then each job's fenced release."""
        rows = [execution_row(f.execution) for f in finishes]
        sql = insert_sql("executions", EXECUTION_COLUMNS).replace("INSERT", "REPLACE", 1)
        releases = [
            shard_end_sql(f.execution)
            if f.shard is not None
            else release_sql(f.execution.job_id, f.execution.token, f.advance)
            for f in finishes
        ]

        # Ended requests leave the queue, whether or not the run was fenced off: they ran.
        done_requests = [(f.request_id,) for f in finishes if f.request_id is not None]

        def finish(db: sqlite3.Connection) -> list[bool]:
            self._write_ends(db, rows, sql)
            write_events(db, [f.execution for f in finishes], event_source)
            applied = [bool(db.execute(release, args).rowcount) for release, args in releases]
            self._settle_and_redrive(db, finishes, applied)
            if done_requests:
                db.executemany("DELETE FROM run_requests WHERE id = ?", done_requests)
            return applied

        return await self._run(finish, at_once=len(rows) <= AT_ONCE_MAX_ROWS) if finishes else []

    @staticmethod
    def _write_ends(db: sqlite3.Connection, rows: list[tuple[Any, ...]], replace: str) -> None:
        """Each execution as it ended: an update of the columns an end changes, which leaves the
        indexes on the others alone. Should any record be missing (a run recorded only at its
        end) or differ in another column, the batch replaces its rows whole (the same rows, so
        the updated ones stay)."""
        if db.executemany(END_SQL, [end_row(row) for row in rows]).rowcount != len(rows):
            db.executemany(replace, rows)

    @staticmethod
    def _settle_and_redrive(
        db: sqlite3.Connection, finishes: Sequence[RunEnd], applied: Sequence[bool]
    ) -> None:
        settle = (
            "UPDATE executions SET dead_letter = ? WHERE job_id = ? AND scheduled_at = ? "
            f"AND shard = ? AND id != ? AND dead_letter IN {UNHANDLED}"
        )
        db.executemany(
            settle,
            [
                (DeadLetter.REDRIVEN, e.job_id, micros(e.scheduled_at), e.shard, e.id)
                for f in finishes
                if f.settles
                for e in [f.execution]
            ],
        )
        # A run fenced off (its lease lapsed, the occurrence is another instance's now) queues
        # no re-drive: that instance runs the occurrence, and a re-drive would run it again.
        # Its dead letter is `open` for ops, not left `redriving` for ever with nothing queued:
        # nothing says that instance ran it (it may have skipped it, past its grace).
        # (A run without a token held no lease to lose.)
        held = [
            released or f.execution.token is None
            for f, released in zip(finishes, applied, strict=True)
        ]
        requests = [
            f.redrive for f, still in zip(finishes, held, strict=True) if f.redrive and still
        ]
        fenced_off = [
            (DeadLetter.OPEN, f.execution.id)
            for f, still in zip(finishes, held, strict=True)
            if f.redrive and not still
        ]
        db.executemany("UPDATE executions SET dead_letter = ? WHERE id = ?", fenced_off)
        queue = insert_sql("run_requests", REQUEST_COLUMNS).replace("INSERT", "INSERT OR IGNORE", 1)
        for request, change in requests:
            if db.execute(queue, request_row(request)).rowcount:
                record_change_row(db, change)


def _cancel_request(row: sqlite3.Row) -> CancelRequest:
    requested_at = from_micros(row["requested_at"])
    assert requested_at is not None
    return CancelRequest(
        execution_id=row["execution_id"],
        requested_by=row["requested_by"],
        reason=row["reason"],
        requested_at=requested_at,
    )
