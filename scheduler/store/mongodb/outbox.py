"""The event outbox on MongoDB as the relay drains it (the store's OutboxStore role); the events
themselves are written with the runs they tell of."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime

from tickd.scheduler.codec import (
    exact_micros,
)
from tickd.scheduler.ports.backends import (
    OutboxBacklog,
    OutboxEvent,
)
from tickd.scheduler.store.kit.mongodb import (
    chunks,
    from_micros,
    in_one_batch,
    translating_errors,
)
from tickd.scheduler.store.mongodb.base import MongoCollections
from tickd.scheduler.store.mongodb.documents import (
    MINUTE_US,
    OUTBOX_ORDER,
    UNSENT,
    outbox_event_from_document,
)

# A prune looks at this many minutes' buckets at most (a relay that was stopped for a day
# catches up over several calls).
PRUNE_MINUTES_PER_CALL = 60
# A bucket larger than a prune's limit goes by the events each mark sent together (see
# _prune_minute), when its limit holds at most this many marks.
PRUNE_MARKS_PER_CALL = 20


def minute_of(micros: int) -> int:
    return micros // MINUTE_US


class MongoOutbox(MongoCollections):
    """The outbox of MongoStore."""

    # The last minute whose sent events are all pruned; None until this store's first prune
    # has gone through what it found sent before (an earlier process's, or unbucketed ones).
    _pruned_through: int | None = None

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
