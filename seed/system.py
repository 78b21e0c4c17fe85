"""System jobs: a handler that needs a standing job declares it (`handler(system_job=...)`), and
it is seeded at every boot under the handler's name; once it exists it belongs to ops."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from scheduler.model import Job, Priority
from scheduler.registry import HandlerRegistry
from seed.jobs import seed_job


def system_jobs(registry: HandlerRegistry, now: datetime) -> list[Job]:
    return [
        _system_job(registered.name, registered.handler.system_job, now)
        for registered in registry
        if registered.handler.system_job is not None
    ]


def _system_job(name: str, spec: Any, now: datetime) -> Job:
    return seed_job(
        name=name,
        handler=name,
        schedule=dict(spec["schedule"]),
        now=now,
        params=dict(spec.get("params", {})),
        system=True,
        timeout_seconds=float(spec.get("timeout_seconds", 60.0)),
        max_retries=int(spec.get("max_retries", 0)),
        priority=Priority.parse(spec.get("priority", "normal")),
    )
