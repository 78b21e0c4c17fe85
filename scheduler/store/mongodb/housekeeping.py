"""The job store's housekeeping on MongoDB (the store's HousekeepingStore role): the counts
behind the gauges, and retention of history (executions: retention.py), off the hot path; and
the judgement of the runs a reap abandoned (`abandoned_for_good_in`)."""

from __future__ import annotations

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
from tickd.scheduler.dead_letters import abandoned_for_good
from tickd.scheduler.domains import DEFAULT_DOMAIN
from tickd.scheduler.model import DeadLetter, Execution, Status
from tickd.scheduler.ports.backends import (
    Backlog,
    DueFilter,
    RunEnd,
)
from tickd.scheduler.store.kit.mongodb import (
    from_micros,
    in_one_batch,
    translating_errors,
)
from tickd.scheduler.store.mongodb.base import MongoCollections
from tickd.scheduler.store.mongodb.documents import (
    LEASE_EXPIRED,
    execution_from_document,
    job_from_document,
    request_from_document,
)
from tickd.scheduler.store.mongodb.retention import MongoRetention
from tickd.scheduler.store.mongodb.statements import (
    due_filter,
)


class MongoHousekeeping(MongoRetention):
    """The counts and the retention of MongoStore (executions: MongoRetention)."""

    @translating_errors
    async def due_backlog(
        self,
        now: datetime,
        *,
        partitions: Sequence[int] | None = None,
        domains: frozenset[str] | None = None,
    ) -> Backlog:
        """One read of the due jobs' times (the jobs_next index), counted here: a count and a
        sorted find would each make FerretDB decode every due job, and its $group has no $min."""
        query = due_filter(now, DueFilter(domains=None if domains is None else sorted(domains)))
        if partitions is not None:  # and the jobs an older tickd wrote, without one
            query["part"] = {"$in": [*partitions, None]}
        cursor = self.jobs.find(query, {"_id": 0, "next_run_at_us": 1})
        due = [doc["next_run_at_us"] async for doc in cursor]
        return Backlog(due=len(due), oldest_due_at=from_micros(min(due)) if due else None)

    @translating_errors
    async def count_dead_letters(self) -> dict[tuple[str, str], int]:
        """Counted by handler and job in the store, then the jobs' domains read in one query:
        as many as the jobs with open dead letters, not one a dead letter."""
        pipeline: list[Doc] = [
            {"$match": {"dead_letter": DeadLetter.OPEN.value}},
            {"$group": {"_id": {"handler": "$handler", "job": "$job_id"}, "n": {"$sum": 1}}},
        ]
        by_job = [doc async for doc in await self.executions.aggregate(pipeline)]
        jobs = list({doc["_id"]["job"] for doc in by_job})
        domain_of = {
            doc["_id"]: doc.get("domain", DEFAULT_DOMAIN)
            async for doc in self.jobs.find({"_id": {"$in": jobs}}, {"domain": 1})
        }
        counts: dict[tuple[str, str], int] = {}
        for doc in by_job:
            pair = (doc["_id"]["handler"], domain_of.get(doc["_id"]["job"], ""))
            counts[pair] = counts.get(pair, 0) + int(doc["n"])
        return counts

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


async def abandoned_for_good_in(
    store: MongoCollections, leases: Sequence[tuple[str, int]]
) -> list[RunEnd]:
    """The dead letters of the runs these expired leases guarded whose occurrences were
    abandoned past their jobs' retries (dead_letters.abandoned_for_good): the runs a reap
    abandoned under them and not yet judged, this reap's or those of one that stopped before
    their dead letters were written. One read a lease, by the job, as the reap's own."""
    finishes = []
    for job_id, token in leases:
        unjudged = {
            "job_id": job_id,
            "token": token,
            "status": Status.ABANDONED.value,
            "shards": 1,
            "dead_letter": None,
            "error.type": LEASE_EXPIRED["type"],
        }
        async for doc in store.executions.find(unjudged):
            finish = await _judged(store, execution_from_document(doc))
            finishes += [finish] if finish is not None else []
    return finishes


async def _judged(store: MongoCollections, execution: Execution) -> RunEnd | None:
    job = await store.jobs.find_one({"_id": execution.job_id})
    if job is None:
        return None
    request = await store.requests.find_one(
        {"job_id": execution.job_id, "taken": execution.token, "occurrence": None}
    )
    abandonments = await _abandonments(store, execution)
    return abandoned_for_good(
        job_from_document(job),
        None if request is None else request_from_document(request),
        execution,
        abandonments,
    )


async def _abandonments(store: MongoCollections, execution: Execution) -> int:
    """How many times the execution's occurrence (job, scheduled_at, a plain run) was
    abandoned by a reap since it last ended for good (a dead letter: its re-drive has a
    budget of its own). Read and counted here, by the job (the executions_by_job index)."""
    occurrence: Doc = {
        "job_id": execution.job_id,
        "scheduled_at_us": exact_micros(execution.scheduled_at),
        "shards": 1,
    }
    cutoff = -1
    async for doc in store.executions.find({**occurrence, "dead_letter": {"$ne": None}}):
        cutoff = max(cutoff, int(doc.get("finished_at_us") or -1))
    abandoned = {
        **occurrence,
        "status": Status.ABANDONED.value,
        "error.type": LEASE_EXPIRED["type"],
    }
    times = [doc.get("finished_at_us") async for doc in store.executions.find(abandoned)]
    return sum(1 for at in times if int(at or -1) > cutoff)


def _after(doc: Doc, field: str) -> list[Doc]:
    """What sorts after `doc` by (field, _id): an $or."""
    at = doc[field]
    return [{field: {"$gt": at}}, {field: at, "_id": {"$gt": doc["_id"]}}]
