"""Executions and their dead letters on MongoDB, as the API reads and re-drives them (the
store's ExecutionStore role)."""

from __future__ import annotations

from collections.abc import Sequence

from tickd.scheduler.codec import Doc, exact_micros
from tickd.scheduler.model import CancelRequest, DeadLetter, Execution
from tickd.scheduler.ports.backends import (
    ExecutionQuery,
)
from tickd.scheduler.store.kit.mongodb import (
    in_one_batch,
    insert_ignoring_duplicates,
    translating_errors,
)
from tickd.scheduler.store.mongodb.base import Collection, MongoCollections
from tickd.scheduler.store.mongodb.documents import (
    NEWEST_FIRST,
    execution_from_document,
)
from tickd.scheduler.store.mongodb.statements import (
    executions_filter,
    in_domains,
)


async def job_ids_in(jobs: Collection, domains: frozenset[str]) -> list[str]:
    """The ids of the jobs in `domains`, in one read (jobs_by_domain): MongoDB joins nothing,
    so a read of their executions filters by these."""
    cursor = jobs.find(in_domains(sorted(domains)), {"_id": 1})
    return [doc["_id"] async for doc in cursor]


async def of_jobs_in(jobs: Collection, domains: frozenset[str] | None, query: Doc) -> Doc | None:
    """`query`, kept to the executions of the jobs in `domains` (None: as it is); None when it
    can match none (it names one job, of another domain)."""
    if domains is None:
        return query
    ids = await job_ids_in(jobs, domains)
    named = query.get("job_id")
    if named is not None:  # an equality FerretDB pushes down: kept as it is
        return query if named in ids else None
    return {**query, "job_id": {"$in": ids}}


class MongoExecutions(MongoCollections):
    """The executions of MongoStore."""

    @translating_errors
    async def get_execution(self, execution_id: str) -> Execution | None:
        doc = await self.executions.find_one({"_id": execution_id})
        return None if doc is None else execution_from_document(doc)

    @translating_errors
    async def list_executions(self, query: ExecutionQuery) -> list[Execution]:
        found = await of_jobs_in(self.jobs, query.domains, executions_filter(query))
        if query.limit <= 0 or found is None:
            return []
        cursor = self.executions.find(found).sort(NEWEST_FIRST)
        return [execution_from_document(doc) async for doc in in_one_batch(cursor, query.limit)]

    @translating_errors
    async def request_cancel(self, request: CancelRequest) -> None:
        document = {
            "_id": request.execution_id,
            "requested_by": request.requested_by,
            "reason": request.reason,
            "requested_at": exact_micros(request.requested_at),
        }
        await insert_ignoring_duplicates(self.cancel_requests_collection, [document])

    @translating_errors
    async def mark_dead_letters(
        self, execution_ids: Sequence[str], *, states: Sequence[DeadLetter], to: DeadLetter
    ) -> set[str]:
        """One read of the candidates, then one filtered update each: the update's own filter
        is the compare-and-set, its count says who won."""
        if not execution_ids or not states:
            return set()
        wanted = {
            "_id": {"$in": list(execution_ids)},
            "dead_letter": {"$in": list(map(str, states))},
        }
        cursor = self.executions.find(wanted, {"_id": 1})
        candidates = [doc["_id"] async for doc in in_one_batch(cursor, len(execution_ids))]
        moved = set()
        for execution_id in candidates:
            result = await self.executions.update_one(
                {"_id": execution_id, "dead_letter": {"$in": list(map(str, states))}},
                {"$set": {"dead_letter": str(to)}},
            )
            if result.modified_count == 1:
                moved.add(execution_id)
        return moved
