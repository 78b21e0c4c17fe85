"""The instances' heartbeats on SQLite, and the leases of the instances found dead (the store's
InstanceStore role)."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from tickd.scheduler.codec import (
    EPOCH,
    exact_micros,
    micros,
    status_json,
)
from tickd.scheduler.ports.backends import (
    ENDED_LEASE_UNTIL,
    InstanceStatus,
    InstanceView,
)
from tickd.scheduler.store.sqlite.base import SQLiteTables
from tickd.scheduler.store.sqlite.rows import instance_view
from tickd.scheduler.store.sqlite.statements import INSTANCE_VIEWS

INSTANCES = "SELECT id, beat_at FROM instances"


def beats_from(rows: list[tuple[str, int]]) -> dict[str, datetime]:
    return {str(row[0]): EPOCH + timedelta(microseconds=row[1]) for row in rows}


class SQLiteInstances(SQLiteTables):
    """The instances of SQLiteStore."""

    async def beat(
        self, instance: str, now: datetime, status: InstanceStatus | None = None
    ) -> dict[str, datetime]:
        """The write and the read in one transaction."""
        sql = (
            "INSERT INTO instances (id, beat_at, status) VALUES (?, ?, ?) "
            "ON CONFLICT (id) DO UPDATE SET beat_at = excluded.beat_at, "
            "status = coalesce(excluded.status, status)"
        )
        args = (instance, micros(now), None if status is None else status_json(status))

        def beat(db: sqlite3.Connection) -> list[tuple[str, int]]:
            db.execute(sql, args)
            return db.execute(INSTANCES).fetchall()

        return beats_from(await self._run(beat))

    async def instance_views(self) -> list[InstanceView]:
        rows = await self._read(lambda db: db.execute(INSTANCE_VIEWS).fetchall())
        return [instance_view(row) for row in rows]

    async def instances(self) -> dict[str, datetime]:
        return beats_from(await self._run(lambda db: db.execute(INSTANCES).fetchall()))

    async def forget_instances(self, beats: Mapping[str, datetime]) -> None:
        sql = "DELETE FROM instances WHERE id = ? AND beat_at = ?"
        rows = [(instance, micros(beat)) for instance, beat in beats.items()]
        if rows:
            await self._run(lambda db: db.executemany(sql, rows))

    async def end_leases(self, owners: Sequence[str]) -> list[tuple[str, int | None]]:
        if not owners:
            return []
        ended = exact_micros(ENDED_LEASE_UNTIL)
        sql = (
            "UPDATE jobs SET lease_until = ? WHERE lease_token IS NOT NULL AND lease_until > ? "
            f"AND lease_owner IN ({','.join('?' * len(owners))}) RETURNING id"
        )
        args = (ended, ended, *owners)
        shards = sql.replace("UPDATE jobs", "UPDATE run_requests", 1).replace(
            "RETURNING id", "RETURNING job_id, shard", 1
        )

        def end(db: sqlite3.Connection) -> list[tuple[str, int | None]]:
            jobs = [(str(row[0]), None) for row in db.execute(sql, args).fetchall()]
            return jobs + [(str(r[0]), int(r[1])) for r in db.execute(shards, args).fetchall()]

        return await self._run(end)
