"""The due queue's partitions and their owners on PostgreSQL (the store's PartitionStore role).
Claims stay global here (SKIP LOCKED keeps instances apart at no cost), so the partitions decide
only what each instance reads where reads would collide."""

from __future__ import annotations

from collections.abc import Sequence

from tickd.scheduler.partitions import DEFAULT_PARTITIONS
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

    new_partition_count = DEFAULT_PARTITIONS
    partition_count = DEFAULT_PARTITIONS

    async def open(self) -> None:
        await super().open()
        await self._execute(MAKE, self.new_partition_count)
        self.partition_count = int(await self._fetchval("SELECT count(*) FROM partitions"))

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
