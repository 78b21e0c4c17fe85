"""The job store's housekeeping on MongoDB: the event outbox the relay drains, dead letters,
and retention (pruning old executions and history in bounded batches, off the hot path)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime

from pymongo import (
    ASCENDING,
    DESCENDING,
)

from tickd.scheduler.codec import (
    Doc,
    exact_micros,
)
from tickd.scheduler.model import DeadLetter
from tickd.scheduler.ports import (
    OutboxBacklog,
    OutboxEvent,
)
from tickd.scheduler.store.mongodb_documents import (
    MINUTE_US,
    OUTBOX_ORDER,
    UNSENT,
    outbox_event_from_document,
)
from tickd.scheduler.store.mongodb_retention import MongoRetention
from tickd.scheduler.store_kit.mongodb import (
    chunks,
    from_micros,
    in_one_batch,
    translating_errors,
)

# A prune looks at this many minutes' buckets at most (a relay that was stopped for a day
# catches up over several calls).
PRUNE_MINUTES_PER_CALL = 60
# A bucket larger than a prune's limit goes by the events each mark sent together (see
# _prune_minute), when its limit holds at most this many marks.
PRUNE_MARKS_PER_CALL = 20


def minute_of(micros: int) -> int:
    return micros // MINUTE_US


class MongoHousekeeping(MongoRetention):
    """The outbox, dead letters and retention of MongoStore (executions: MongoRetention)."""

    # The last minute whose sent events are all pruned; None until this store's first prune
    # has gone through what it found sent before (an earlier process's, or unbucketed ones).
    _pruned_through: int | None = None

    # -- the outbox -------------------------------------------------------------------------------

    @translating_errors
    async def unsent_events(self, limit: int) -> list[OutboxEvent]:
        cursor = self.outbox.find(UNSENT).sort(OUTBOX_ORDER).limit(limit)
        return [outbox_event_from_document(doc) async for doc in in_one_batch(cursor, limit)]

    @translating_errors
    async def mark_events_sent(self, event_ids: Sequence[str], now: datetime) -> None:
        sent_at = exact_micros(now)
        for ids in chunks(event_ids, 1000):
            await self.outbox.update_many(
                {"_id": {"$in": list(ids)}, **UNSENT},
                {"$set": {"sent": True, "sent_at_us": sent_at, "sent_minute": minute_of(sent_at)}},
            )

    @translating_errors
    async def prune_sent_events(self, before: datetime, *, limit: int) -> int:
        """By whole minutes of sending, each read by its bucket: an event is kept until the
        minute it was sent in has passed `before` entirely (up to a minute longer than asked)."""
        last_whole = minute_of(exact_micros(before)) - 1
        if self._pruned_through is None:
            deleted = await self._prune_sent_before(exact_micros(before), limit)
            if deleted < limit:  # nothing older left: from now on, by the minute
                self._pruned_through = last_whole
            return deleted
        deleted = 0
        first = self._pruned_through + 1
        for minute in range(first, min(last_whole, first + PRUNE_MINUTES_PER_CALL - 1) + 1):
            emptied, count = await self._prune_minute(minute, limit - deleted)
            deleted += count
            if not emptied:
                break
            self._pruned_through = minute
        return deleted

    async def _prune_minute(self, minute: int, limit: int) -> tuple[bool, int]:
        """Up to `limit` of the events sent in `minute`: whether none is left, and how many went.

        FerretDB decodes every event that the part of a filter it pushes down selects; an `_id`
        $in is not such a part. So a delete by the bucket read all that was left of it again for
        each `limit` deleted: the time grew with the square of the bucket. A bucket larger than
        `limit` goes by the events each mark sent together instead (their `sent_at_us`, which it
        pushes down), unless those marks are many and small (a low rate, so a small bucket).
        24,000 events marked a hundred at a time, in calls of 1,000: 44.6 s before, 11.2 s."""
        if limit <= 0:
            return False, 0
        bucket = {"sent_minute": minute}
        cursor = in_one_batch(self.outbox.find(bucket, {"sent_at_us": 1}), limit + 1)
        seen = [(doc["_id"], doc.get("sent_at_us")) async for doc in cursor]
        if not seen:
            return True, 0
        chosen, whole = seen[:limit], len(seen) <= limit
        marks: defaultdict[int | None, list[str]] = defaultdict(list)
        for event_id, sent_at in chosen:
            marks[sent_at].append(event_id)
        if whole or len(marks) > PRUNE_MARKS_PER_CALL:
            deletes = [{**bucket, "_id": {"$in": [event_id for event_id, _ in chosen]}}]
        else:
            deletes = [
                {**bucket, "sent_at_us": at, "_id": {"$in": ids}} for at, ids in marks.items()
            ]
        deleted = 0
        for query in deletes:
            deleted += int((await self.outbox.delete_many(query)).deleted_count)
        return whole, deleted

    async def _prune_sent_before(self, before_us: int, limit: int) -> int:
        """Events sent before `before_us`, whatever their bucket: a whole read of what was sent,
        so only once per store (and again while more than `limit` are found)."""
        old = {"sent_at_us": {"$ne": None, "$lt": before_us}}  # events of any version
        cursor = self.outbox.find(old, {"_id": 1}).limit(limit)
        ids = [doc["_id"] async for doc in in_one_batch(cursor, limit)]
        if not ids:
            return 0
        result = await self.outbox.delete_many({"_id": {"$in": ids}, **old})
        return int(result.deleted_count)

    @translating_errors
    async def outbox_backlog(self) -> OutboxBacklog:
        unsent = await self.outbox.count_documents(UNSENT)
        if not unsent:  # the usual case, one read: nothing to sort
            return OutboxBacklog(unsent=0, oldest_written_at=None)
        oldest = await self.outbox.find_one(UNSENT, sort=OUTBOX_ORDER)
        return OutboxBacklog(
            unsent=unsent,
            oldest_written_at=None if oldest is None else from_micros(oldest["written_us"]),
        )

    # -- dead letters and retention ----------------------------------------------------------------

    @translating_errors
    async def mark_dead_letters(
        self, execution_ids: Sequence[str], *, states: Sequence[DeadLetter], to: DeadLetter
    ) -> set[str]:
        """One read of the candidates, then one filtered update each: the update's own filter
        is the compare-and-set, its count says who won."""
        if not execution_ids or not states:
            return set()
        wanted = {
            "_id": {"$in": list(execution_ids)},
            "dead_letter": {"$in": list(map(str, states))},
        }
        cursor = self.executions.find(wanted, {"_id": 1})
        candidates = [doc["_id"] async for doc in in_one_batch(cursor, len(execution_ids))]
        moved = set()
        for execution_id in candidates:
            result = await self.executions.update_one(
                {"_id": execution_id, "dead_letter": {"$in": list(map(str, states))}},
                {"$set": {"dead_letter": str(to)}},
            )
            if result.modified_count == 1:
                moved.add(execution_id)
        return moved

    @translating_errors
    async def count_dead_letters(self) -> dict[str, int]:
        pipeline: list[Doc] = [
            {"$match": {"dead_letter": DeadLetter.OPEN.value}},
            {"$group": {"_id": "$handler", "n": {"$sum": 1}}},
        ]
        return {
            doc["_id"]: int(doc["n"]) async for doc in await self.executions.aggregate(pipeline)
        }

    @translating_errors
    async def prune_changes(self, before: datetime, *, limit: int) -> int:
        """As _prune_by_age: pages of the oldest, past each job's newest entry."""
        old: Doc = {"at_us": {"$lt": exact_micros(before)}}
        order = [("at_us", ASCENDING), ("_id", ASCENDING)]
        ids: list[str] = []
        after: list[Doc] | None = None
        while len(ids) < limit:
            cursor = self.changes.find(old if after is None else {**old, "$or": after})
            page = [doc async for doc in in_one_batch(cursor.sort(order), limit)]
            if not page:
                break
            newest = await self._newest_change_per_job({doc["job_id"] for doc in page})
            ids += [doc["_id"] for doc in page if doc["at_us"] < newest[doc["job_id"]]]
            after = _after(page[-1], "at_us")
            if len(page) < limit:
                break
        if not ids:
            return 0
        return (await self.changes.delete_many({"_id": {"$in": ids[:limit]}})).deleted_count

    async def _newest_change_per_job(self, job_ids: set[str]) -> dict[str, int]:
        newest: dict[str, int] = {}
        for job_id in job_ids:
            last = await self.changes.find_one(
                {"job_id": job_id}, {"at_us": 1}, sort=[("at_us", DESCENDING), ("_id", DESCENDING)]
            )
            newest[job_id] = int(last["at_us"]) if last else 0
        return newest


def _after(doc: Doc, field: str) -> list[Doc]:
    """What sorts after `doc` by (field, _id): an $or."""
    at = doc[field]
    return [{field: {"$gt": at}}, {field: at, "_id": {"$gt": doc["_id"]}}]
