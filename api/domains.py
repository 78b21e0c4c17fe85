"""/v1/domains: each domain's settings (scheduler/domain_settings.py), read and written whole,
with the jobs each domain holds.

The domains listed are those jobs are in and those with a record. Any valid name is a domain: one
without a record has the defaults (weight 1, no caps, no objective), so reading it answers them,
and a PUT is the whole record (a field it leaves out takes its default). The dispatcher applies
`weight` and `max_running` (scheduler/admission/fair_share.py), reading them again every few
seconds.

`max_jobs` is checked by the job writes (check_room, api/jobs_routes.py): a create, or a move into
the domain, that would put it over its cap is a 409 naming `domain`, and nothing is written.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, Field

from tickd.api.models import Strict, integral
from tickd.api.problems import field_error, validation_problems
from tickd.api.routing import B, Call, Q, Reply, Route, Routes
from tickd.api.scoping import domain_not_found, sees
from tickd.api.v1 import state
from tickd.scheduler.domain_settings import (
    DEFAULT_WEIGHT,
    MAX_JOBS_CAP,
    MAX_LAG_OBJECTIVE_SECONDS,
    MAX_RUNNING_CAP,
    MAX_WEIGHT,
    DomainSettings,
    settings_of,
)
from tickd.scheduler.domains import DOMAIN_PATTERN, DOMAIN_RULE
from tickd.scheduler.ports.backends import JobSearch

DOMAIN = "/v1/domains/{name}"
APPLIED = "the dispatchers read it again within 10 seconds"
WEIGHT = (
    "The domain's fair share of runs under saturation, relative to the other domains' weights: "
    f"1 to {MAX_WEIGHT} (default {DEFAULT_WEIGHT}); {APPLIED}"
)
MAX_RUNNING = (
    f"At most this many of the domain's runs in flight at once, 1 to {MAX_RUNNING_CAP}, split "
    f"between the instances by the partitions each holds (at least one each); null: no cap; "
    f"{APPLIED}"
)
MAX_JOBS = (
    f"At most this many jobs in the domain, 1 to {MAX_JOBS_CAP}; null: no cap. A job write "
    "that would go over it is refused (409)"
)
LAG_OBJECTIVE = (
    "The domain's p99 fire-lag objective in seconds, for alerts: over 0, up to "
    f"{MAX_LAG_OBJECTIVE_SECONDS:g} (a day); null: none"
)

DomainName = Annotated[
    str,
    Field(pattern=DOMAIN_PATTERN, description=f"The domain: {DOMAIN_RULE}", examples=["payments"]),
]


class DomainPath(Strict):
    name: DomainName


class DomainSettingsIn(Strict):
    """A domain's whole record: a field left out takes its default."""

    weight: Annotated[int, Field(ge=1, le=MAX_WEIGHT), BeforeValidator(integral)] = Field(
        default=DEFAULT_WEIGHT, description=WEIGHT
    )
    max_running: (
        Annotated[int, Field(ge=1, le=MAX_RUNNING_CAP), BeforeValidator(integral)] | None
    ) = Field(default=None, description=MAX_RUNNING)
    max_jobs: Annotated[int, Field(ge=1, le=MAX_JOBS_CAP), BeforeValidator(integral)] | None = (
        Field(default=None, description=MAX_JOBS)
    )
    lag_objective_seconds: float | None = Field(
        default=None, gt=0, le=MAX_LAG_OBJECTIVE_SECONDS, description=LAG_OBJECTIVE
    )


class DomainOut(BaseModel):
    """A domain's settings (the defaults when it has no record) and the jobs it holds."""

    name: str = Field(description=f"The domain: {DOMAIN_RULE}")
    weight: int = Field(description=WEIGHT)
    max_running: int | None = Field(description=MAX_RUNNING)
    max_jobs: int | None = Field(description=MAX_JOBS)
    lag_objective_seconds: float | None = Field(description=LAG_OBJECTIVE)
    updated_at: datetime | None = Field(
        description="When its record was last written; null when it has none"
    )
    job_count: int = Field(description="How many jobs the domain holds")
    has_record: bool = Field(
        description="Whether settings are stored for the domain; without, it has the defaults"
    )


