"""What the job store's parts on MongoDB share: its collections, its indexes, and the few
helpers every part uses (bounded bulk updates, the due and claim reads, writing events)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import ClassVar

import pymongo
from pymongo import (
    AsyncMongoClient,
    IndexModel,
    ReplaceOne,
    UpdateMany,
    UpdateOne,
)
from pymongo.asynchronous.collection import AsyncCollection

from tickd.scheduler.codec import (
    Doc,
    exact_micros,
)
from tickd.scheduler.model import Execution, Job
from tickd.scheduler.partitions import DEFAULT_PARTITIONS, partition_of
from tickd.scheduler.ports.backends import ENDED_LEASE_UNTIL, Claim
from tickd.scheduler.store.kit.mongodb import (
    INDEX_BUILD_SECONDS,
    MongoDatabase,
    chunks,
    in_one_batch,
    insert_ignoring_duplicates,
    translating_errors,
)
from tickd.scheduler.store.mongodb.documents import (
    CHANGE_INDEXES,
    EXECUTION_INDEXES,
    FINISH_BUCKETS,
    JOB_INDEXES,
    OUTBOX_INDEXES,
    REQUEST_INDEXES,
    event_document,
    finish_buckets,
    job_from_document,
)

Client = AsyncMongoClient[Doc]
Collection = AsyncCollection[Doc]
Update = UpdateOne | UpdateMany | ReplaceOne[Doc]
# Executions given their FINISH_BUCKETS at open, at most (about 7 s on FerretDB here).
MIGRATED_AT_OPEN = 2000
FINISH_BUCKETS_MIGRATION = "executions.finish_buckets"
JOB_PARTITIONS_MIGRATION = "jobs.part"


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
    def cancel_requests_collection(self) -> Collection:
        """Requests to stop a running or queued execution, one document each (`_id` its
        execution's id)."""
        return self.database["cancel_requests"]

    @property
    def outbox(self) -> Collection:
        return self.database["outbox"]

    @property
    def partitions(self) -> Collection:
        """The due queue's partitions, one document each (`_id` its number): owner, epoch."""
        return self.database["partitions"]

    @property
    def domains(self) -> Collection:
        """The domains' settings, one document a domain that has a record (`_id` its name)."""
        return self.database["domains"]

    @property
    def migrations(self) -> Collection:
        """One document a migration done at open that is too costly to try at every open."""
        return self.database["migrations"]

    # Partitions of a new store; how many the store has, read at open.
    new_partition_count = DEFAULT_PARTITIONS
    partition_count = DEFAULT_PARTITIONS

    async def _prepare(self, client: Client) -> None:
        await super()._prepare(client)
        await self._make_partitions()
        await self._add_pushdown_fields()

    async def _make_partitions(self) -> None:
        """A new store gets its partitions; one that has them keeps their count."""
        if await self.partitions.count_documents({}) == 0:
            parts = [
                {"_id": part, "owner": None, "epoch": 0} for part in range(self.new_partition_count)
            ]
            await insert_ignoring_duplicates(self.partitions, parts)
        self.partition_count = await self.partitions.count_documents({})

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
        await self._add_partitions_to_jobs()
        with pymongo.timeout(INDEX_BUILD_SECONDS):  # one read of every execution, like a build
            await self._add_finish_buckets()

    async def _add_partitions_to_jobs(self) -> None:
        """Jobs written before partitions existed get their `part`, all at the first open (an
        instance reading its partitions would never see a job without one), each by `_id`:
        FerretDB 1.24 has no update with an aggregation pipeline. A marker then says none is
        left, so later opens skip the read, which decodes every job on FerretDB."""
        if await self.migrations.find_one({"_id": JOB_PARTITIONS_MIGRATION}) is not None:
            return
        cursor = self.jobs.find({"part": {"$exists": False}}, {"_id": 1})
        count = self.partition_count
        updates: list[Update] = [
            UpdateOne({"_id": doc["_id"]}, {"$set": {"part": partition_of(doc["_id"], count)}})
            async for doc in cursor
        ]
        await self._update_each(self.jobs, updates)
        await insert_ignoring_duplicates(self.migrations, [{"_id": JOB_PARTITIONS_MIGRATION}])

    async def _add_finish_buckets(self) -> None:
        """Executions written before FINISH_BUCKETS existed get them: retention reads only by
        them, so it would never prune one without. FerretDB 1.24 has no update with an
        aggregation pipeline, so each is set by `_id` (an equality it pushes down), at about
        3.5 ms a document there: the open sets at most MIGRATED_AT_OPEN (50,000 would hold it
        for minutes), and retention's first read of the executions, which sees them all, sets
        the rest without holding anything up. The read here decodes every execution on
        FerretDB, so once none is left a marker says so and later opens skip it."""
        if await self.migrations.find_one({"_id": FINISH_BUCKETS_MIGRATION}) is not None:
            return
        missing = {FINISH_BUCKETS[0]: {"$exists": False}}
        fields = {"finished_at_us": 1}
        cursor = self.executions.find(missing, fields).limit(MIGRATED_AT_OPEN + 1)
        docs = [doc async for doc in cursor.batch_size(MIGRATED_AT_OPEN + 1)]
        await self._add_buckets(docs[:MIGRATED_AT_OPEN])
        if len(docs) <= MIGRATED_AT_OPEN:  # none left; instances opening together: one marker
            await insert_ignoring_duplicates(self.migrations, [{"_id": FINISH_BUCKETS_MIGRATION}])

    async def _add_buckets(self, executions: Sequence[Doc]) -> None:
        """Set FINISH_BUCKETS on these execution documents (each with its `finished_at_us`)."""
        updates: list[Update] = [
            UpdateOne({"_id": doc["_id"]}, {"$set": finish_buckets(doc.get("finished_at_us"))})
            for doc in executions
        ]
        await self._update_each(self.executions, updates)

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
