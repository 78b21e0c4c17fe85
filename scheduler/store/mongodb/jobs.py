"""Jobs and their history on MongoDB, as ops change them (the store's JobStore role)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from pymongo import (
    ASCENDING,
    DESCENDING,
)
from pymongo.errors import DuplicateKeyError, PyMongoError

from tickd.scheduler.codec import (
    Doc,
    exact_micros,
)
from tickd.scheduler.model import Job
from tickd.scheduler.ports.backends import (
    DuplicateJobName,
    JobChange,
    JobQuery,
    unchanged_state,
)
from tickd.scheduler.store.kit.mongodb import (
    in_one_batch,
    insert_ignoring_duplicates,
    is_duplicate_key,
    translating_errors,
)
from tickd.scheduler.store.mongodb.base import MongoCollections
from tickd.scheduler.store.mongodb.documents import (
    DEFINITION_FIELDS,
    change_document,
    change_from_document,
    duplicate_job_error,
    job_document,
    job_from_document,
)
from tickd.scheduler.store.mongodb.statements import (
    jobs_filter,
)


class MongoJobs(MongoCollections):
    """The jobs of MongoStore."""

    @translating_errors
    async def insert_job(self, job: Job, change: JobChange | None = None) -> None:
        try:
            await self.jobs.insert_one(job_document(job, self.partition_count))
        except DuplicateKeyError as exc:
            raise duplicate_job_error(job, exc) from None
        await self._record(change)

    @translating_errors
    async def replace_job(
        self, job: Job, expected_revision: int, change: JobChange, *, read: Job | None = None
    ) -> Job | None:
        doc = job_document(job, self.partition_count)
        fields = {k: doc[k] for k in DEFINITION_FIELDS}
        # The partition follows the concurrency key: the key's owner admits the job's runs.
        fields["part"] = doc["part"]
        fields.update({f"{k}_us": doc[f"{k}_us"] for k in ("next_run_at", "updated_at")})
        for unchanged in unchanged_state(job, read):
            fields.pop(unchanged)
            fields.pop(f"{unchanged}_us", None)
        try:
            result = await self.jobs.update_one(
                {"_id": job.id, "revision": expected_revision},
                {"$set": fields, "$inc": {"revision": 1}},
            )
        except PyMongoError as exc:
            if is_duplicate_key(exc):
                raise DuplicateJobName(job.name) from None
            raise
        if result.matched_count != 1:
            return None
        await self._record(change)
        stored = await self.jobs.find_one({"_id": job.id})
        return None if stored is None else job_from_document(stored)

    async def _record(self, change: JobChange | None) -> None:
        """The history entry goes in after the change it describes (no transactions here)."""
        if change is not None:
            await self.changes.insert_one(change_document(change))

    @translating_errors
    async def record_change(self, change: JobChange) -> None:
        await self._record(change)

    @translating_errors
    async def list_changes(
        self, job_id: str, *, limit: int = 100, before: tuple[datetime, str] | None = None
    ) -> list[JobChange]:
        if limit <= 0:
            return []
        query: Doc = {"job_id": job_id}
        if before is not None:
            at = exact_micros(before[0])
            query["$or"] = [{"at_us": {"$lt": at}}, {"at_us": at, "_id": {"$lt": before[1]}}]
        sort = [("at_us", DESCENDING), ("_id", DESCENDING)]
        cursor = in_one_batch(self.changes.find(query).sort(sort), limit)
        return [change_from_document(doc) async for doc in cursor]

    @translating_errors
    async def insert_missing_jobs(self, jobs: Sequence[Job]) -> list[Job]:
        if not jobs:
            return []
        taken = await insert_ignoring_duplicates(
            self.jobs, [job_document(job, self.partition_count) for job in jobs]
        )
        return [job for i, job in enumerate(jobs) if i not in taken]

    @translating_errors
    async def get_job(self, job_id: str) -> Job | None:
        doc = await self.jobs.find_one({"_id": job_id})
        return None if doc is None else job_from_document(doc)

    @translating_errors
    async def get_job_by_name(self, name: str) -> Job | None:
        doc = await self.jobs.find_one({"name": name})
        return None if doc is None else job_from_document(doc)

    @translating_errors
    async def list_jobs(self, query: JobQuery | None = None) -> list[Job]:
        query = query or JobQuery()
        return await self._find_jobs(
            jobs_filter(query), sort=[("name", ASCENDING)], limit=query.limit
        )

    @translating_errors
    async def delete_job(
        self, job_id: str, change: JobChange | None = None, *, expected_revision: int | None = None
    ) -> bool:
        query: Doc = {"_id": job_id}
        if expected_revision is not None:
            query["revision"] = expected_revision
        if (await self.jobs.delete_one(query)).deleted_count != 1:
            return False
        await self.requests.delete_many({"job_id": job_id})
        # Nothing would re-drive them any more: handled, kept for reading until pruned.
        await self.executions.update_many(
            {"job_id": job_id, "dead_letter": {"$in": ["open", "redriving"]}},
            {"$set": {"dead_letter": "discarded"}},
        )
        await self._record(change)
        return True
