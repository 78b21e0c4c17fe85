"""The instances' heartbeats on MongoDB, and the leases of the instances found dead (the store's
InstanceStore role)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime

from pymongo import (
    ASCENDING,
    DeleteOne,
)

from tickd.scheduler.codec import (
    Doc,
    exact_micros,
    status_from_json,
    status_json,
)
from tickd.scheduler.model import new_id
from tickd.scheduler.ports.backends import (
    ENDED_LEASE_UNTIL,
    InstanceStatus,
    InstanceView,
)
from tickd.scheduler.store.kit.mongodb import (
    from_micros,
    translating_errors,
)
from tickd.scheduler.store.mongodb.base import MongoCollections
from tickd.scheduler.store.mongodb.documents import (
    LEASED,
)


class MongoInstances(MongoCollections):
    """The instances of MongoStore."""

    @translating_errors
    async def beat(
        self, instance: str, now: datetime, status: InstanceStatus | None = None
    ) -> dict[str, datetime]:
        """Two commands, the write and the read: no one command both upserts a document and
        reads the others (find_one_and_update answers only the one it wrote)."""
        beat: Doc = {"beat_at": now, "beat_at_us": exact_micros(now)}
        if status is not None:
            beat["status"] = status_json(status)
        await self.beats.update_one({"_id": instance}, {"$set": beat}, upsert=True)
        return await self._instances()  # not `instances`: one pass of the gate

    @translating_errors
    async def instance_views(self) -> list[InstanceView]:
        """Two small reads: the instances, the partitions (P documents)."""
        held = Counter([doc.get("owner") async for doc in self.partitions.find({}, {"owner": 1})])
        cursor = self.beats.find({}).sort("_id", ASCENDING)
        return [
            InstanceView(
                instance=doc["_id"],
                beat_at=from_micros(doc["beat_at_us"]),
                status=status_from_json(doc.get("status")),
                partitions=held[doc["_id"]],
            )
            async for doc in cursor
        ]

    @translating_errors
    async def instances(self) -> dict[str, datetime]:
        return await self._instances()

    async def _instances(self) -> dict[str, datetime]:
        cursor = self.beats.find({}, {"beat_at_us": 1})
        return {doc["_id"]: from_micros(doc["beat_at_us"]) async for doc in cursor}

    @translating_errors
    async def forget_instances(self, beats: Mapping[str, datetime]) -> None:
        forget = [
            DeleteOne({"_id": instance, "beat_at_us": exact_micros(beat)})
            for instance, beat in beats.items()
        ]
        if forget:
            await self.beats.bulk_write(forget, ordered=False)

    @translating_errors
    async def end_leases(self, owners: Sequence[str]) -> list[tuple[str, int | None]]:
        """One update a collection, and only when it ended any, one read of what it ended, by
        the call's `batch` (an equality FerretDB pushes down)."""
        if not owners:
            return []
        ended_us, batch = exact_micros(ENDED_LEASE_UNTIL), new_id()
        held = {**LEASED, "lease.owner": {"$in": list(owners)}, "lease.until_us": {"$gt": ended_us}}
        lease = {"lease.until": ENDED_LEASE_UNTIL, "lease.until_us": ended_us}
        ended = {"$set": {**lease, "batch": batch}}
        leases: list[tuple[str, int | None]] = []
        if (await self.jobs.update_many(held, ended)).modified_count:
            cursor = self.jobs.find({"batch": batch}, {"_id": 1})
            leases += [(doc["_id"], None) async for doc in cursor]
        if (await self.requests.update_many(held, ended)).modified_count:
            cursor = self.requests.find({"batch": batch}, {"job_id": 1, "shard": 1})
            leases += [(doc["job_id"], doc["shard"]) async for doc in cursor]
        return leases
