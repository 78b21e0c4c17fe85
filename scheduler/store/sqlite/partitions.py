"""The due queue's partitions and their owners on SQLite (the store's PartitionStore role). One
process uses a SQLite file, so its one instance owns every partition; the calls exist for the
contract, and cost a statement every heartbeat."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from tickd.scheduler.partitions import DEFAULT_PARTITIONS
from tickd.scheduler.ports.backends import PartitionOwner
from tickd.scheduler.store.sqlite.base import SQLiteTables

# Takeable: free, the taker's own, or held by an instance with no heartbeat record.
TAKE = (
    "UPDATE partitions SET epoch = epoch + 1, owner = ? "
    "WHERE part IN ({0}) AND owner IS NOT ? "
    "AND (owner IS NULL OR owner NOT IN (SELECT id FROM instances)) RETURNING part, epoch"
)
HELD = "SELECT part, epoch FROM partitions WHERE part IN ({0}) AND owner = ?"


class SQLitePartitions(SQLiteTables):
    """The partitions of SQLiteStore."""

    new_partition_count = DEFAULT_PARTITIONS
    partition_count = DEFAULT_PARTITIONS

    async def open(self) -> None:
        await super().open()
        self.partition_count = await self._run(self._made_partitions)

    def _made_partitions(self, db: sqlite3.Connection) -> int:
        """A new database gets its partitions; one that has them keeps their count."""
        if db.execute("SELECT count(*) FROM partitions").fetchone()[0] == 0:
            rows = [(part,) for part in range(self.new_partition_count)]
            db.executemany("INSERT INTO partitions (part, epoch) VALUES (?, 0)", rows)
        return int(db.execute("SELECT count(*) FROM partitions").fetchone()[0])

    async def partition_owners(self) -> list[PartitionOwner]:
        sql = "SELECT part, owner, epoch FROM partitions ORDER BY part"
        rows = await self._run(lambda db: db.execute(sql).fetchall())
        return [PartitionOwner(int(r[0]), r[1], int(r[2])) for r in rows]

    async def take_partitions(self, instance: str, parts: Sequence[int]) -> dict[int, int]:
        if not parts:
            return {}
        marks = ",".join("?" * len(parts))

        def take(db: sqlite3.Connection) -> dict[int, int]:
            db.execute(TAKE.format(marks), (instance, *parts, instance)).fetchall()
            rows = db.execute(HELD.format(marks), (*parts, instance)).fetchall()
            return {int(row[0]): int(row[1]) for row in rows}

        return await self._run(take)

    async def release_partitions(self, instance: str, parts: Sequence[int]) -> None:
        if parts:
            sql = (
                f"UPDATE partitions SET owner = NULL WHERE part IN ({','.join('?' * len(parts))}) "
                "AND owner = ?"
            )
            await self._run(lambda db: db.execute(sql, (*parts, instance)))
