"""The due queue's partitions and their owners on MongoDB (the store's PartitionStore role).

A take is a compare-and-set a partition, on the owner and epoch just read: MongoDB cannot join
the partitions to the heartbeats in one update, so the taker reads both (two small reads), then
sets each takeable partition only if it is still as read."""

from __future__ import annotations

from collections.abc import Sequence

from pymongo import UpdateOne

from tickd.scheduler.ports.backends import PartitionOwner
from tickd.scheduler.store.kit.mongodb import translating_errors
from tickd.scheduler.store.mongodb.base import MongoCollections, Update


class MongoPartitions(MongoCollections):
    """The partitions of MongoStore."""

    @translating_errors
    async def partition_owners(self) -> list[PartitionOwner]:
        return await self._owners()

    async def _owners(self) -> list[PartitionOwner]:
        """Not through the gate: take_partitions holds it already, and a second wait for it
        from there could wait for ever, each holder waiting on the others."""
        cursor = self.partitions.find({}).sort("_id", 1)
        return [
            PartitionOwner(int(d["_id"]), d.get("owner"), int(d["epoch"])) async for d in cursor
        ]

    @translating_errors
    async def take_partitions(self, instance: str, parts: Sequence[int]) -> dict[int, int]:
        if not parts:
            return {}
        wanted = set(parts)
        owners = [owner for owner in await self._owners() if owner.part in wanted]
        alive = {doc["_id"] async for doc in self.beats.find({}, {"_id": 1})}
        takes: list[Update] = [
            UpdateOne(
                {"_id": owner.part, "owner": owner.owner, "epoch": owner.epoch},
                {"$set": {"owner": instance, "epoch": owner.epoch + 1}},
            )
            for owner in owners
            if owner.owner != instance and (owner.owner is None or owner.owner not in alive)
        ]
        if takes:
            await self._update_each(self.partitions, takes)
            owners = [owner for owner in await self._owners() if owner.part in wanted]
        return {owner.part: owner.epoch for owner in owners if owner.owner == instance}

    @translating_errors
    async def release_partitions(self, instance: str, parts: Sequence[int]) -> None:
        if parts:
            releases: list[Update] = [
                UpdateOne({"_id": part, "owner": instance}, {"$set": {"owner": None}})
                for part in parts
            ]
            await self._update_each(self.partitions, releases)
