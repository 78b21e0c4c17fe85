"""One structured log line per event of a run's life (scheduler/logs.py formats and masks)."""

from __future__ import annotations

import logging

from scheduler.logs import log_event
from scheduler.model import Execution, Job
from scheduler.observers import RunObserver

log = logging.getLogger("tickd.runner")


class LogObserver(RunObserver):
    def retrying(
        self, job: Job, execution: Execution, attempt: int, delay_seconds: float, error: str | None
    ) -> None:
        log_event(
            log,
            "run.retry",
            job=job.name,
            attempt=attempt,
            delay_seconds=delay_seconds,
            error=error,
        )

    def unknown_handler(self, job: Job) -> None:
        log_event(
            log, "run.unknown_handler", level=logging.WARNING, job=job.name, handler=job.handler
        )

    def stuck(self, job: Job) -> None:
        log_event(log, "run.handler_ignores_deadline", level=logging.ERROR, job=job.name)

    def not_started(self, job: Job, error: str) -> None:
        log_event(log, "run.not_started", level=logging.WARNING, job=job.name, error=error)

    def fenced(self, job: Job, execution: Execution, *, before_start: bool) -> None:
        name = "run.fenced_before_start" if before_start else "run.fenced"
        log_event(log, name, level=logging.WARNING, job=job.name, execution=execution.id)

    def finished(self, job: Job, execution: Execution) -> None:
        log_event(
            log,
            "run.finished",
            job=job.name,
            execution=execution.id,
            status=str(execution.status),
            attempts=execution.attempts,
            duration_ms=execution.duration_ms,
            error=execution.error.message if execution.error else None,
        )

    def not_recorded(self, job: Job, execution: Execution, error: str) -> None:
        log_event(
            log,
            "run.finish_not_recorded",
            level=logging.ERROR,
            job=job.name,
            execution=execution.id,
            error=error,
        )

    def paused(self, job: Job, reason: str) -> None:
        log_event(log, "job.paused", level=logging.WARNING, job=job.name, reason=reason)

    def reaped(self, execution: Execution) -> None:
        log_event(
            log,
            "lease.reaped",
            level=logging.WARNING,
            job=execution.job_name,
            execution=execution.id,
            owner=execution.owner,
        )
