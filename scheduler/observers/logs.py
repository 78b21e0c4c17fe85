"""Structured log lines of a run's life (scheduler/logs.py formats and masks).

A run that ends well is one line at DEBUG; at INFO, a summary says once a second at most how
many ended how (`runs.summary`), so a burst of thousands of runs a second is not limited by its
own log. Runs that fail, time out or are given up, and everything unusual, keep a line each."""

from __future__ import annotations

import logging
import time
from collections import Counter

from tickd.scheduler.logs import log_event
from tickd.scheduler.model import Execution, Job, Status
from tickd.scheduler.observers import RunObserver

log = logging.getLogger("tickd.runner")


SUMMARY_EVERY_SECONDS = 1.0


class LogObserver(RunObserver):
    def __init__(self, *, summary_every_seconds: float = SUMMARY_EVERY_SECONDS) -> None:
        self._every = summary_every_seconds
        self._ended: Counter[str] = Counter()
        self._since = time.monotonic()

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
        self._ended[str(execution.status)] += 1
        self._summarise_if_due()
        level = (
            logging.DEBUG if execution.status in (Status.SUCCESS, Status.SKIPPED) else logging.INFO
        )
        if not log.isEnabledFor(level):
            return  # not even the line's fields made: a run that ends well, in a burst
        log_event(
            log,
            "run.finished",
            level=level,
            job=job.name,
            execution=execution.id,
            status=str(execution.status),
            attempts=execution.attempts,
            duration_ms=execution.duration_ms,
            error=execution.error.message if execution.error else None,
        )

    def _summarise_if_due(self) -> None:
        now = time.monotonic()
        if now - self._since < self._every:
            return
        log_event(log, "runs.summary", seconds=round(now - self._since, 3), ended=dict(self._ended))
        self._ended.clear()
        self._since = now

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
