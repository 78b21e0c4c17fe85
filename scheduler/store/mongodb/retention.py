"""Retention of executions on MongoDB, read by buckets FerretDB 1.24 pushes down.

FerretDB 1.24 pushes only equality on top-level fields down to PostgreSQL: a range or a sort on
`finished_at_us` and a `$group` over the collection made it decode every execution on each pass
(every minute), and past about 25,000 executions a pass exceeded the client's 5 s socket timeout.
So executions carry the hour and the minute they finished in (documents.FINISH_BUCKETS),
and retention reads by those equalities only, remembering between calls (in this process) what
it has walked, as the outbox's pruning does by the minute:

- By age, the whole hours below the cutoff are walked once each, oldest first; the cutoff's own
  hour by its minutes, the cutoff's minute exactly (`finished_at_us` within that one bucket). An
  hour where something was kept (a job's newest, an unhandled dead letter) is walked again when
  the cutoff moves on to the next hour: what was kept may go by then.
- By count, each job's finished executions are counted once, then kept up to date from the
  minutes finished since the last call (a run counts once it has finished); only a job over its
  bound is read (by its job_id, whole), and counted afresh. Those minutes also tell each job's
  newest run, which spares pruning by age from asking a job for a run newer than one it may
  delete.

A store's first call for a retention reads the executions it covers once (in batches, so no round
trip is long): the hours present and each job's count. Each later call costs what finished since.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from tickd.scheduler.codec import Doc, exact_micros
from tickd.scheduler.model import Status
from tickd.scheduler.ports.backends import Retention
from tickd.scheduler.store.kit.mongodb import translating_errors
from tickd.scheduler.store.mongodb.base import MongoCollections
from tickd.scheduler.store.mongodb.documents import (
    FINISH_BUCKETS,
    HOUR_US,
    MINUTE_US,
    PRUNABLE,
    UNHANDLED,
    finish_buckets,
)
from tickd.scheduler.store.mongodb.statements import retention_scope

# Documents a read of a bucket or of the first scan fetches a round trip.
PAGE = 1000
# Minutes the count waits after a minute is over before it reads it: a run is written a little
# after it finished (a batch, a store behind), and one written after its minute was read is
# not counted until its job is pruned again.
GRACE_MINUTES = 1
# Further behind than this since the last call (a process paused, a clock that jumped): the
# scope is read afresh instead of bucket by bucket.
MAX_MINUTES_BEHIND = 180
MAX_HOURS_BEHIND = 72

ExecutionKey = tuple[int, str]  # (scheduled_at_us, _id): what "newest" orders by
NO_KEY: ExecutionKey = (-1, "")
FIELDS_OF_BUCKETS = dict.fromkeys(FINISH_BUCKETS, 1)


@dataclass
class ScopeMemory:
    """What one retention scope's pruning has learnt, between calls of this process."""

    # By age: whole hours below the cutoff that may hold something to prune, to walk; the last
    # hour added to them (None: not started); walked hours where something was kept; and in the
    # cutoff's hour, the last minute walked.
    hours: set[int] = field(default_factory=set)
    through_hour: int | None = None
    kept_hours: set[int] = field(default_factory=set)
    through_minute: int | None = None
    # By count: finished executions a job has (None: not counted yet), the last whole minute
    # counted, and the ids the first read counted in the minutes after it (not to count twice).
    counts: Counter[str] | None = None
    counted_minute: int = 0
    counted_ids: dict[int, set[str]] = field(default_factory=dict)


@dataclass
class Scan:
    """The first read of a scope: every hour some execution finished in, each job's count and
    newest execution, and the ids of those finished in the last minutes."""

    hours: set[int] = field(default_factory=set)
    counts: Counter[str] = field(default_factory=Counter)
    newest: dict[str, ExecutionKey] = field(default_factory=dict)
    ids_by_minute: dict[int, set[str]] = field(default_factory=dict)


def hour_of(micros: int) -> int:
    return micros // HOUR_US


def minute_of(micros: int) -> int:
    return micros // MINUTE_US


