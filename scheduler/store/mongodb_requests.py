"""Runs asked for outside the schedule (trigger, retry, backfill) on MongoDB: queued, read when
due (past the requests of leased jobs), and claimed with their jobs."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from pymongo import (
    ASCENDING,
)

from scheduler.codec import (
    Doc,
    exact_micros,
)
from scheduler.model import Job, new_id
from scheduler.ports import (
    Claim,
    RunRequest,
)
from scheduler.storage.mongodb import (
    in_one_batch,
    insert_ignoring_duplicates,
    translating_errors,
)
from scheduler.store.mongodb_base import MongoCollections
from scheduler.store.mongodb_documents import (
    job_from_document,
    request_claim,
    request_document,
    request_from_document,
)


class MongoRequests(MongoCollections):
    """The run requests of MongoStore."""

    # -- run requests (trigger, retry, backfill) -------------------------------------------------

    @translating_errors
    async def insert_run_requests(self, requests: Sequence[RunRequest]) -> None:
        if requests:
            await insert_ignoring_duplicates(self.requests, [request_document(r) for r in requests])

    @translating_errors
    async def run_request_pending(self, job_id: str, scheduled_at: datetime) -> bool:
        wanted = {"job_id": job_id, "scheduled_at_us": exact_micros(scheduled_at)}
        return await self.requests.find_one(wanted, {"_id": 1}) is not None

    @translating_errors
    async def count_pending_requests(self, job_id: str, *, reason: str) -> int:
        return await self.requests.count_documents({"job_id": job_id, "reason": reason})

    @translating_errors
    async def due_run_requests(
        self, now: datetime, limit: int, *, exclude_handlers: Sequence[str] = ()
    ) -> list[tuple[RunRequest, Job]]:
        """Two reads a page: the due requests, then their jobs (those not leased nor on an
        excluded handler). Usually one page; another only while requests left out filled the
        one before."""
        pairs: list[tuple[RunRequest, Job]] = []
        after: RunRequest | None = None
        while len(pairs) < limit:
            page = await self._due_requests_page(now, after, limit)
            pairs += (await self._with_free_jobs(page, exclude_handlers))[: limit - len(pairs)]
            if len(page) < limit:
                break
            after = page[-1]
        return pairs

    async def _due_requests_page(
        self, now: datetime, after: RunRequest | None, limit: int
    ) -> list[RunRequest]:
        due: Doc = {"not_before_us": {"$lte": exact_micros(now)}}
        if after is not None:
            at = exact_micros(after.not_before)
            due = {
                **due,
                "$or": [
                    {"not_before_us": {"$gt": at}},
                    {"not_before_us": at, "_id": {"$gt": after.id}},
                ],
            }
        cursor = self.requests.find(due).sort([("not_before_us", ASCENDING), ("_id", ASCENDING)])
        return [request_from_document(doc) async for doc in in_one_batch(cursor, limit)]

    async def _with_free_jobs(
        self, requests: list[RunRequest], exclude_handlers: Sequence[str]
    ) -> list[tuple[RunRequest, Job]]:
        if not requests:
            return []
        job_ids = list({r.job_id for r in requests})
        free: Doc = {"_id": {"$in": job_ids}, "lease": None}
        if exclude_handlers:
            free["handler"] = {"$nin": list(exclude_handlers)}
        cursor = self.jobs.find(free)
        jobs = {
            doc["_id"]: job_from_document(doc) async for doc in in_one_batch(cursor, len(job_ids))
        }
        return [(r, jobs[r.job_id]) for r in requests if r.job_id in jobs]

    @translating_errors
    async def claim_run_requests(
        self, requests: Sequence[RunRequest], claims: Sequence[Claim], now: datetime
    ) -> list[tuple[RunRequest, Job]]:
        if not claims:
            return []
        first_claims = list({c.job_id: c for c in reversed(claims)}.values())
        batch = new_id()
        await self._update_each(self.jobs, [request_claim(c, batch) for c in first_claims])
        won = {job.id: job for job in await self._winners(first_claims, batch)}
        pairs: list[tuple[RunRequest, Job]] = []
        for request, claim in zip(requests, claims, strict=True):
            job = won.pop(claim.job_id, None)
            if job is not None:
                pairs.append((request, job))
        if pairs:
            await self.requests.delete_many({"_id": {"$in": [r.id for r, _ in pairs]}})
        return pairs
