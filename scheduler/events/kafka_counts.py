"""What became of the events handed to a Kafka publisher: accepted, delivered, or dropped and why,
counted here and in Prometheus, with a log line when a run of drops starts and when it ends."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from dataclasses import dataclass

from tickd.scheduler.logs import log_event
from tickd.scheduler.metrics import Metrics

log = logging.getLogger("tickd.events.kafka")


@dataclass(frozen=True, kw_only=True)
class EventCounts:
    """What became of the events handed to one publisher so far."""

    accepted: int = 0  # taken into the local queue
    delivered: int = 0  # acknowledged by the brokers
    queue_full: int = 0  # dropped: the local queue was at its bound
    delivery_failed: int = 0  # dropped: not acknowledged in time, or pending at close
    closed: int = 0  # dropped: published after close

    @property
    def dropped(self) -> int:
        return self.queue_full + self.delivery_failed + self.closed


class EventTally:
    """Counts kept here and, when given, in Prometheus.

    Thread-safe: events are published on the event loop, delivery reports arrive on the poller.
    A run of drops is logged when it starts and when a delivery ends it, not once per event.
    """

    def __init__(self, metrics: Metrics | None) -> None:
        self._metrics = metrics
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._dropping: Counter[str] = Counter()  # drops by reason since the last delivery

    def accepted(self) -> None:
        with self._lock:
            self._counts["accepted"] += 1

    def delivered(self) -> None:
        with self._lock:
            self._counts["delivered"] += 1
            ended, self._dropping = self._dropping, Counter()
        if self._metrics is not None:
            self._metrics.events_delivered.inc()
        for reason, count in ended.items():
            log_event(log, "events.drops_ended", reason=reason, dropped=count)

    def dropped(self, reason: str, error: str) -> None:
        with self._lock:
            self._counts[reason] += 1
            self._dropping[reason] += 1
            first = self._dropping[reason] == 1
        if self._metrics is not None:
            self._metrics.events_dropped.labels(reason).inc()
        if first:
            log_event(log, "events.dropping", level=logging.WARNING, reason=reason, error=error)

    def snapshot(self) -> EventCounts:
        with self._lock:
            return EventCounts(**self._counts)