def key_of(doc: Doc) -> ExecutionKey:
    return int(doc["scheduled_at_us"]), str(doc["_id"])


def is_prunable(doc: Doc) -> bool:
    """PRUNABLE, in Python, for documents read by a bucket alone."""
    return doc.get("status") != Status.RUNNING.value and doc.get("dead_letter") not in UNHANDLED


def newer_than(key: ExecutionKey) -> list[Doc]:
    at, execution_id = key
    return [{"scheduled_at_us": {"$gt": at}}, {"scheduled_at_us": at, "_id": {"$gt": execution_id}}]


class MongoRetention(MongoCollections):
    """Store.prune_executions on MongoDB."""

    _scopes: dict[tuple[str | None, tuple[str, ...]], ScopeMemory] | None = None
    # A key per job of an execution known to exist: what is older is not the job's newest. (The
    # newest is never pruned, so a job's newest only ever gets newer.)
    _known_newer: dict[str, ExecutionKey] | None = None

    @translating_errors
    async def prune_executions(self, retention: Retention, now: datetime, *, limit: int) -> int:
        if not retention.days and not retention.max_per_job:
            return 0
        scope = retention_scope(retention)
        memory = self._memory_of(retention)
        now_us = exact_micros(now)
        before = exact_micros(now - timedelta(days=retention.days))
        if _needs_scan(memory, retention, now_us, before):
            scan = await self._scan(scope, now_us)
            _start_from(memory, scan, retention, now_us, before)
            known = self._known()
            for job_id, key in scan.newest.items():
                known[job_id] = max(key, known.get(job_id, NO_KEY))
        await self._follow(memory, scope, now_us)
        deleted = 0
        if retention.days:
            deleted += await self._prune_by_age(memory, scope, before, limit)
        if retention.max_per_job and deleted < limit:
            deleted += await self._prune_by_count(
                memory, scope, retention.max_per_job, limit - deleted
            )
        return deleted

    def _known(self) -> dict[str, ExecutionKey]:
        if self._known_newer is None:
            self._known_newer = {}
        return self._known_newer

    def _memory_of(self, retention: Retention) -> ScopeMemory:
        if self._scopes is None:
            self._scopes = {}
        key = (retention.handler, retention.except_handlers)
        return self._scopes.setdefault(key, ScopeMemory())

    async def _scan(self, scope: Doc, now_us: int) -> Scan:
        """Every execution of the scope, once, a page a round trip. Those without their buckets
        (more than the open migrates, or written by an older version since) get them."""
        scan = Scan()
        recent = minute_of(now_us) - GRACE_MINUTES
        fields = {"job_id": 1, "scheduled_at_us": 1, "finished_at_us": 1, **FIELDS_OF_BUCKETS}
        unbucketed: list[Doc] = []
        async for doc in self.executions.find(scope, fields).batch_size(PAGE):
            if FINISH_BUCKETS[0] not in doc:
                unbucketed.append(doc)
                doc |= finish_buckets(doc.get("finished_at_us"))
            job_id = doc["job_id"]
            if doc["finished_minute"] is not None:  # a run is counted once it has finished
                scan.counts[job_id] += 1
            scan.newest[job_id] = max(key_of(doc), scan.newest.get(job_id, NO_KEY))
            if doc["finished_hour"] is not None:
                scan.hours.add(int(doc["finished_hour"]))
            minute = doc["finished_minute"]
            if minute is not None and minute >= recent:
                scan.ids_by_minute.setdefault(int(minute), set()).add(doc["_id"])
        await self._add_buckets(unbucketed)
        return scan

    # -- by age -----------------------------------------------------------------------------------

    async def _prune_by_age(self, memory: ScopeMemory, scope: Doc, before: int, limit: int) -> int:
        cutoff_hour = hour_of(before)
        _hours_below(memory, cutoff_hour)
        deleted = 0
        for hour in sorted(h for h in memory.hours if h < cutoff_hour):
            if deleted >= limit:
                return deleted
            done, kept, count = await self._prune_bucket(
                memory, {"finished_hour": hour, **scope}, limit - deleted
            )
            deleted += count
            if done:
                memory.hours.discard(hour)
                if kept:
                    memory.kept_hours.add(hour)
        return deleted + await self._prune_cutoff_hour(memory, scope, before, limit - deleted)

    async def _prune_cutoff_hour(
        self, memory: ScopeMemory, scope: Doc, before: int, limit: int
    ) -> int:
        """The cutoff's hour by its whole minutes, not walked again once emptied (what they
        keep is looked at again with the whole hour, once it has passed), then the cutoff's
        minute up to `before` exactly."""
        cutoff_minute = minute_of(before)
        first = hour_of(before) * 60
        if memory.through_minute is not None:
            first = max(first, memory.through_minute + 1)
        deleted = 0
        for minute in range(first, cutoff_minute):
            if deleted >= limit:
                return deleted
            done, _, count = await self._prune_bucket(
                memory, {"finished_minute": minute, **scope}, limit - deleted
            )
            deleted += count
            if not done:
                return deleted
            memory.through_minute = minute
        if deleted >= limit:
            return deleted
        bucket = {"finished_minute": cutoff_minute, **scope}
        _, _, count = await self._prune_bucket(memory, bucket, limit - deleted, before=before)
        return deleted + count

    async def _prune_bucket(
        self, memory: ScopeMemory, bucket: Doc, limit: int, *, before: int | None = None
    ) -> tuple[bool, bool, int]:
        """Delete up to `limit` of the bucket's executions (finished before `before`, if given)
        that may go: whether none is left to delete, whether any was kept, and how many went."""
        wanted = bucket if before is None else {**bucket, "finished_at_us": {"$lt": before}}
        fields = {"job_id": 1, "scheduled_at_us": 1, "status": 1, "dead_letter": 1}
        cursor = self.executions.find(wanted, fields).batch_size(PAGE)
        doomed: list[Doc] = []
        kept = False
        page: list[Doc] = []
        async for doc in cursor:
            page.append(doc)
            if len(page) == PAGE:
                kept |= await self._sort_out(page, doomed)
                page = []
                if len(doomed) > limit:
                    break
        await cursor.close()
        kept |= await self._sort_out(page, doomed)
        count = await self._delete(bucket, doomed[:limit], memory)
        return len(doomed) <= limit, kept or count < min(len(doomed), limit), count

    async def _sort_out(self, page: list[Doc], doomed: list[Doc]) -> bool:
        """Add to `doomed` those of `page` pruning may delete; whether any it may not."""
        prunable = [doc for doc in page if is_prunable(doc)]
        superseded = await self._superseded(prunable)
        doomed += superseded
        return len(superseded) < len(page)

    async def _superseded(self, docs: list[Doc]) -> list[Doc]:
        """Those that are not their job's newest execution: older than one known to exist (the
        scan saw each job's newest), or than one a read of the job finds."""
        known = self._known()
        newest_here: dict[str, ExecutionKey] = {}
        for doc in docs:
            newest_here[doc["job_id"]] = max(key_of(doc), newest_here.get(doc["job_id"], NO_KEY))
        for job_id, key in newest_here.items():
            if job_id in known and known[job_id] > key:
                continue
            newer = await self.executions.find_one(
                {"job_id": job_id, "$or": newer_than(key)}, {"scheduled_at_us": 1}
            )
            known[job_id] = key if newer is None else max(key, key_of(newer))
        return [doc for doc in docs if key_of(doc) < known[doc["job_id"]]]

    async def _delete(self, bucket: Doc, docs: Sequence[Doc], memory: ScopeMemory) -> int:
        if not docs:
            return 0
        # Filtered again: a dead letter opened or a run restarted since the read is kept.
        ids = [doc["_id"] for doc in docs]
        result = await self.executions.delete_many({**bucket, "_id": {"$in": ids}, **PRUNABLE})
        deleted = int(result.deleted_count)
        # Which went is unknown when not all did: then the counts stay over, which is safe (a
        # job over its bound is read and counted afresh).
        if memory.counts is not None and deleted == len(docs):
            memory.counts.subtract(doc["job_id"] for doc in docs)
        return deleted

    # -- by count ---------------------------------------------------------------------------------

    async def _follow(self, memory: ScopeMemory, scope: Doc, now_us: int) -> None:
        """Count what finished in the minutes over since the last call (GRACE_MINUTES ago),
        each minute read once: a run counts one to two minutes after it finished. Each job's
        newest run seen keeps pruning by age from asking the job for one newer."""
        assert memory.counts is not None
        known = self._known()
        now_minute = minute_of(now_us) - GRACE_MINUTES
        fields = {"job_id": 1, "scheduled_at_us": 1}
        for minute in range(memory.counted_minute + 1, now_minute):
            bucket = {"finished_minute": minute, **scope}
            counted = memory.counted_ids.pop(minute, set())
            async for doc in self.executions.find(bucket, fields).batch_size(PAGE):
                job_id = doc["job_id"]
                known[job_id] = max(key_of(doc), known.get(job_id, NO_KEY))
                if doc["_id"] not in counted:
                    memory.counts[job_id] += 1
        memory.counted_minute = max(memory.counted_minute, now_minute - 1)

    async def _prune_by_count(self, memory: ScopeMemory, scope: Doc, keep: int, limit: int) -> int:
        assert memory.counts is not None
        deleted = 0
        for job_id in sorted(job for job, count in memory.counts.items() if count > keep):
            if deleted >= limit:
                break
            deleted += await self._prune_beyond(memory.counts, scope, job_id, keep, limit - deleted)
        return deleted

    async def _prune_beyond(
        self, counts: Counter[str], scope: Doc, job_id: str, keep: int, limit: int
    ) -> int:
        """Delete what is older than the job's `keep`-th newest execution of the scope (one read
        by job_id, ranked here), and count the job afresh."""
        mine = {"job_id": job_id, **scope}
        fields = {"scheduled_at_us": 1, "status": 1, "dead_letter": 1, "finished_minute": 1}
        docs = [doc async for doc in self.executions.find(mine, fields).batch_size(PAGE)]
        ranked = sorted(docs, key=key_of, reverse=True)
        doomed = _ids(doc for doc in ranked[keep:] if is_prunable(doc))[:limit]
        deleted = 0
        if doomed:
            result = await self.executions.delete_many({**mine, "_id": {"$in": doomed}, **PRUNABLE})
            deleted = int(result.deleted_count)
        counts[job_id] = sum(doc.get("finished_minute") is not None for doc in docs) - deleted
        if not counts[job_id]:
            del counts[job_id]
        return deleted


