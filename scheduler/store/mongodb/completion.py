"""The engine's runs as they end on MongoDB (the store's CompletionStore role): keeping their
leases, writing their ends, dead letters and re-drives, and releasing the jobs. The shards'
part of the role is requests.py's."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from tickd.scheduler.codec import (
    EPOCH,
    exact_micros,
)
from tickd.scheduler.model import CancelRequest, DeadLetter, new_id
from tickd.scheduler.ports.backends import (
    RunEnd,
)
from tickd.scheduler.store.kit.mongodb import (
    in_one_batch,
    insert_ignoring_duplicates,
    translating_errors,
)
from tickd.scheduler.store.mongodb.documents import (
    change_document,
    request_document,
)
from tickd.scheduler.store.mongodb.requests import MongoRequests
from tickd.scheduler.store.mongodb.statements import (
    finish_update,
    finished_document,
    held_by,
    settle_dead_letters,
    shard_held_by,
)


class MongoCompletion(MongoRequests):
    """The completion of MongoStore."""

    @translating_errors
    async def cancel_requests(self, execution_ids: Sequence[str]) -> list[CancelRequest]:
        if not execution_ids:
            return []
        cursor = self.cancel_requests_collection.find({"_id": {"$in": list(execution_ids)}})
        return [
            CancelRequest(
                execution_id=doc["_id"],
                requested_by=doc["requested_by"],
                reason=doc["reason"],
                requested_at=EPOCH + timedelta(microseconds=doc["requested_at"]),
            )
            async for doc in in_one_batch(cursor, len(execution_ids))
        ]

    @translating_errors
    async def renew_lease(self, job_id: str, token: int, until: datetime) -> bool:
        moved = {"lease.until": until, "lease.until_us": exact_micros(until)}
        result = await self.jobs.update_one(held_by(job_id, token), {"$set": moved})
        return result.matched_count == 1

    @translating_errors
    async def write_ends(
        self, finishes: Sequence[RunEnd], *, event_source: str | None = None
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

    async def _settle_and_redrive(self, finishes: Sequence[RunEnd]) -> None:
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

    async def _still_held(self, finish: RunEnd) -> bool:
        """Whether the run's lease (its job's, or its shard entry's) still holds: one read by
        `_id`, made only for runs that failed for good with a re-drive policy."""
        token = finish.execution.token
        if token is None:
            return True
        if finish.shard is not None:
            return await self.requests.find_one(shard_held_by(finish.shard.id, token)) is not None
        return await self.jobs.find_one(held_by(finish.execution.job_id, token)) is not None

    async def _release(self, finishes: Sequence[RunEnd], *, schedule: bool) -> set[str]:
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
