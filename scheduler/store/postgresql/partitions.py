"""The due queue's partitions and their owners on PostgreSQL (the store's PartitionStore role).
SKIP LOCKED alone would keep instances' claims apart, but not their shares: the first instance to
read a burst falling due within its lookahead would claim all of it, and the others' workers
would idle. So each instance claims in the partitions it holds (dispatch.py)."""

from __future__ import annotations

from collections.abc import Sequence

from tickd.scheduler.partitions import partition_of
from tickd.scheduler.ports.backends import PartitionOwner
from tickd.scheduler.store.postgresql.base import PostgresTables

# Instances opening a new database at once: the first one's rows stand.
MAKE = (
    "INSERT INTO partitions (part, epoch) SELECT g, 0 FROM generate_series(0, $1 - 1) AS g "
    "WHERE NOT EXISTS (SELECT 1 FROM partitions) ON CONFLICT DO NOTHING"
)
# Takeable: free, the taker's own, or held by an instance with no heartbeat record. The held
# ones are read from the statement's snapshot (before the update), the taken from its RETURNING.
TAKE = """
WITH taken AS (
    UPDATE partitions AS p SET owner = $1, epoch = p.epoch + 1
    WHERE p.part = ANY ($2::int[]) AND p.owner IS DISTINCT FROM $1
      AND (p.owner IS NULL OR NOT EXISTS (SELECT 1 FROM instances AS i WHERE i.id = p.owner))
    RETURNING p.part, p.epoch
)
SELECT part, epoch FROM taken
UNION ALL
SELECT part, epoch FROM partitions WHERE part = ANY ($2::int[]) AND owner = $1
"""


class PostgresPartitions(PostgresTables):
    """The partitions of PostgresStore."""

    async def open(self) -> None:
        await super().open()
        await self._execute(MAKE, self.new_partition_count)
        self.partition_count = int(await self._fetchval("SELECT count(*) FROM partitions"))
        await self._add_partitions_to_jobs()

    async def _add_partitions_to_jobs(self) -> None:
        """Jobs written by a tickd before partitions (or during a rolling upgrade, by an
        instance of one) get theirs: PostgreSQL has no CRC-32, so tickd works each out."""
        ids = [str(row[0]) for row in await self._fetch("SELECT id FROM jobs WHERE part IS NULL")]
        if ids:
            parts = [partition_of(job_id, self.partition_count) for job_id in ids]
            await self._execute(
                "UPDATE jobs SET part = v.part FROM unnest($1::text[], $2::int4[]) AS v(id, part) "
                "WHERE jobs.id = v.id",
                ids,
                parts,
            )

    async def partition_owners(self) -> list[PartitionOwner]:
        rows = await self._fetch("SELECT part, owner, epoch FROM partitions ORDER BY part")
        return [PartitionOwner(int(r[0]), r[1], int(r[2])) for r in rows]

    async def take_partitions(self, instance: str, parts: Sequence[int]) -> dict[int, int]:
        if not parts:
            return {}
        rows = await self._fetch(TAKE, instance, list(parts))
        return {int(r[0]): int(r[1]) for r in rows}

    async def release_partitions(self, instance: str, parts: Sequence[int]) -> None:
        if parts:
            await self._execute(
                "UPDATE partitions SET owner = NULL WHERE part = ANY ($2::int[]) AND owner = $1",
                instance,
                list(parts),
            )
