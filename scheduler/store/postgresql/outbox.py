"""The event outbox on PostgreSQL as the relay drains it (the store's OutboxStore role); the
events themselves are written in the statements of the runs they tell of."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from tickd.scheduler.codec import micros
from tickd.scheduler.ports.backends import OutboxBacklog, OutboxEvent
from tickd.scheduler.store.postgresql.base import PostgresTables
from tickd.scheduler.store.sqlite.rows import from_micros, outbox_event_from_row


class PostgresOutbox(PostgresTables):
    """The outbox of PostgresStore."""

    async def unsent_events(self, limit: int) -> list[OutboxEvent]:
        sql = "SELECT * FROM outbox WHERE sent_at IS NULL ORDER BY seq LIMIT $1"
        return [outbox_event_from_row(row) for row in await self._fetch(sql, limit)]

    async def mark_events_sent(self, event_ids: Sequence[str], now: datetime) -> None:
        sql = "UPDATE outbox SET sent_at = $1 WHERE id = ANY ($2::text[]) AND sent_at IS NULL"
        if event_ids:
            await self._execute(sql, micros(now), list(event_ids))

    async def prune_sent_events(self, before: datetime, *, limit: int) -> int:
        sql = (
            "DELETE FROM outbox WHERE seq IN (SELECT seq FROM outbox WHERE sent_at IS NOT NULL "
            "AND sent_at < $1 ORDER BY sent_at LIMIT $2)"
        )
        return await self._execute(sql, micros(before), limit)

    async def outbox_backlog(self) -> OutboxBacklog:
        row = await self._fetchrow(
            "SELECT count(*), min(written_at) FROM outbox WHERE sent_at IS NULL"
        )
        assert row is not None
        return OutboxBacklog(unsent=int(row[0]), oldest_written_at=from_micros(row[1]))
