"""The instances' heartbeats on PostgreSQL, and the leases of the instances found dead (the
store's InstanceStore role)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from tickd.scheduler.codec import exact_micros, micros, status_json
from tickd.scheduler.ports.backends import ENDED_LEASE_UNTIL, InstanceStatus, InstanceView
from tickd.scheduler.store.postgresql.base import PostgresTables, Tx
from tickd.scheduler.store.sqlite.rows import Row, from_micros, instance_view
from tickd.scheduler.store.sqlite.statements import INSTANCE_VIEWS

END_LEASES = (
    "UPDATE {0} SET lease_until = $1 WHERE lease_token IS NOT NULL AND lease_until > $1 "
    "AND lease_owner = ANY ($2::text[]) RETURNING {1}"
)

BEAT = (
    "WITH beat AS (INSERT INTO instances AS i (id, beat_at, status) VALUES ($1, $2, $3) "
    "ON CONFLICT (id) DO UPDATE SET beat_at = EXCLUDED.beat_at, "
    "status = coalesce(EXCLUDED.status, i.status) RETURNING id, beat_at) "
    "SELECT id, beat_at FROM beat UNION ALL SELECT id, beat_at FROM instances WHERE id <> $1"
)


def beats_from(rows: list[Row]) -> dict[str, datetime]:
    return {str(row[0]): from_micros(row[1]) for row in rows}  # type: ignore[misc]


class PostgresInstances(PostgresTables):
    """The instances of PostgresStore."""

    async def beat(
        self, instance: str, now: datetime, status: InstanceStatus | None = None
    ) -> dict[str, datetime]:
        """One statement. Its read sees the table as it was before the write (a statement's
        parts share one snapshot), so this instance's row comes from the write's RETURNING and
        the others' from the read."""
        text = None if status is None else status_json(status)
        return beats_from(await self._fetch(BEAT, instance, micros(now), text))

    async def instance_views(self) -> list[InstanceView]:
        return [instance_view(row) for row in await self._fetch(INSTANCE_VIEWS)]

    async def instances(self) -> dict[str, datetime]:
        return beats_from(await self._fetch("SELECT id, beat_at FROM instances"))

    async def forget_instances(self, beats: Mapping[str, datetime]) -> None:
        if beats:
            await self._execute(
                "DELETE FROM instances AS i USING unnest($1::text[], $2::int8[]) AS b(id, at) "
                "WHERE i.id = b.id AND i.beat_at = b.at",
                list(beats),
                [micros(beat) for beat in beats.values()],
            )

    async def end_leases(self, owners: Sequence[str]) -> list[tuple[str, int | None]]:
        if not owners:
            return []
        args = (exact_micros(ENDED_LEASE_UNTIL), list(owners))

        async def end(tx: Tx) -> list[tuple[str, int | None]]:
            jobs = await tx.fetch(END_LEASES.format("jobs", "id"), *args)
            shards = await tx.fetch(END_LEASES.format("run_requests", "job_id, shard"), *args)
            return [(str(r[0]), None) for r in jobs] + [(str(r[0]), int(r[1])) for r in shards]

        return await self._run(end)