def _ids(docs: Iterable[Doc]) -> list[str]:
    return [doc["_id"] for doc in docs]


def _needs_scan(memory: ScopeMemory, retention: Retention, now_us: int, before: int) -> bool:
    """The first call for the scope, or one too far from the last."""
    if retention.days and (
        memory.through_hour is None or hour_of(before) - memory.through_hour > MAX_HOURS_BEHIND
    ):
        return True
    return memory.counts is None or minute_of(now_us) - memory.counted_minute > MAX_MINUTES_BEHIND


def _start_from(
    memory: ScopeMemory, scan: Scan, retention: Retention, now_us: int, before: int
) -> None:
    """What the scan found replaces what the scope's memory held."""
    if retention.days:
        memory.hours = {hour for hour in scan.hours if hour < hour_of(before)}
        memory.kept_hours = set()
        memory.through_hour = hour_of(before) - 1
        memory.through_minute = None
    memory.counts, memory.counted_ids = scan.counts, scan.ids_by_minute
    memory.counted_minute = minute_of(now_us) - GRACE_MINUTES - 1


def _hours_below(memory: ScopeMemory, cutoff_hour: int) -> None:
    """Once the cutoff has moved on to a later hour: the hours it passed are to walk, and so
    are those where something was kept; the new cutoff hour's minutes are walked from its start."""
    assert memory.through_hour is not None
    if cutoff_hour - 1 <= memory.through_hour:
        return
    memory.hours |= set(range(memory.through_hour + 1, cutoff_hour)) | memory.kept_hours
    memory.kept_hours = set()
    memory.through_hour = cutoff_hour - 1
    memory.through_minute = None
