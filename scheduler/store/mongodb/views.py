"""The job store's views on MongoDB: the API's jobs list (search, filters, sort, keyset pages, true
totals) and the dashboard's overview (a window's executions aggregated, what needs attention
grouped by job).

The jobs list reads through indexes in its order. The overview reads every execution of its
window (never a newest-N sample), projected to the few fields it counts, and aggregates them as
they stream: FerretDB 1.24's pipeline has `$group` with `$sum` only (no `$min`, `$max`,
`$subtract` or `$floor`), too little for fire lag or buckets."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import ClassVar

from pymongo import ASCENDING, DESCENDING, IndexModel

from tickd.scheduler.codec import Doc, exact_micros
from tickd.scheduler.model import DeadLetter, ExecutionError, Job, Status
from tickd.scheduler.ports.backends import (
    Attention,
    ExecutionStats,
    JobOrder,
    JobSearch,
    JobTrouble,
)
from tickd.scheduler.store.kit.mongodb import from_micros, translating_errors
from tickd.scheduler.store.mongodb.base import MongoCollections
from tickd.scheduler.store.mongodb.documents import (
    CHANGE_INDEXES,
    EXECUTION_INDEXES,
    FREE,
    JOB_INDEXES,
    OUTBOX_INDEXES,
    REQUEST_INDEXES,
)
from tickd.scheduler.store.mongodb.executions import job_ids_in
from tickd.scheduler.store.mongodb.statements import in_domain, in_domains
from tickd.scheduler.store.views import (
    PROBLEM_STATUSES,
    ExecutionTally,
    TroubleRow,
    bucket_count,
    group_by_job,
)

BY_NAME = [("name", ASCENDING)]
BY_NEXT_RUN = [("next_run_at_us", ASCENDING), ("name", ASCENDING)]
MOST_FAILURES = [("consecutive_failures", DESCENDING), ("name", ASCENDING)]
VIEW_JOB_INDEXES = [
    IndexModel([("handler", ASCENDING), *BY_NAME], name="jobs_by_handler"),
    IndexModel([("domain", ASCENDING), *BY_NAME], name="jobs_by_domain"),
    IndexModel(BY_NEXT_RUN, name="jobs_by_next_run"),
    IndexModel([("last_execution.status", ASCENDING), *BY_NAME], name="jobs_by_last_status"),
    IndexModel(MOST_FAILURES, name="jobs_failing"),
]
TALLIED = {"job_id": 1, "shard": 1, "status": 1, "handler": 1, "scheduled_at_us": 1}
TROUBLE = {"job_id": 1, "job_name": 1, "handler": 1, "status": 1, "error": 1, "scheduled_at_us": 1}


def search_filter(search: JobSearch) -> list[Doc]:
    """The search's filters (not its cursor), as conditions to AND."""
    wanted: Doc = {"handler": search.handler, "enabled": search.enabled}
    found: list[Doc] = [{k: v} for k, v in wanted.items() if v is not None]
    if search.domain is not None:
        found.append(in_domain(search.domain))
    if search.name_prefix is not None:
        prefix = search.name_prefix
        found.append({"name": {"$gte": prefix, "$lt": prefix + "\U0010ffff"}})
    if search.next_run_from is not None:
        found.append({"next_run_at_us": {"$gte": exact_micros(search.next_run_from)}})
    if search.next_run_to is not None:
        found.append({"next_run_at_us": {"$lt": exact_micros(search.next_run_to)}})
    if search.text:
        anywhere = {"$regex": re.escape(search.text), "$options": "i"}
        found.append({"$or": [{"name": anywhere}, {"_id": anywhere}]})
    if search.last_status:
        statuses = sorted(str(status) for status in search.last_status)
        found.append({"last_execution.status": {"$in": statuses}})
    if search.domains is not None:
        found.append(in_domains(sorted(search.domains)))
    return found


def _all(conditions: Sequence[Doc]) -> Doc:
    """The conditions as one filter: each field at the top level where it is alone (FerretDB
    pushes a top-level equality down), under `$and` where two conditions name it."""
    merged: Doc = {}
    both: list[Doc] = []
    for condition in conditions:
        for field, value in condition.items():
            if field in merged:
                both.append({field: value})
            else:
                merged[field] = value
    return {**merged, "$and": both} if both else merged


def page_reads(search: JobSearch) -> list[tuple[Doc, list[tuple[str, int]]]]:
    """The reads of a page, in turn: by name, one; by next run, the scheduled jobs after the
    cursor, then those with no next run, by name (MongoDB sorts a missing time first)."""
    found, after = search_filter(search), search.after_name
    past_name = [{"name": {"$gt": after}}] if after is not None else []
    if search.order is JobOrder.NAME:
        return [(_all([*found, *past_name]), BY_NAME)]
    if after is not None and search.after_next_run_at is None:
        # The previous page ended among the unscheduled.
        return [(_all([*found, {"next_run_at_us": None}, *past_name]), BY_NAME)]
    unscheduled = (_all([*found, {"next_run_at_us": None}]), BY_NAME)
    scheduled: list[Doc] = [{"next_run_at_us": {"$ne": None}}]
    if after is not None and search.after_next_run_at is not None:
        at = exact_micros(search.after_next_run_at)
        scheduled.append(
            {
                "$or": [
                    {"next_run_at_us": {"$gt": at}},
                    {"next_run_at_us": at, "name": {"$gt": after}},
                ]
            }
        )
    return [(_all([*found, *scheduled]), BY_NEXT_RUN), unscheduled]


