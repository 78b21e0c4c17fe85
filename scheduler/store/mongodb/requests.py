"""Runs asked for outside the schedule (trigger, retry, backfill) on MongoDB: queued, read when
due (past the requests of leased jobs), and claimed with their jobs."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from pymongo import (
    ASCENDING,
    DeleteOne,
    UpdateOne,
)

from tickd.scheduler.codec import (
    Doc,
    exact_micros,
)
from tickd.scheduler.model import Execution, Job, Status, new_id
from tickd.scheduler.partitions import job_partition
from tickd.scheduler.ports.backends import (
    OCCURRENCE_OWNER,
    Advance,
    Claim,
    RunEnd,
    RunRequest,
)
from tickd.scheduler.store.kit.mongodb import (
    from_micros,
    in_one_batch,
    insert_ignoring_duplicates,
    translating_errors,
)
from tickd.scheduler.store.mongodb.base import MongoCollections
from tickd.scheduler.store.mongodb.documents import (
    LEASE_EXPIRED,
    NOT_ENDED,
    execution_from_document,
    job_from_document,
    request_document,
    request_from_document,
)
from tickd.scheduler.store.mongodb.statements import (
    abandon_running,
    held_by,
    lease_until_at_least,
    release_update,
    request_claim,
    schedule_unchanged,
    shard_claim,
    shard_end,
    shard_held_by,
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
        """Not the one being run: taken by the job's lease now (one whose lease lapsed is
        pending again)."""
        pending: Doc = {"job_id": job_id, "reason": reason}
        job = await self.jobs.find_one({"_id": job_id}, {"fence": 1, "lease": 1})
        if job is not None and job.get("lease") is not None:
            pending["taken"] = {"$ne": job["fence"]}
        return await self.requests.count_documents(pending)

    @translating_errors
    async def due_run_requests(
        self,
        now: datetime,
        limit: int,
        *,
        exclude_handlers: Sequence[str] = (),
        exclude_domains: Sequence[str] = (),
        exclude_keys: Sequence[str] = (),
        instance: str | None = None,
        partitions: Sequence[int] | None = None,
    ) -> list[tuple[RunRequest, Job]]:
        """Two reads a page: the due requests, then their jobs (those not leased, nor of an
        excluded handler, domain or key). Usually one page; another only while requests left
        out filled the one before."""
        pairs: list[tuple[RunRequest, Job]] = []
        after: RunRequest | None = None
        while len(pairs) < limit:
            page = await self._due_requests_page(now, after, limit)
            excluded = (exclude_handlers, exclude_domains, exclude_keys)
            free = await self._with_free_jobs(page, excluded, now, instance, partitions)
            pairs += free[: limit - len(pairs)]
            if len(page) < limit:
                break
            after = page[-1]
        return pairs

    async def _due_requests_page(
        self, now: datetime, after: RunRequest | None, limit: int
    ) -> list[RunRequest]:
        due: Doc = {"not_before_us": {"$lte": exact_micros(now)}, **NOT_ENDED}
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
        self,
        requests: list[RunRequest],
        excluded: tuple[Sequence[str], Sequence[str], Sequence[str]],  # handlers, domains, keys
        now: datetime,
        instance: str | None,
        partitions: Sequence[int] | None,
    ) -> list[tuple[RunRequest, Job]]:
        if not requests:
            return []
        job_ids = {r.job_id for r in requests}
        by_id = self._jobs_by_id if self.on_ferretdb else self._jobs_in
        found = await by_id(job_ids)
        handlers, domains, keys = excluded
        jobs = {
            job_id: job
            for job_id, job in found.items()
            if job.handler not in handlers
            and job.domain not in domains
            and (job.concurrency_key is None or job.concurrency_key not in keys)
            and self._admits_here(job, partitions)
        }
        paired = [(r, job) for r in requests if (job := jobs.get(r.job_id)) and _due_now(r, job)]
        held = {r.id: r.lease for r, _ in paired if r.lease is not None}
        leases = [(lease.owner, exact_micros(lease.until)) for lease in held.values()]
        takeable = await self._may_take_over(leases, now, instance)
        taken_over = {r_id for r_id, take in zip(held, takeable, strict=True) if take}
        return [(r, job) for r, job in paired if r.id not in held or r.id in taken_over]

    def _admits_here(self, job: Job, partitions: Sequence[int] | None) -> bool:
        """Whether the caller, holding `partitions` (None: all), reads the job's requests: a
        keyed job's only where its partition (its key's) is held."""
        if partitions is None or job.concurrency_key is None:
            return True
        return job_partition(job, self.partition_count) in partitions

    async def _jobs_in(self, job_ids: set[str]) -> dict[str, Job]:
        """One read by `_id` $in: on MongoDB, where the index serves it (FerretDB would decode
        every job for it)."""
        cursor = in_one_batch(self.jobs.find({"_id": {"$in": list(job_ids)}}), len(job_ids))
        return {doc["_id"]: job_from_document(doc) async for doc in cursor}

    @translating_errors
    async def claim_run_requests(
        self,
        requests: Sequence[RunRequest],
        claims: Sequence[Claim],
        now: datetime,
        *,
        event_source: str | None = None,
    ) -> list[tuple[RunRequest, Job]]:
        shards = [(r, c) for r, c in zip(requests, claims, strict=True) if r.occurrence is not None]
        plain = [(r, c) for r, c in zip(requests, claims, strict=True) if r.occurrence is None]
        won = await self._claim_shards(shards, now, event_source) if shards else []
        if plain:
            won += await self._claim_requests([r for r, _ in plain], [c for _, c in plain])
        return won

    async def _claim_requests(
        self, requests: Sequence[RunRequest], claims: Sequence[Claim]
    ) -> list[tuple[RunRequest, Job]]:
        first_claims = list({c.job_id: c for c in reversed(claims)}.values())
        batch = new_id()
        await self._update_each(self.jobs, [request_claim(c, batch) for c in first_claims])
        won = {job.id: job for job in await self._winners(first_claims, batch)}
        pairs: list[tuple[RunRequest, Job]] = []
        for request, claim in zip(requests, claims, strict=True):
            job = won.pop(claim.job_id, None)
            if job is not None:
                pairs.append((request, job))
        return [pair for pair in pairs if await self._take_request(*pair)]

    async def _take_request(self, request: RunRequest, job: Job) -> bool:
        """Mark the request taken by the job's new token, the job claimed for it (it stays
        queued until the run's end: see Store.claim_run_requests). A request read before
        another instance claimed it, ran it and freed its job wins the job again (the same
        revision, no lease): gone from the queue, it is not run a second time, and the job is
        let go. One update by `_id`, which FerretDB pushes down (an `$in` it does not)."""
        assert job.lease is not None
        taken = {"$set": {"taken": job.lease.token}}
        if (await self.requests.update_one({"_id": request.id}, taken)).matched_count == 1:
            return True
        await self.jobs.update_one(held_by(job.id, job.lease.token), release_update(None))
        return False

    async def _claim_shards(
        self, shards: Sequence[tuple[RunRequest, Claim]], now: datetime, source: str | None
    ) -> list[tuple[RunRequest, Job]]:
        """The runs of expired leases abandoned first (their events before them, as a reap
        does), then each entry's compare-and-set, one read of the winners by `batch`, one of
        their jobs (those still held by the occurrence), and their occurrences' leases pushed
        back."""
        expired = [(r.job_id, r.lease.token) for r, _ in shards if r.lease is not None]
        if expired:
            abandon = [abandon_running(job_id, token, now) for job_id, token in expired]
            await self._update_each(self.executions, abandon)
            await self._write_events(await self._abandoned_by(expired), source)
        batch = new_id()
        await self._update_each(self.requests, [shard_claim(r, c, batch) for r, c in shards])
        cursor = in_one_batch(self.requests.find({"batch": batch}), len(shards))
        taken = {doc["_id"]: request_from_document(doc) async for doc in cursor}
        jobs = await self._jobs_by_id({r.job_id for r in taken.values()})
        won = [
            (entry, job)
            for request, _ in shards
            if (entry := taken.get(request.id)) is not None
            and (job := jobs.get(entry.job_id)) is not None
            and job.lease is not None
            and job.lease.token == entry.occurrence
        ]
        outlive: dict[tuple[str, int], datetime] = {}
        for entry, _ in won:
            assert entry.lease is not None
            assert entry.occurrence is not None
            until = entry.lease.until + (entry.lease.until - now)
            key = (entry.job_id, entry.occurrence)
            outlive[key] = max(until, outlive.get(key, until))
        await self._update_each(
            self.jobs, [lease_until_at_least(j, t, until) for (j, t), until in outlive.items()]
        )
        return won

    async def _jobs_by_id(self, job_ids: set[str]) -> dict[str, Job]:
        """By `_id` equality, one read a job (FerretDB pushes it down; an `$in` it does not):
        the shards of one batch are mostly of one job or a few."""
        jobs = {}
        for job_id in job_ids:
            doc = await self.jobs.find_one({"_id": job_id})
            if doc is not None:
                jobs[job_id] = job_from_document(doc)
        return jobs

    async def _abandoned_by(self, leases: list[tuple[str, int]]) -> list[Execution]:
        """Every execution these leases' reaps marked: this one's, or an interrupted one's."""
        cursor = self.executions.find(
            {
                "$or": [{"job_id": job_id, "token": token} for job_id, token in leases],
                "status": Status.ABANDONED.value,
                "error.type": LEASE_EXPIRED["type"],
            }
        )
        return [execution_from_document(doc) async for doc in cursor]

    # -- sharded occurrences (ports.Store.start_occurrence) --------------------------------------

    @translating_errors
    async def start_occurrence(
        self, job_id: str, token: int, until: datetime, shards: Sequence[RunRequest]
    ) -> bool:
        """The lease handed over, then the entries of an earlier occurrence dropped and these
        queued: a crash in between leaves the occurrence's lease to expire (it runs again).
        The request it was claimed for leaves the queue last: a crash before that runs the
        occurrence again once it ends, rather than losing it."""
        moved = {
            "lease.owner": OCCURRENCE_OWNER,
            "lease.until": until,
            "lease.until_us": exact_micros(until),
        }
        result = await self.jobs.update_one(held_by(job_id, token), {"$set": moved})
        if result.matched_count != 1:
            return False
        await self.requests.delete_many({"job_id": job_id, "occurrence": {"$ne": None}})
        await insert_ignoring_duplicates(self.requests, [request_document(r) for r in shards])
        await self.requests.delete_many({"job_id": job_id, "taken": token})
        return True

    @translating_errors
    async def renew_shard_lease(
        self, shard: RunRequest, token: int, until: datetime, now: datetime
    ) -> bool:
        moved = {"lease.until": until, "lease.until_us": exact_micros(until)}
        result = await self.requests.update_one(shard_held_by(shard.id, token), {"$set": moved})
        if result.matched_count != 1:
            return False
        assert shard.occurrence is not None
        outlives = until + (until - now)
        await self._update_each(
            self.jobs, [lease_until_at_least(shard.job_id, shard.occurrence, outlives)]
        )
        return True

    @translating_errors
    async def give_back_shards(self, shards: Sequence[tuple[RunRequest, int]]) -> None:
        updates = [
            UpdateOne(shard_held_by(entry.id, token), {"$set": {"lease": None, "leased": False}})
            for entry, token in shards
        ]
        await self._update_each(self.requests, updates)

    @translating_errors
    async def occurrence_shards(self, job_id: str, occurrence: int) -> list[RunRequest]:
        cursor = self.requests.find({"job_id": job_id, "occurrence": occurrence})
        entries = [request_from_document(doc) async for doc in cursor]
        return sorted(entries, key=lambda entry: entry.shard or 0)

    @translating_errors
    async def end_occurrence(self, job_id: str, occurrence: int, advance: Advance) -> bool:
        """The schedule moves only if ops did not change the job meanwhile (see Advance)."""
        fenced = held_by(job_id, occurrence)
        result = await self.jobs.update_one(
            {**fenced, **schedule_unchanged(advance)}, release_update(advance)
        )
        if result.matched_count != 1:
            result = await self.jobs.update_one(fenced, release_update(advance, schedule=False))
        if result.matched_count != 1:
            return False
        await self.requests.delete_many({"job_id": job_id, "occurrence": occurrence})
        return True

    async def _shards_ended(self, finishes: Sequence[RunEnd]) -> set[str]:
        """The shards' ends on their entries (see shard_end); which applied: their execution
        ids. A bulk write reports only counts, so when every update matched, no read is
        needed."""
        if not finishes:
            return set()
        batch = new_id()
        if await self._update_each(self.requests, [shard_end(f, batch) for f in finishes]) == len(
            finishes
        ):
            return {f.execution.id for f in finishes}
        cursor = self.requests.find({"batch": batch}, {"_id": 1})
        ended = {doc["_id"] async for doc in in_one_batch(cursor, len(finishes))}
        return {f.execution.id for f in finishes if f.shard is not None and f.shard.id in ended}

    async def _take_off_queue(self, request_ids: Sequence[str]) -> None:
        """Requests whose runs ended, after their executions (which name them, for a reaper
        that rolls an end forward) and before their jobs are freed (a request left queued on a
        free job would run again). One command: a delete by `_id` each (FerretDB pushes those
        down, not an `$in`)."""
        if request_ids:
            deletes = [DeleteOne({"_id": request_id}) for request_id in request_ids]
            await self.requests.bulk_write(deletes, ordered=False)

    @translating_errors
    async def executions_at(self, job_id: str, scheduled_ats: Sequence[datetime]) -> set[datetime]:
        if not scheduled_ats:
            return set()
        wanted = {
            "job_id": job_id,
            "scheduled_at_us": {"$in": [exact_micros(t) for t in scheduled_ats]},
        }
        found: set[datetime] = set()
        for collection in (self.executions, self.requests):
            cursor = collection.find(wanted, {"scheduled_at_us": 1})
            found |= {from_micros(doc["scheduled_at_us"]) async for doc in cursor}
        return found


def _due_now(request: RunRequest, job: Job) -> bool:
    """A request of a free job; or a shard entry of the occurrence holding its job (free, or
    leased: then due if its lease may be taken over, see `_may_take_over`)."""
    if request.occurrence is None:
        return job.lease is None
    return job.lease is not None and job.lease.token == request.occurrence
