"""System jobs: a handler that needs a standing job declares it (`handler(system_job=...)`), and
it is seeded at every boot under the handler's name; once it exists it belongs to ops. A handler
may name settings the job needs (`system_job_needs`); until [handler_settings.<name>] has them
all, its job is not seeded, and the log says which are missing."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from scheduler.handler_api import Handler
from scheduler.logs import log_event
from scheduler.model import Job, Priority
from scheduler.registry import HandlerRegistry
from seed.jobs import seed_job

log = logging.getLogger("tickd.seed")


def system_jobs(
    registry: HandlerRegistry,
    now: datetime,
    handler_settings: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[Job]:
    settings = handler_settings or {}
    return [
        _system_job(registered.name, registered.handler.system_job, now)
        for registered in registry
        if registered.handler.system_job is not None
        and _configured(registered.name, registered.handler, settings.get(registered.name, {}))
    ]


def _configured(name: str, handler: Handler, config: Mapping[str, Any]) -> bool:
    missing = sorted(need for need in handler.system_job_needs if not _given(config.get(need)))
    if missing:
        log_event(
            log,
            "seed.system_job_not_configured",
            job=name,
            missing=[f"handler_settings.{name}.{setting}" for setting in missing],
        )
    return not missing


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


def _given(value: Any) -> bool:
    """Set, and not to an empty string (an empty environment variable is not a setting)."""
    return value is not None and not (isinstance(value, str) and not value.strip())
