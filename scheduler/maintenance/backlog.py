"""What ops alert on, read off the dispatcher's hot path: how many jobs are due and not yet
taken, and how long the oldest of them has waited. One store read every few seconds, never one
per tick, of the partitions this instance holds: the instances' figures add up to the store's
(their sum is the backlog, their largest age the oldest), and each counts only its share. A
partition nobody holds, for the seconds its owner's death takes to be seen, is in no figure:
the alerts on these gauges wait minutes."""

from __future__ import annotations

from datetime import datetime, timedelta

from tickd.scheduler.metrics import Metrics
from tickd.scheduler.partitions import Partitions
from tickd.scheduler.ports.backends import Backlog, StoreError
from tickd.scheduler.ports.clock import Clock
from tickd.scheduler.ports.store_engine import HousekeepingStore


class BacklogGauges:
    def __init__(
        self,
        store: HousekeepingStore,
        clock: Clock,
        metrics: Metrics,
        *,
        every_seconds: float,
        partitions: Partitions | None = None,  # None: every partition is this instance's
    ):
        self._store = store
        self._partitions = partitions
        self._clock = clock
        self._metrics = metrics
        self._every = timedelta(seconds=every_seconds)
        self._last: datetime | None = None

    async def refresh_if_due(self, *, busy: bool = False) -> None:
        """`busy`: runs are starting now (fired at their time); the count waits for a quieter
        tick, up to twice its interval."""
        now = self._clock.now()
        every = 2 * self._every if busy else self._every
        if self._last is not None and now - self._last < every:
            return
        self._last = now
        await self.refresh(now)

    async def refresh(self, now: datetime) -> None:
        held = None if self._partitions is None else self._partitions.readable()
        if held is not None and not held:  # it holds none: none of the backlog is its to count
            backlog = Backlog(due=0, oldest_due_at=None)
        else:
            try:
                backlog = await self._store.due_backlog(now, partitions=held)
            except StoreError:
                self._metrics.store_errors.labels("due_backlog").inc()
                return  # the tick that follows reports the store's state; the gauges keep theirs
        self._metrics.due_backlog.set(backlog.due)
        oldest = backlog.oldest_due_at
        age = 0.0 if oldest is None else max(0.0, (now - oldest).total_seconds())
        self._metrics.oldest_due_age.set(age)