class DomainList(BaseModel):
    items: list[DomainOut] = Field(description="By name")


def domain_out(settings: DomainSettings, job_count: int, *, has_record: bool) -> DomainOut:
    return DomainOut(
        name=settings.name,
        weight=settings.weight,
        max_running=settings.max_running,
        max_jobs=settings.max_jobs,
        lag_objective_seconds=settings.lag_objective_seconds,
        updated_at=settings.updated_at,
        job_count=job_count,
        has_record=has_record,
    )


async def jobs_in(call: Call[Q, B], name: str) -> int:
    return await state(call).views.count_jobs(JobSearch(domain=name))


async def check_room(call: Call[Q, B], domain: str) -> None:
    """A job written into `domain` (created, or moved from another) must leave it within its
    max_jobs: a 409 naming `domain` otherwise. One read of its settings and, when it has a cap,
    one count of its jobs. The count is read at the write, not with it: two writers at once may
    each pass it, and take the domain over its cap by one each."""
    record = await state(call).domains.get_domain(domain)
    if record is None or record.max_jobs is None:
        return
    held = await jobs_in(call, domain)
    if held >= record.max_jobs:
        raise field_error(
            "domain",
            f"domain {domain!r} is full: it holds {held} jobs and its max_jobs is "
            f"{record.max_jobs}; raise the cap (PUT /v1/domains/{domain}) or remove a job",
            409,
        )


async def list_domains(call: Call[None, None]) -> Reply:
    """Two reads whatever the number of domains: the records, and the jobs counted by domain."""
    domains = state(call).domains
    records = {record.name: record for record in await domains.list_domains()}
    counts = await domains.count_jobs_by_domain()
    items = [
        domain_out(settings_of(name, records), counts.get(name, 0), has_record=name in records)
        for name in sorted(records.keys() | counts.keys())
        if sees(call, name)
    ]
    return Reply(DomainList(items=items))


def domain_seen(call: Call[Q, B]) -> str:
    """The path's domain; 404 for a token that does not reach it, as for a domain unknown."""
    name = call.path("name")
    if not sees(call, name):
        raise domain_not_found(name)
    return name


async def get_domain(call: Call[None, None]) -> Reply:
    name = domain_seen(call)
    record = await state(call).domains.get_domain(name)
    settings = record or DomainSettings(name=name)
    return Reply(domain_out(settings, await jobs_in(call, name), has_record=record is not None))


async def put_domain(call: Call[None, DomainSettingsIn]) -> Reply:
    s = state(call)
    name = domain_seen(call)
    with validation_problems():
        settings = DomainSettings(name=name, **call.body.model_dump(), updated_at=s.clock.now())
    stored = await s.domains.put_domain(settings)
    return Reply(domain_out(stored, await jobs_in(call, stored.name), has_record=True))


async def delete_domain(call: Call[None, None]) -> Reply:
    name = domain_seen(call)
    if not await state(call).domains.delete_domain(name):
        raise domain_not_found(name)
    return Reply(None, 204)


DOMAIN_ROUTES: Routes = [
    Route(
        "GET",
        "/v1/domains",
        list_domains,
        "Every domain jobs are in or settings are stored for, by name: its settings (the "
        "defaults without a record) and how many jobs it holds",
        "read",
        DomainList,
        tag="domains",
    ),
    Route(
        "GET",
        DOMAIN,
        get_domain,
        "A domain's settings (the defaults when none are stored) and how many jobs it holds",
        "read",
        DomainOut,
        tag="domains",
        path_model=DomainPath,
    ),
    Route(
        "PUT",
        DOMAIN,
        put_domain,
        "Store a domain's settings, whole: a field left out takes its default",
        "write",
        DomainOut,
        body=DomainSettingsIn,
        tag="domains",
        path_model=DomainPath,
    ),
    Route(
        "DELETE",
        DOMAIN,
        delete_domain,
        "Remove a domain's settings: it has the defaults again, and its jobs stay",
        "write",
        None,
        204,
        tag="domains",
        path_model=DomainPath,
    ),
]
