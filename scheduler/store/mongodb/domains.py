"""The domains' settings on MongoDB, a document each in `domains` (`_id` the domain's name), and
the jobs each domain holds (the store's DomainStore role)."""

from __future__ import annotations

from tickd.scheduler.codec import Doc, micros
from tickd.scheduler.domain_settings import DomainSettings
from tickd.scheduler.domains import DEFAULT_DOMAIN
from tickd.scheduler.store.kit.mongodb import from_micros, translating_errors
from tickd.scheduler.store.mongodb.base import MongoCollections

# One $group over the jobs' domains (FerretDB's pipeline has $group with $sum).
JOBS_BY_DOMAIN: list[Doc] = [{"$group": {"_id": "$domain", "n": {"$sum": 1}}}]


def domain_document(settings: DomainSettings) -> Doc:
    """The time as a BSON date and its exact `_us` twin, as the other collections keep them."""
    return {
        "_id": settings.name,
        "weight": settings.weight,
        "max_running": settings.max_running,
        "max_jobs": settings.max_jobs,
        "lag_objective_seconds": settings.lag_objective_seconds,
        "updated_at": settings.updated_at,
        "updated_at_us": micros(settings.updated_at),
    }


def domain_from_document(doc: Doc) -> DomainSettings:
    updated_us = doc.get("updated_at_us")
    objective = doc.get("lag_objective_seconds")
    return DomainSettings(
        name=doc["_id"],
        weight=int(doc["weight"]),
        max_running=doc.get("max_running"),
        max_jobs=doc.get("max_jobs"),
        lag_objective_seconds=None if objective is None else float(objective),
        updated_at=None if updated_us is None else from_micros(updated_us),
    )


class MongoDomains(MongoCollections):
    """The domains of MongoStore."""

    @translating_errors
    async def list_domains(self) -> list[DomainSettings]:
        cursor = self.domains.find({}).sort("_id", 1)
        return [domain_from_document(doc) async for doc in cursor]

    @translating_errors
    async def get_domain(self, name: str) -> DomainSettings | None:
        doc = await self.domains.find_one({"_id": name})
        return None if doc is None else domain_from_document(doc)

    @translating_errors
    async def put_domain(self, settings: DomainSettings) -> DomainSettings:
        await self.domains.replace_one(
            {"_id": settings.name}, domain_document(settings), upsert=True
        )
        return settings

    @translating_errors
    async def delete_domain(self, name: str) -> bool:
        return (await self.domains.delete_one({"_id": name})).deleted_count > 0

    @translating_errors
    async def count_jobs_by_domain(self) -> dict[str, int]:
        """A job an older tickd wrote has no domain (null in the group): it is in the default
        one."""
        counts: dict[str, int] = {}
        async for doc in await self.jobs.aggregate(JOBS_BY_DOMAIN):
            domain = doc["_id"] or DEFAULT_DOMAIN
            counts[domain] = counts.get(domain, 0) + int(doc["n"])
        return counts
