"""Seeding: insert jobs by name, idempotently.

A job is added only when no job of that name exists. A re-seed never duplicates a job and never
overwrites what ops changed (a schedule, a pause): once seeded, the job belongs to them.

A seeded job is checked as a job created over the API is (scheduler/jobspec.py); one that fails
stops startup with a SeedError naming the job and the field.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from tickd.scheduler.jobspec import JobRules, JobSpec
from tickd.scheduler.logs import log_event
from tickd.scheduler.model import Job, ValidationError
from tickd.scheduler.ports.backends import Store

log = logging.getLogger("tickd.seed")


class SeedError(ValueError):
    """A job tickd seeds is not a valid job: startup stops, naming it and the field at fault."""

    def __init__(self, job: str, error: ValidationError) -> None:
        super().__init__(f"seeded job {job!r}: {error.field}: {error.reason}")
        self.job = job
        self.field = error.field


async def seed_jobs(store: Store, jobs: Sequence[Job]) -> list[Job]:
    """Insert the jobs whose names are free; returns those inserted."""
    added = await store.insert_missing_jobs(jobs)
    for job in added:
        log_event(log, "seed.added", job=job.name, handler=job.handler, system=job.system)
    return added


def seed_job(rules: JobRules, spec: JobSpec, now: datetime) -> Job:
    """The job, checked as the API checks one, its first fire time computed from `now`."""
    try:
        return rules.build(spec, now)
    except ValidationError as exc:
        raise SeedError(spec.name, exc) from None
