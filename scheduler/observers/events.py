"""Execution events: `job.execution.<status>` for every execution recorded, finished or reaped."""

from __future__ import annotations

import logging

from scheduler.clock import Clock
from scheduler.events import execution_event
from scheduler.metrics import Metrics
from scheduler.model import Execution, Job
from scheduler.observers import RunObserver
from scheduler.ports import EventPublisher

log = logging.getLogger("tickd.events")


class EventObserver(RunObserver):
    def __init__(
        self, publisher: EventPublisher, *, source: str, clock: Clock, metrics: Metrics
    ) -> None:
        self.publisher = publisher
        self.source = source
        self.clock = clock
        self.metrics = metrics

    def recorded(self, job: Job, execution: Execution) -> None:
        self.publish(execution)

    def finished(self, job: Job, execution: Execution) -> None:
        self.publish(execution)

    def reaped(self, execution: Execution) -> None:
        self.publish(execution)

    def publish(self, execution: Execution) -> None:
        """Hand the event to the publisher; an outage is counted, never raised."""
        try:
            event = execution_event(execution, source=self.source, time=self.clock.now())
            self.publisher.publish(event)
        except Exception:
            self.metrics.events_failed.inc()
            log.exception("event.publish_failed")
