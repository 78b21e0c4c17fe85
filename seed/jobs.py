"""Seeding: insert jobs by name, idempotently.

A job is added only when no job of that name exists. A re-seed never duplicates a job and never
overwrites what ops changed (a schedule, a pause): once seeded, the job belongs to them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from scheduler.codec import schedule_from_doc
from scheduler.logs import log_event
from scheduler.model import Job, Priority
from scheduler.ports import Store
from scheduler.schedules import first_fire, validate

log = logging.getLogger("tickd.seed")


async def seed_jobs(store: Store, jobs: Sequence[Job]) -> list[Job]:
    """Insert the jobs whose names are free; returns those inserted."""
    added = await store.insert_missing_jobs(jobs)
    for job in added:
        log_event(log, "seed.added", job=job.name, handler=job.handler, system=job.system)
    return added


def seed_job(
    *,
    name: str,
    handler: str,
    schedule: dict[str, object],
    now: datetime,
    params: dict[str, object] | None = None,
    system: bool = False,
    timeout_seconds: float = 60.0,
    max_retries: int = 0,
    priority: Priority = Priority.NORMAL,
) -> Job:
    """A job definition, validated, with its first fire time computed from `now`."""
    parsed = schedule_from_doc(schedule)
    validate(parsed, job_name=name)
    return Job(
        name=name,
        handler=handler,
        schedule=parsed,
        params=params or {},
        next_run_at=first_fire(parsed, now, job_name=name),
        system=system,
        timeout_seconds=timeout_seconds,
        max_retries=max_retries,
        priority=priority,
        created_at=now,
        updated_at=now,
    )
