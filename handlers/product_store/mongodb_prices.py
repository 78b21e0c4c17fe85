"""The catalogue walk's part of the product store on MongoDB: the parts to price, price checks
and their history, a vendor's daily quota in slots, and the walk's lease."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime

from pymongo import (
    DESCENDING,
)

from tickd.handlers.product_store import (
    Doc,
    PriceCheck,
)
from tickd.handlers.product_store.documents import (
    price_entries,
    price_writes,
)
from tickd.handlers.product_store.mongodb_base import MongoProductBase
from tickd.handlers.product_store.mongodb_queries import (
    NEWEST_FIRST,
    PRICE_ORDER,
    QUOTA_RETENTION,
    QUOTA_ROUNDS,
    QUOTA_TOPS_REMEMBERED,
    checks_by_part,
    id_forms,
    matched_ids,
    price_write,
    quota_slot,
    to_price,
)
from tickd.scheduler.store.kit.mongodb import (
    in_one_batch,
    insert_ignoring_duplicates,
    translating_errors,
)


class MongoPrices(MongoProductBase):
    """Prices, quotas and leases of MongoProductStore."""

    # -- the catalogue walk ---------------------------------------------------------------------

    @translating_errors
    async def parts_to_price(self, *, checked_before: datetime, limit: int) -> list[Doc]:
        if limit <= 0:
            return []
        cursor = self.part_docs.find(to_price(checked_before)).sort(PRICE_ORDER)
        return [doc async for doc in in_one_batch(cursor, limit)]

    @translating_errors
    async def record_price_checks(self, checks: Sequence[PriceCheck]) -> set[str]:
        if not checks:
            return set()
        by_part = checks_by_part(checks)
        # The parts that exist: none is created, and each write then goes by its `_id` as
        # stored alone. By the id as read where the caller kept it, else by its string forms.
        as_read = {key: key[1].value for key in by_part if key[1] is not None}
        forms = list(as_read.values()) + id_forms(key[0] for key in by_part if key not in as_read)
        found = await self._find(self.part_docs, {"_id": {"$in": forms}}, projection={"_id": 1})
        stored = matched_ids(by_part, [doc["_id"] for doc in found])
        updates = [price_write(stored[key], price_writes(by_part[key])[key[0]]) for key in stored]
        if updates:
            await self._bulk(self.part_docs, updates)
        entries = price_entries([check for key in stored for check in by_part[key]])
        if entries:
            await insert_ignoring_duplicates(self.price_history_docs, entries)
        return {part_id for part_id, _ in stored}

    @translating_errors
    async def price_history(self, part_id: str, *, limit: int = 100) -> list[Doc]:
        if limit <= 0:
            return []
        cursor = self.price_history_docs.find({"partId": part_id}).sort(NEWEST_FIRST)
        return [doc async for doc in in_one_batch(cursor, limit)]

    @translating_errors
    async def reserve_quota(self, key: str, day: date, *, limit: int, want: int) -> int:
        """Slots top + 1... inserted, round after round while others take some first. A round
        that loses a slot finds a higher top next time, so the rounds end once the limit is
        reached; and a reservation given nothing tries again until then (0 means spent)."""
        granted = 0
        at = datetime.now(UTC)  # for people reading the slots; no query uses it
        for round_ in range(1, limit + 2):
            remembered = self._quota_tops.get((key, day))
            top = await self._top_slot(key, day) if remembered is None else remembered
            slots = [
                quota_slot(key, day, n, at)
                for n in range(top + 1, min(top + want - granted, limit) + 1)
            ]
            if not slots and remembered is not None:
                # Spent, as far as this store knows: make sure (ops may have deleted slots).
                self._remember_top(key, day, None)
                continue
            if not slots:
                break
            refused = await insert_ignoring_duplicates(self.quota_slots, slots)
            granted += len(slots) - len(refused)
            self._remember_top(key, day, slots[-1]["n"] if len(refused) < len(slots) else None)
            if top == 0 and 0 not in refused:  # this day's first slot: forget old days
                cutoff = (day - QUOTA_RETENTION).isoformat()
                await self.quota_slots.delete_many({"key": key, "day": {"$lt": cutoff}})
            if granted >= want or (granted > 0 and round_ >= QUOTA_ROUNDS):
                break
        return granted

    def _remember_top(self, key: str, day: date, top: int | None) -> None:
        """Every slot number tried is taken now, by this store or another, so the next
        reservation starts past them without reading the top (FerretDB reads every slot of the
        collection for it). After a round that won nothing, others are ahead: forget, read."""
        if top is None:
            self._quota_tops.pop((key, day), None)
            return
        if len(self._quota_tops) > QUOTA_TOPS_REMEMBERED:
            self._quota_tops.clear()
        self._quota_tops[(key, day)] = top

    async def _top_slot(self, key: str, day: date) -> int:
        """The highest slot number taken of the day (0 before the first)."""
        cursor = self.quota_slots.find({"key": key, "day": day.isoformat()}, projection={"n": 1})
        top = await cursor.sort("n", DESCENDING).limit(1).to_list()
        return int(top[0]["n"]) if top else 0

    @translating_errors
    async def quota_used(self, key: str, day: date) -> int:
        return await self.quota_slots.count_documents({"key": key, "day": day.isoformat()})

    @translating_errors
    async def take_lease(self, name: str, *, owner: str, until: datetime, now: datetime) -> bool:
        """An insert on the lease's `_id`, which one taker wins; a hold that ended is deleted
        first, by its exact owner and end, so a hold taken meanwhile is not."""
        hold = {"_id": name, "owner": owner, "until": until}
        if not await insert_ignoring_duplicates(self.lease_docs, [hold]):
            return True
        current = await self.lease_docs.find_one({"_id": name})
        if current is not None and current["owner"] == owner:
            await self.lease_docs.update_one({"_id": name}, {"$set": {"until": until}})
            return True
        if current is not None and current["until"] >= now:
            return False
        if current is not None:
            await self.lease_docs.delete_one(current)
        return not await insert_ignoring_duplicates(self.lease_docs, [hold])

    @translating_errors
    async def release_lease(self, name: str, *, owner: str) -> None:
        await self.lease_docs.delete_one({"_id": name, "owner": owner})
