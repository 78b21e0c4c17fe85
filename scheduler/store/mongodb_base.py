"""What the job store's parts on MongoDB share: its collections, its indexes, and the few
helpers every part uses (bounded bulk updates, the due and claim reads, writing events)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import ClassVar

from pymongo import (
    AsyncMongoClient,
    IndexModel,
    ReplaceOne,
    UpdateMany,
    UpdateOne,
)
from pymongo.asynchronous.collection import AsyncCollection

from scheduler.codec import (
    Doc,
    exact_micros,
)
from scheduler.model import Execution, Job
from scheduler.ports import ENDED_LEASE_UNTIL, Claim
from scheduler.storage.mongodb import (
    MongoDatabase,
    chunks,
    in_one_batch,
    insert_ignoring_duplicates,
    translating_errors,
)
from scheduler.store.mongodb_documents import (
    CHANGE_INDEXES,
    EXECUTION_INDEXES,
    JOB_INDEXES,
    OUTBOX_INDEXES,
    REQUEST_INDEXES,
    event_document,
    job_from_document,
)

Client = AsyncMongoClient[Doc]
Collection = AsyncCollection[Doc]
Update = UpdateOne | UpdateMany | ReplaceOne[Doc]


class MongoCollections(MongoDatabase):
    """The job store's collections and indexes."""

    INDEXES: ClassVar[Mapping[str, Sequence[IndexModel]]] = {
        "jobs": JOB_INDEXES,
        "executions": EXECUTION_INDEXES,
        "job_changes": CHANGE_INDEXES,
        "run_requests": REQUEST_INDEXES,
        "outbox": OUTBOX_INDEXES,
    }

    # -- collections ----------------------------------------------------------------------------

    @property
    def jobs(self) -> Collection:
        return self.database["jobs"]

    @property
    def executions(self) -> Collection:
        return self.database["executions"]

    @property
    def changes(self) -> Collection:
        return self.database["job_changes"]

    @property
    def requests(self) -> Collection:
        return self.database["run_requests"]

    @property
    def beats(self) -> Collection:
        """The instances' heartbeats, one document an instance (`_id` its id)."""
        return self.database["instances"]

    @property
    def outbox(self) -> Collection:
        return self.database["outbox"]

    async def _prepare(self, client: Client) -> None:
        await super()._prepare(client)
        await self._add_pushdown_fields()

    async def _add_pushdown_fields(self) -> None:
        """Documents written before `leased` and `ended: false` existed get them, once: the
        hot path filters on them (FerretDB pushes their equality down), so a document without
        them would never be due, reaped or expired. Idempotent; matches nothing the second time.
        """
        for collection in (self.jobs, self.requests):
            missing = {"leased": {"$exists": False}}
            await collection.update_many({**missing, "lease": None}, {"$set": {"leased": False}})
            await collection.update_many(missing, {"$set": {"leased": True}})
        await self.requests.update_many({"ended": None}, {"$set": {"ended": False}})

    @translating_errors
    async def ping(self) -> None:
        await self.database.command("ping")

    async def _update_each(self, collection: Collection, updates: Sequence[Update]) -> int:
        """How many documents the updates matched, in all."""
        matched = 0
        for batch in chunks(updates, self._statements_per_update):
            matched += (await collection.bulk_write(batch, ordered=False)).matched_count
        return matched

    async def _find_jobs(self, query: Doc, *, sort: list[tuple[str, int]], limit: int) -> list[Job]:
        if limit <= 0:  # pymongo reads a limit of 0 as "no limit"
            return []
        cursor = in_one_batch(self.jobs.find(query).sort(sort), limit)
        return [job_from_document(doc) async for doc in cursor]

    async def _write_events(self, executions: Sequence[Execution], source: str | None) -> None:
        """The executions' events, in one command; one stored already (a replay) is left."""
        if source is not None and executions:
            documents = [event_document(e, source) for e in executions]
            await insert_ignoring_duplicates(self.outbox, documents)

    async def _winners(self, claims: Sequence[Claim], batch: str) -> list[Job]:
        """The jobs this claim call (`batch`) leased, in the claims' order: one read by a value
        FerretDB pushes down, where an `_id` $in would make it decode the whole collection."""
        cursor = in_one_batch(self.jobs.find({"batch": batch}), len(claims))
        leased = {doc["_id"]: job_from_document(doc) async for doc in cursor}
        return [
            job
            for claim in claims
            if (job := leased.pop(claim.job_id, None)) is not None
            and job.lease is not None
            and job.lease.owner == claim.owner
        ]

    async def _may_take_over(
        self, leases: Sequence[tuple[str, int]], now: datetime, instance: str | None
    ) -> list[bool]:
        """Which of these leases, (owner, expiry in microseconds), the caller may take over (see
        Store.reap_expired_leases): ended, or expired by the caller's clock and held by the
        caller or by an owner that never beat. The heartbeat records are read only for the
        owners that decide it, by `_id` equality (which FerretDB pushes down): a few at most."""
        at, ended = exact_micros(now), exact_micros(ENDED_LEASE_UNTIL)
        expired = [(owner, until < at and until != ended) for owner, until in leases]
        undecided = {owner for owner, by_time in expired if by_time and owner != instance}
        beating = {owner for owner in undecided if await self.beats.find_one({"_id": owner})}
        return [
            until == ended or (until < at and (owner == instance or owner not in beating))
            for owner, until in leases
        ]
