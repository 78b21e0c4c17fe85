"""The engine's dispatch on MongoDB (the store's DispatchStore role): what is due, claiming it
fenced, recording the runs it starts, giving back and reaping leases. The run requests' and
shards' part of the role is requests.py's."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import cast

from pymongo import (
    ASCENDING,
)

from tickd.scheduler.codec import (
    Doc,
    exact_micros,
)
from tickd.scheduler.model import Execution, Job, Priority, Status, new_id
from tickd.scheduler.ports.backends import (
    EVERY_DUE,
    OCCURRENCE_OWNER,
    Claim,
    DueFilter,
    LeaseTerms,
)
from tickd.scheduler.ports.store_engine import CompletionStore
from tickd.scheduler.store.kit.mongodb import (
    insert_ignoring_duplicates,
    translating_errors,
)
from tickd.scheduler.store.mongodb.documents import (
    LEASE_EXPIRED,
    LEASED,
    OLDEST_DUE_FIRST,
    URGENCY,
    execution_document,
    execution_from_document,
    job_from_document,
)
from tickd.scheduler.store.mongodb.housekeeping import abandoned_for_good_in
from tickd.scheduler.store.mongodb.requests import MongoRequests
from tickd.scheduler.store.mongodb.statements import (
    abandon_running,
    claim_update,
    due_filter,
    release_lease,
    rolled_forward,
)

# Read across partitions before the partitions' own reads (see `_due_by_partition`).
URGENT = (Priority.CRITICAL, Priority.HIGH)


def starved_first(starved_before: datetime) -> Callable[[Job], tuple[int, int, datetime]]:
    """The order of `due_jobs` under a backlog: the starved (due before `starved_before`)
    first, oldest first; then by urgency."""

    def order(job: Job) -> tuple[int, int, datetime]:
        assert job.next_run_at is not None  # due
        if job.next_run_at <= starved_before:
            return (0, 0, job.next_run_at)
        return (1, job.priority, job.next_run_at)

    return order


class MongoDispatch(MongoRequests):
    """The dispatch of MongoStore."""

    # FerretDB reads a document and writes it in two steps, so two claims can interleave: the
    # lock service keeps a run to one instance.
    claim_is_the_lock = False

    @property
    def reads_partitions_in_turn(self) -> bool:
        return self.on_ferretdb  # see `_due_by_partition`

    async def claim_due_jobs(
        self,
        now: datetime,
        horizon: datetime,
        limit: int,
        *,
        lease: LeaseTerms,
        where: DueFilter = EVERY_DUE,
    ) -> list[Job] | None:
        return None  # read with due_jobs, then claimed with claim_jobs

    async def claim_due_lanes(
        self,
        now: datetime,
        horizon: datetime,
        lanes: Sequence[tuple[int, DueFilter]],
        *,
        lease: LeaseTerms,
    ) -> list[list[Job]] | None:
        return None  # each lane read on its own

    @translating_errors
    async def due_jobs(self, now: datetime, limit: int, where: DueFilter = EVERY_DUE) -> list[Job]:
        """With `first`, a read of those by `_id` first; with `starved_before`, a read of the
        starved, oldest first (the jobs_next index); then the rest by urgency. Each read stops
        where the ones before it left off. On FerretDB, with `partitions` `in_turn`, a read a
        partition instead (see `_due_by_partition`)."""
        due = due_filter(now, where)
        first, starved_before, partitions = where.first, where.starved_before, where.partitions
        if partitions is not None and where.in_turn and self.on_ferretdb:
            return await self._due_by_partition(due, limit, starved_before, first, partitions)
        if partitions is not None:  # and the jobs an older tickd wrote, without one
            due["part"] = {"$in": [*partitions, None]}
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

    async def _due_by_partition(
        self,
        due: Doc,
        limit: int,
        starved_before: datetime | None,
        first: Sequence[str],
        partitions: Sequence[int],
    ) -> list[Job]:
        """FerretDB decodes every document the equalities of a filter select, and pushes no
        `$in` down: a read by `part: p` decodes that partition's free jobs, where one by `$in`
        would decode the whole queue's. So, after the jobs in `first` (by `_id`), the critical
        and high ones of every partition given (each priority an equality it pushes down: a
        few jobs decoded), then one read a partition, in the order given, of the rest (the
        starved first, then by urgency), until `limit` are found. A job an older tickd wrote
        without a partition is read among the urgent ones, and otherwise once the backlog is
        gone (by `due_jobs`'s read of all the partitions held at once). `due`: the due filter
        (due_filter), which every read here narrows."""
        found: list[Job] = []
        if first:
            named = {**due, "_id": {"$in": list(first)}}
            found += await self._find_jobs(named, sort=OLDEST_DUE_FIRST, limit=limit)
            due["_id"] = {"$nin": list(first)}
        for priority in URGENT:
            urgent = {**due, "priority": int(priority), "part": {"$in": [*partitions, None]}}
            found += await self._find_jobs(urgent, sort=OLDEST_DUE_FIRST, limit=limit - len(found))
        due["priority"] = {"$gt": int(URGENT[-1])}
        for part in partitions:
            if len(found) >= limit:
                break
            in_part = {**due, "part": part}
            if starved_before is None:
                found += await self._find_jobs(in_part, sort=URGENCY, limit=limit - len(found))
            else:  # FerretDB decodes the partition's due jobs anyway: all come, sorted here
                jobs = [job_from_document(doc) async for doc in self.jobs.find(in_part)]
                found += sorted(jobs, key=starved_first(starved_before))[: limit - len(found)]
        return found

    @translating_errors
    async def running_by_key(self, keys: Sequence[str]) -> dict[str, int]:
        """One aggregate over the leased jobs (`leased`, an equality FerretDB pushes down):
        those of the runs in flight, few whatever the queue. FerretDB pushes no `$in` down and
        decodes each of them, so an index on the key would not narrow the read there."""
        if not keys:
            return {}
        held = {**LEASED, "concurrency_key": {"$in": list(keys)}}
        by_key = {"_id": "$concurrency_key", "running": {"$sum": 1}}
        cursor = await self.jobs.aggregate([{"$match": held}, {"$group": by_key}])
        return {doc["_id"]: int(doc["running"]) async for doc in cursor}

    @translating_errors
    async def claim_jobs(self, claims: Sequence[Claim], now: datetime) -> list[Job]:
        if not claims:
            return []
        batch = new_id()
        await self._update_each(self.jobs, [claim_update(c, batch) for c in claims])
        return await self._winners(claims, batch)

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
        # Those abandoned past their retries keep their leases until their ends are written.
        given_up = await abandoned_for_good_in(self, expired)
        held = ended | {(f.execution.job_id, f.execution.token) for f in given_up}
        released = [lease for lease in expired if lease not in held]
        await self._update_each(self.jobs, [release_lease(job, token) for job, token in released])
        abandoned = await self._abandoned_at(now, expired)
        if given_up:
            await cast(CompletionStore, self).write_ends(given_up, event_source=event_source)
        dead = {finish.execution.id: finish.execution for finish in given_up}
        return [dead.get(execution.id, execution) for execution in abandoned]

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
