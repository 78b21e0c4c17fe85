"""The job store's housekeeping on MongoDB (the store's HousekeepingStore role): the counts
behind the gauges, and retention of history (executions: retention.py), off the hot path."""

from __future__ import annotations

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
    Backlog,
)
from tickd.scheduler.store.mongodb.retention import MongoRetention
from tickd.scheduler.store.mongodb.statements import (
    due_filter,
)
from tickd.scheduler.store_kit.mongodb import (
    from_micros,
    in_one_batch,
    translating_errors,
)


class MongoHousekeeping(MongoRetention):
    """The counts and the retention of MongoStore (executions: MongoRetention)."""

    @translating_errors
    async def due_backlog(self, now: datetime) -> Backlog:
        """One read of the due jobs' times (the jobs_next index), counted here: a count and a
        sorted find would each make FerretDB decode every due job, and its $group has no $min."""
        cursor = self.jobs.find(due_filter(now), {"_id": 0, "next_run_at_us": 1})
        due = [doc["next_run_at_us"] async for doc in cursor]
        return Backlog(due=len(due), oldest_due_at=from_micros(min(due)) if due else None)

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
