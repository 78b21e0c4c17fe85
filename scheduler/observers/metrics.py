"""Prometheus counts of a run's life (scheduler/metrics.py holds the instruments)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

from tickd.scheduler.metrics import Metrics
from tickd.scheduler.model import Execution, Job, Priority, Status
from tickd.scheduler.observers import RunObserver


class MetricsObserver(RunObserver):
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        # The series every run touches, by their labels, looked up once each.
        self._lags: dict[tuple[str, Priority, str], Histogram] = {}
        self._waits: dict[tuple[str, str], Histogram] = {}
        self._ends: dict[tuple[str, Status, str], tuple[Counter, Histogram]] = {}

    def misfired(self, job: Job, count: int) -> None:
        self.metrics.misfires.labels(job.handler, str(job.misfire.policy)).inc(count)

    def started(self, job: Job, execution: Execution, lag_seconds: float) -> None:
        """A scheduled occurrence's start is its fire lag; a requested run (a re-drive, a retry
        of a dead letter, a trigger) keeps its occurrence's due time, so its start is measured
        apart, from when its request allowed it, and never reads as lateness."""
        if execution.requested is None:
            self._fire_lag(job).observe(max(0.0, lag_seconds))
        else:
            self._request_wait(job, execution.requested).observe(max(0.0, lag_seconds))

    def _fire_lag(self, job: Job) -> Histogram:
        key = (job.handler, job.priority, job.domain)
        lag = self._lags.get(key)
        if lag is None:
            lag = self._lags[key] = self.metrics.fire_lag.labels(
                job.handler, job.priority.name.lower(), job.domain
            )
        return lag

    def _request_wait(self, job: Job, kind: str) -> Histogram:
        key = (job.handler, kind)
        wait = self._waits.get(key)
        if wait is None:
            wait = self._waits[key] = self.metrics.request_wait.labels(job.handler, kind)
        return wait

    def retrying(
        self, job: Job, execution: Execution, attempt: int, delay_seconds: float, error: str | None
    ) -> None:
        self.metrics.retries.labels(job.handler).inc()

    def stuck(self, job: Job) -> None:
        self.metrics.stuck_handlers.labels(job.handler).inc()

    def fenced(self, job: Job, execution: Execution, *, before_start: bool) -> None:
        self.metrics.fenced.inc()

    def finished(self, job: Job, execution: Execution) -> None:
        key = (job.handler, execution.status, job.domain)
        series = self._ends.get(key)
        if series is None:
            series = self._ends[key] = (
                self.metrics.executions.labels(job.handler, str(execution.status), job.domain),
                self.metrics.duration.labels(job.handler),
            )
        executions, duration = series
        executions.inc()
        if execution.duration_ms is not None:
            duration.observe(execution.duration_ms / 1000)
        if execution.dead_letter is not None:  # rare: looked up each time
            self.metrics.dead_lettered.labels(job.handler, job.domain).inc()

    def not_recorded(self, job: Job, execution: Execution, error: str) -> None:
        self.metrics.store_errors.labels("finish_execution").inc()

    def paused(self, job: Job, reason: str) -> None:
        self.metrics.breaker_trips.labels(job.handler).inc()

    def reaped(self, execution: Execution) -> None:
        self.metrics.leases_reaped.inc()