def _error(doc: Doc | None) -> ExecutionError | None:
    if not doc:
        return None
    return ExecutionError(type=str(doc.get("type", "")), message=str(doc.get("message", "")))


def trouble_row(doc: Doc) -> TroubleRow:
    return TroubleRow(
        job_id=doc["job_id"],
        job_name=doc["job_name"],
        handler=doc["handler"],
        status=Status(doc["status"]),
        error=_error(doc.get("error")),
        at=from_micros(doc["scheduled_at_us"]),
    )


class MongoViews(MongoCollections):
    """The jobs list and the overview of MongoStore."""

    INDEXES: ClassVar[Mapping[str, Sequence[IndexModel]]] = {
        "jobs": [*JOB_INDEXES, *VIEW_JOB_INDEXES],
        "executions": EXECUTION_INDEXES,
        "job_changes": CHANGE_INDEXES,
        "run_requests": REQUEST_INDEXES,
        "outbox": OUTBOX_INDEXES,
    }

    @translating_errors
    async def search_jobs(self, search: JobSearch) -> list[Job]:
        jobs: list[Job] = []
        for query, sort in page_reads(search):
            jobs += await self._find_jobs(query, sort=sort, limit=search.limit - len(jobs))
        return jobs

    @translating_errors
    async def count_jobs(self, search: JobSearch) -> int:
        return await self.jobs.count_documents(_all(search_filter(search)))

    async def _runs_in(self, domains: frozenset[str] | None) -> Doc:
        """The condition that keeps the executions of the jobs in `domains` ({}: every one)."""
        if domains is None:
            return {}
        return {"job_id": {"$in": await job_ids_in(self.jobs, domains)}}

    @translating_errors
    async def execution_stats(
        self,
        since: datetime,
        until: datetime,
        bucket_seconds: int,
        *,
        domains: frozenset[str] | None = None,
    ) -> ExecutionStats:
        tally = ExecutionTally(
            since_us=exact_micros(since),
            bucket_us=bucket_seconds * 1_000_000,
            buckets=bucket_count(since, until, bucket_seconds),
        )
        window = {"$gte": exact_micros(since), "$lt": exact_micros(until)}
        projection = {**TALLIED, "started_at_us": 1}
        runs = {"scheduled_at_us": window, **await self._runs_in(domains)}
        async for doc in self.executions.find(runs, projection):
            tally.add(
                job_id=doc["job_id"],
                shard=int(doc.get("shard") or 0),
                status=doc["status"],
                handler=doc["handler"],
                due_us=doc["scheduled_at_us"],
                start_us=doc.get("started_at_us"),
            )
        return tally.stats()

    @translating_errors
    async def attention(
        self,
        since: datetime,
        until: datetime,
        late_before: datetime,
        *,
        limit: int,
        domains: frozenset[str] | None = None,
    ) -> Attention:
        runs = await self._runs_in(domains)
        jobs = {} if domains is None else in_domains(sorted(domains))
        dead = {"dead_letter": str(DeadLetter.OPEN), **runs}
        dead_letters, dead_total = await self._troubles(dead)
        window = {"$gte": exact_micros(since), "$lt": exact_micros(until)}
        # One read a status: an equality FerretDB pushes down, where `$in` would make it decode
        # every execution.
        failures, _ = await self._troubles(
            *(
                {"status": str(status), "scheduled_at_us": window, **runs}
                for status in PROBLEM_STATUSES
            )
        )
        failing: Doc = {"consecutive_failures": {"$gt": 0}, **jobs}
        late: Doc = {**FREE, "next_run_at_us": {"$lt": exact_micros(late_before)}, **jobs}
        return Attention(
            dead_letters=dead_letters[:limit],
            dead_letters_total=dead_total,
            dead_letter_jobs=len(dead_letters),
            failures=failures[:limit],
            failure_jobs=len(failures),
            failing=await self._find_jobs(failing, sort=MOST_FAILURES, limit=limit),
            failing_total=await self.jobs.count_documents(failing),
            late=await self._find_jobs(late, sort=[("next_run_at_us", ASCENDING)], limit=limit),
            late_total=await self.jobs.count_documents(late),
        )

    async def _troubles(self, *queries: Doc) -> tuple[list[JobTrouble], int]:
        """Every job with executions matching one of `queries`, grouped (the caller cuts the
        list after counting the jobs), and how many executions matched."""
        rows = []
        for query in queries:
            rows += [trouble_row(doc) async for doc in self.executions.find(query, TROUBLE)]
        return group_by_job(rows, len(rows)), len(rows)
