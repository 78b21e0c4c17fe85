"""The production store: MongoDB through pymongo's asyncio client (`mongodb://host/database`).

Documents are the codec's (scheduler/codec.py), written as mongodb_documents.py says: `_id`
strings, times as BSON dates with exact `_us` twins, collections `jobs`, `executions`,
`job_changes` and `run_requests`. The database is the URL's path (default `tickd`); a store built
on a client it was handed uses that client's default database and never closes it. What every
MongoDB store shares (errors, FerretDB's limits, clients, indexes) is
scheduler/store_kit/mongodb.py.

Compare-and-set without transactions. Each statement is atomic on its document, which is all a
claim needs: the filter holds everything the claim read (revision, next_run_at, no lease, enabled)
and the update increments the job's fence, whose new value is the lease's token, and names the
claim call in `batch`. So a batch claim is two round trips whatever its size: one update command
with an UpdateOne per claim, then one find of the jobs whose `batch` is this call's (the winners).
Every other fenced write filters on the fence with a lease present: once a lease is reaped, its run
can no longer touch the job.

FerretDB 1.24 pushes down to PostgreSQL only equality on top-level fields (and $ne); `$in`, `$or`,
ranges, null and sorts are evaluated in Go over every document the pushed-down part matched. So
the hot path reads and writes by `_id` and by such equalities only (`batch`, `sent`), never by an
`_id` $in, which would decode the whole collection (scripts/services.sh indexes the equalities).

On FerretDB 1.24 (the test server, on its PostgreSQL handler) a statement is NOT atomic, so two
instances claiming one job at the same instant can both win, with the same token. There, only the
lock (Redis) keeps instances apart; the system tests run two daemons that way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from pymongo import (
    ASCENDING,
    DESCENDING,
    DeleteOne,
)
from pymongo.errors import DuplicateKeyError, PyMongoError

from tickd.scheduler.codec import (
    Doc,
    exact_micros,
)
from tickd.scheduler.model import DeadLetter, Execution, Job, Status, new_id
from tickd.scheduler.ports import (
    ENDED_LEASE_UNTIL,
    OCCURRENCE_OWNER,
    Backlog,
    Claim,
    DuplicateJobName,
    ExecutionQuery,
    Finish,
    JobChange,
    JobQuery,
    unchanged_state,
)
from tickd.scheduler.store.mongodb_documents import (
    DEFINITION_FIELDS,
    LEASE_EXPIRED,
    LEASED,
    NEWEST_FIRST,
    OLDEST_DUE_FIRST,
    URGENCY,
    abandon_running,
    change_document,
    change_from_document,
    claim_update,
    due_filter,
    duplicate_job_error,
    execution_document,
    execution_from_document,
    executions_filter,
    finish_update,
    finished_document,
    held_by,
    job_document,
    job_from_document,
    jobs_filter,
    release_lease,
    request_document,
    rolled_forward,
    settle_dead_letters,
    shard_held_by,
)
from tickd.scheduler.store.mongodb_housekeeping import MongoHousekeeping
from tickd.scheduler.store.mongodb_requests import MongoRequests
from tickd.scheduler.store.mongodb_views import MongoViews
from tickd.scheduler.store_kit.mongodb import (
    from_micros,
    in_one_batch,
    insert_ignoring_duplicates,
    is_duplicate_key,
    translating_errors,
)


class MongoStore(MongoRequests, MongoHousekeeping, MongoViews):
    """Jobs and executions in MongoDB; every batch of the engine is a bounded number of commands."""

    # -- jobs -----------------------------------------------------------------------------------

    @translating_errors
    async def insert_job(self, job: Job, change: JobChange | None = None) -> None:
        try:
            await self.jobs.insert_one(job_document(job))
        except DuplicateKeyError as exc:
            raise duplicate_job_error(job, exc) from None
        await self._record(change)

    @translating_errors
    async def replace_job(
        self, job: Job, expected_revision: int, change: JobChange, *, read: Job | None = None
    ) -> Job | None:
        doc = job_document(job)
        fields = {k: doc[k] for k in DEFINITION_FIELDS}
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
        taken = await insert_ignoring_duplicates(self.jobs, [job_document(job) for job in jobs])
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
        await self._record(change)
        return True

    # -- the engine's batch operations ----------------------------------------------------------

    @translating_errors
    async def due_jobs(
        self,
        now: datetime,
        limit: int,
        *,
        exclude_handlers: Sequence[str] = (),
        starved_before: datetime | None = None,
        first: Sequence[str] = (),
    ) -> list[Job]:
        """With `first`, a read of those by `_id` first; with `starved_before`, a read of the
        starved, oldest first (the jobs_next index); then the rest by urgency. Each read stops
        where the ones before it left off."""
        due = due_filter(now, exclude_handlers)
        found: list[Job] = []
        if first:
            named = {**due, "_id": {"$in": list(first)}}
            found += await self._find_jobs(named, sort=OLDEST_DUE_FIRST, limit=limit)
            due["_id"] = {"$nin": list(first)}
        if starved_before is not None and len(found) < limit:
            old = {**due, "next_run_at_us": {"$lte": exact_micros(starved_before)}}
            found += await self._find_jobs(old, sort=OLDEST_DUE_FIRST, limit=limit - len(found))
            due["next_run_at_us"] = {"$gt": exact_micros(starved_before), "$lte": exact_micros(now)}
        if len(found) < limit:
            found += await self._find_jobs(due, sort=URGENCY, limit=limit - len(found))
        return found

    @translating_errors
    async def due_backlog(self, now: datetime) -> Backlog:
        """One read of the due jobs' times (the jobs_next index), counted here: a count and a
        sorted find would each make FerretDB decode every due job, and its $group has no $min."""
        cursor = self.jobs.find(due_filter(now), {"_id": 0, "next_run_at_us": 1})
        due = [doc["next_run_at_us"] async for doc in cursor]
        return Backlog(due=len(due), oldest_due_at=from_micros(min(due)) if due else None)

    @translating_errors
    async def claim_jobs(self, claims: Sequence[Claim], now: datetime) -> list[Job]:
        if not claims:
            return []
        batch = new_id()
        await self._update_each(self.jobs, [claim_update(c, batch) for c in claims])
        return await self._winners(claims, batch)

    @translating_errors
    async def renew_lease(self, job_id: str, token: int, until: datetime) -> bool:
        moved = {"lease.until": until, "lease.until_us": exact_micros(until)}
        result = await self.jobs.update_one(held_by(job_id, token), {"$set": moved})
        return result.matched_count == 1

    @translating_errors
    async def insert_executions(
        self, executions: Sequence[Execution], *, event_source: str | None = None
    ) -> None:
        if executions:
            await self._write_events(executions, event_source)
            await insert_ignoring_duplicates(
                self.executions, [execution_document(e) for e in executions]
            )

    @translating_errors
    async def finish_executions(
        self, finishes: Sequence[Finish], *, event_source: str | None = None
    ) -> list[bool]:
        """The events (before the executions: see Store), the executions, then the fenced job
        updates, then one read of which applied (a bulk write reports only counts): each applied
        update leaves its execution's id in the job's `last_release`. The schedule moves only if
        ops did not change the job during the run (see Advance); without pipeline updates that
        takes a second command for those that did."""
        if not finishes:
            return []
        await self._write_events([f.execution for f in finishes], event_source)
        await self._update_each(self.executions, [finished_document(f) for f in finishes])
        await self._settle_and_redrive(finishes)
        await self._take_off_queue([f.request_id for f in finishes if f.request_id is not None])
        shards = await self._shards_ended([f for f in finishes if f.shard is not None])
        fenced = [f for f in finishes if f.execution.token is not None and f.shard is None]
        released = await self._release(fenced, schedule=True)
        changed = [f for f in fenced if f.advance and f.execution.id not in released]
        if changed:
            released |= await self._release(changed, schedule=False)
        applied = released | shards
        return [f.execution.id in applied for f in finishes]

    async def _settle_and_redrive(self, finishes: Sequence[Finish]) -> None:
        settles = [settle_dead_letters(f.execution) for f in finishes if f.settles]
        await self._update_each(self.executions, settles)
        # A run fenced off (its lease lapsed, the occurrence is another instance's now) queues
        # no re-drive: that instance runs the occurrence, and a re-drive would run it again.
        # Its dead letter is `open` for ops, not left `redriving` for ever with nothing queued:
        # nothing says that instance ran it (it may have skipped it, past its grace).
        # Read before the release, not after: a crash between the two then loses no re-drive.
        redrives = []
        for finish in finishes:
            if finish.redrive is None:
                continue
            if await self._still_held(finish):
                redrives.append(finish.redrive)
            else:
                to_ops = {"$set": {"dead_letter": DeadLetter.OPEN.value}}
                await self.executions.update_one({"_id": finish.execution.id}, to_ops)
        if not redrives:
            return
        documents = [request_document(request) for request, _ in redrives]
        taken = await insert_ignoring_duplicates(self.requests, documents)
        changes = [change for i, (_, change) in enumerate(redrives) if i not in taken]
        if changes:
            await self.changes.insert_many([change_document(c) for c in changes])

    async def _take_off_queue(self, request_ids: Sequence[str]) -> None:
        """Requests whose runs ended, after their executions (which name them, for a reaper
        that rolls an end forward) and before their jobs are freed (a request left queued on a
        free job would run again). One command: a delete by `_id` each (FerretDB pushes those
        down, not an `$in`)."""
        if request_ids:
            deletes = [DeleteOne({"_id": request_id}) for request_id in request_ids]
            await self.requests.bulk_write(deletes, ordered=False)

    async def _still_held(self, finish: Finish) -> bool:
        """Whether the run's lease (its job's, or its shard entry's) still holds: one read by
        `_id`, made only for runs that failed for good with a re-drive policy."""
        token = finish.execution.token
        if token is None:
            return True
        if finish.shard is not None:
            return await self.requests.find_one(shard_held_by(finish.shard.id, token)) is not None
        return await self.jobs.find_one(held_by(finish.execution.job_id, token)) is not None

    async def _release(self, finishes: Sequence[Finish], *, schedule: bool) -> set[str]:
        """The fenced job updates, then which applied: the runs the jobs this call (`batch`)
        touched now name. A bulk write reports only counts, so when every update matched, no
        read is needed."""
        if not finishes:
            return set()
        batch = new_id()
        updates = [finish_update(f, schedule=schedule, batch=batch) for f in finishes]
        if await self._update_each(self.jobs, updates) == len(updates):
            return {f.execution.id for f in finishes}
        cursor = self.jobs.find({"batch": batch}, {"last_release": 1})
        named = {doc.get("last_release") async for doc in in_one_batch(cursor, len(finishes))}
        return {f.execution.id for f in finishes} & named

    @translating_errors
    async def beat(self, instance: str, now: datetime) -> None:
        beat = {"beat_at": now, "beat_at_us": exact_micros(now)}
        await self.beats.update_one({"_id": instance}, {"$set": beat}, upsert=True)

    @translating_errors
    async def instances(self) -> dict[str, datetime]:
        cursor = self.beats.find({}, {"beat_at_us": 1})
        return {doc["_id"]: from_micros(doc["beat_at_us"]) async for doc in cursor}

    @translating_errors
    async def forget_instances(self, beats: Mapping[str, datetime]) -> None:
        forget = [
            DeleteOne({"_id": instance, "beat_at_us": exact_micros(beat)})
            for instance, beat in beats.items()
        ]
        if forget:
            await self.beats.bulk_write(forget, ordered=False)

    @translating_errors
    async def end_leases(self, owners: Sequence[str]) -> list[tuple[str, int | None]]:
        """One update a collection, and only when it ended any, one read of what it ended, by
        the call's `batch` (an equality FerretDB pushes down)."""
        if not owners:
            return []
        ended_us, batch = exact_micros(ENDED_LEASE_UNTIL), new_id()
        held = {**LEASED, "lease.owner": {"$in": list(owners)}, "lease.until_us": {"$gt": ended_us}}
        lease = {"lease.until": ENDED_LEASE_UNTIL, "lease.until_us": ended_us}
        ended = {"$set": {**lease, "batch": batch}}
        leases: list[tuple[str, int | None]] = []
        if (await self.jobs.update_many(held, ended)).modified_count:
            cursor = self.jobs.find({"batch": batch}, {"_id": 1})
            leases += [(doc["_id"], None) async for doc in cursor]
        if (await self.requests.update_many(held, ended)).modified_count:
            cursor = self.requests.find({"batch": batch}, {"job_id": 1, "shard": 1})
            leases += [(doc["job_id"], doc["shard"]) async for doc in cursor]
        return leases

    @translating_errors
    async def give_back(self, leases: Sequence[tuple[str, int]]) -> None:
        await self._update_each(self.jobs, [release_lease(job, token) for job, token in leases])

    @translating_errors
    async def reap_expired_leases(
        self, now: datetime, *, instance: str | None = None, event_source: str | None = None
    ) -> list[Execution]:
        """Executions first, then the leases: a crash in between leaves a lease to reap again,
        never a `running` execution that nothing guards."""
        expired = await self._expired_leases(now, instance)
        if not expired:
            return []
        abandon = [abandon_running(job_id, token, now) for job_id, token in expired]
        await self._update_each(self.executions, abandon)
        # outbox: before the leases go, so a crash in between writes them at the next reap
        await self._write_events(await self._abandoned_by(expired), event_source)
        ended = await self._roll_forward(expired)
        released = [lease for lease in expired if lease not in ended]
        await self._update_each(self.jobs, [release_lease(job, token) for job, token in released])
        return await self._abandoned_at(now, expired)

    async def _roll_forward(self, leases: list[tuple[str, int]]) -> set[tuple[str, int]]:
        """The runs that ended, whose job update a crash kept from being written (a run's end
        writes its execution, then its job): the update each execution kept is applied now,
        fenced as it would have been, instead of a release that would run the occurrence
        again. Returns their leases. One read a lease, by the job (FerretDB pushes that down,
        not an $or): leases expire only when an instance died."""
        ended: list[Doc] = []
        for job_id, token in leases:
            found = await self.executions.find_one(
                {"job_id": job_id, "token": token, "release": {"$ne": None}},
                {"job_id": 1, "token": 1, "release": 1},
            )
            ended += [found] if found is not None else []
        if not ended:
            return set()
        await self._take_off_queue([r for doc in ended if (r := doc["release"].get("request_id"))])
        batch = new_id()
        updates = [rolled_forward(doc, schedule=True, batch=batch) for doc in ended]
        if await self._update_each(self.jobs, updates) < len(updates):
            cursor = self.jobs.find({"batch": batch}, {"last_release": 1})
            applied = {doc.get("last_release") async for doc in cursor}
            changed = [doc for doc in ended if doc["_id"] not in applied]  # ops changed the job
            await self._update_each(
                self.jobs, [rolled_forward(doc, schedule=False, batch=batch) for doc in changed]
            )
        return {(doc["job_id"], int(doc["token"])) for doc in ended}

    async def _expired_leases(self, now: datetime, instance: str | None) -> list[tuple[str, int]]:
        expired = {**LEASED, "lease.until_us": {"$lt": exact_micros(now)}}
        cursor = self.jobs.find(expired, {"fence": 1, "lease.owner": 1, "lease.until_us": 1})
        found = [
            (doc["_id"], int(doc["fence"]), doc["lease"]["owner"], doc["lease"]["until_us"])
            async for doc in cursor
        ]
        takeable = await self._may_take_over([(o, until) for *_, o, until in found], now, instance)
        reapable: list[tuple[str, int]] = []
        for (job_id, fence, owner, _), take in zip(found, takeable, strict=True):
            if not take:
                continue
            if owner != OCCURRENCE_OWNER or not await self._runs_elsewhere(
                job_id, fence, now, instance
            ):
                reapable.append((job_id, fence))
        return reapable

    async def _runs_elsewhere(
        self, job_id: str, occurrence: int, now: datetime, instance: str | None
    ) -> bool:
        """Whether a shard of this occurrence is leased by another instance that beats: the
        occurrence lives while one runs there, whatever the caller's clock says of its lease."""
        cursor = self.requests.find({"job_id": job_id, "occurrence": occurrence}, {"lease": 1})
        leases = [
            (doc["lease"]["owner"], doc["lease"]["until_us"])
            async for doc in cursor
            if doc.get("lease") is not None
        ]
        return not all(await self._may_take_over(leases, now, instance))

    async def _abandoned_at(self, now: datetime, leases: list[tuple[str, int]]) -> list[Execution]:
        """Read back what this reap marked (an execution the run finished meanwhile is not)."""
        cursor = self.executions.find(
            {
                "$or": [{"job_id": job_id, "token": token} for job_id, token in leases],
                "status": Status.ABANDONED.value,
                "error.type": LEASE_EXPIRED["type"],
                "finished_at_us": exact_micros(now),
            }
        ).sort("scheduled_at_us", ASCENDING)
        return [execution_from_document(doc) async for doc in cursor]

    # -- executions -----------------------------------------------------------------------------

    @translating_errors
    async def get_execution(self, execution_id: str) -> Execution | None:
        doc = await self.executions.find_one({"_id": execution_id})
        return None if doc is None else execution_from_document(doc)

    @translating_errors
    async def list_executions(self, query: ExecutionQuery) -> list[Execution]:
        if query.limit <= 0:
            return []
        cursor = self.executions.find(executions_filter(query)).sort(NEWEST_FIRST)
        return [execution_from_document(doc) async for doc in in_one_batch(cursor, query.limit)]

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
