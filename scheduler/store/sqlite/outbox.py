"""The event outbox on SQLite as the relay drains it (the store's OutboxStore role); the
events themselves are written in the transactions of the runs they tell of."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from tickd.scheduler.codec import (
    micros,
)
from tickd.scheduler.ports.backends import (
    OutboxBacklog,
    OutboxEvent,
)
from tickd.scheduler.store.sqlite.base import SQLiteTables
from tickd.scheduler.store.sqlite.rows import from_micros, outbox_event_from_row


class SQLiteOutbox(SQLiteTables):
    """The outbox of SQLiteStore."""

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
