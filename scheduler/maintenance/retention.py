"""Housekeeping off the hot path: prune old executions and history, refresh the dead-letter gauge.

Its own task, on its own slow timer, started by the composition root beside the dispatcher (never
inside a tick): each pass deletes in small batches, at most MAX_BATCHES_PER_PASS of them, so a
backlog of years is worked off over several passes while the store keeps answering the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta

from tickd.scheduler.config.settings import Settings
from tickd.scheduler.logs import log_event
from tickd.scheduler.metrics import Metrics
from tickd.scheduler.ports.backends import Retention, StoreError
from tickd.scheduler.ports.clock import Clock
from tickd.scheduler.ports.store_engine import HousekeepingStore

log = logging.getLogger("tickd.retention")

# A pass every minute: the gauge is at most that stale, and pruning keeps up with any rate of
# runs a daemon sustains (a batch deletes in milliseconds).
PASS_EVERY_SECONDS = 60.0
BATCH_SIZE = 500
MAX_BATCHES_PER_PASS = 20


@dataclass(frozen=True, slots=True)
class Pruned:
    executions: int
    changes: int


def retentions(settings: Settings) -> Iterator[Retention]:
    """One per handler with settings of its own, then one for every other handler."""
    days = settings.retention_days_by_handler
    counts = settings.retention_max_executions_by_handler
    special = tuple(sorted(set(days) | set(counts)))
    for handler in special:
        yield Retention(
            days=days.get(handler, settings.retention_days),
            max_per_job=counts.get(handler, settings.retention_max_executions_per_job),
            handler=handler,
        )
    yield Retention(
        days=settings.retention_days,
        max_per_job=settings.retention_max_executions_per_job,
        except_handlers=special,
    )


class Housekeeper:
    def __init__(
        self, settings: Settings, store: HousekeepingStore, clock: Clock, metrics: Metrics
    ) -> None:
        self.settings = settings
        self.store = store
        self.clock = clock
        self.metrics = metrics
        self._gauged: set[tuple[str, str]] = set()

    async def run(self, stop: asyncio.Event) -> None:
        """A pass, then one every PASS_EVERY_SECONDS, until `stop`; a failed pass is logged and
        the next one tries again."""
        while not stop.is_set():
            try:
                await self.run_once()
            except StoreError as exc:
                log_event(log, "retention.failed", level=logging.WARNING, error=str(exc))
            except Exception:  # a bug of ours must not end housekeeping for good
                log.exception("retention.unexpected_error")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=PASS_EVERY_SECONDS)

    async def run_once(self) -> Pruned:
        pruned = await self.prune()
        await self.refresh_gauge()
        return pruned

    async def prune(self) -> Pruned:
        now = self.clock.now()
        executions = 0
        for retention in retentions(self.settings):
            executions += await self._in_batches(
                functools.partial(self.store.prune_executions, retention, now, limit=BATCH_SIZE)
            )
        changes = 0
        if self.settings.retention_days:
            before = now - timedelta(days=self.settings.retention_days)
            changes = await self._in_batches(
                functools.partial(self.store.prune_changes, before, limit=BATCH_SIZE)
            )
        self.metrics.pruned.labels("executions").inc(executions)
        self.metrics.pruned.labels("changes").inc(changes)
        if executions or changes:
            log_event(log, "retention.pruned", executions=executions, changes=changes)
        return Pruned(executions=executions, changes=changes)

    async def _in_batches(self, batch: Callable[[], Awaitable[int]]) -> int:
        total = 0
        for _ in range(MAX_BATCHES_PER_PASS):
            deleted = await batch()
            total += deleted
            if deleted < BATCH_SIZE:
                break
            await asyncio.sleep(0)  # let the engine's own store calls through between batches
        return total

    async def refresh_gauge(self) -> None:
        counts = await self.store.count_dead_letters()
        for handler, domain in self._gauged - set(counts):
            self.metrics.dead_letters.labels(handler, domain).set(0)
        for (handler, domain), count in counts.items():
            self.metrics.dead_letters.labels(handler, domain).set(count)
        self._gauged |= set(counts)
