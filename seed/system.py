"""System jobs: a handler that needs a standing job declares it (`handler(system_job=SystemJob(
...))`), and it is seeded at every boot under the handler's name; once it exists it belongs to
ops. A handler may name settings the job needs (`system_job_needs`); until
[handler_settings.<name>] has them all, its job is not seeded, and, once the table holds any of
them, the log says which are missing (a team that does not use the handler hears nothing of
it). The daemon may name handlers whose job is seeded only once their table is configured at
all (`when_configured`: features a team opts into). A system job is checked as a job created
over the API is: one that fails stops startup (SeedError)."""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any

from tickd.scheduler.jobspec import JobRules, JobSpec
from tickd.scheduler.logs import log_event
from tickd.scheduler.model import Job
from tickd.scheduler.plugin.api import Handler, SystemJob
from tickd.seed.jobs import seed_job

log = logging.getLogger("tickd.seed")


def system_jobs(
    rules: JobRules,
    now: datetime,
    handler_settings: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    when_configured: Collection[str] = (),
) -> list[Job]:
    settings = handler_settings or {}
    return [
        seed_job(rules, _spec(registered.name, registered.handler.system_job), now)
        for registered in rules.registry
        if registered.handler.system_job is not None
        and (registered.name not in when_configured or registered.name in settings)
        and _configured(registered.name, registered.handler, settings.get(registered.name, {}))
    ]


def _configured(name: str, handler: Handler, config: Mapping[str, Any]) -> bool:
    missing = sorted(need for need in handler.system_job_needs if not _given(config.get(need)))
    if missing and any(_given(value) for value in config.values()):
        log_event(
            log,
            "seed.system_job_not_configured",
            job=name,
            missing=[f"handler_settings.{name}.{setting}" for setting in missing],
        )
    return not missing


def _spec(name: str, declared: SystemJob) -> JobSpec:
    return JobSpec(
        name=name,
        handler=name,
        schedule=declared.schedule,
        params=declared.params,
        system=True,
        timeout_seconds=declared.timeout_seconds,
        max_retries=declared.max_retries,
        priority=declared.priority,
    )


def _given(value: Any) -> bool:
    """Set, and not to an empty string (an empty environment variable is not a setting)."""
    return value is not None and not (isinstance(value, str) and not value.strip())
