"""Each domain's fire-lag objective as a gauge, `tickd_domain_lag_objective_seconds{domain}`, for
the alert that holds a domain's p99 fire lag against it (deploy/alerts.yaml). Read from the
domains' stored settings on a slow timer of its own, beside the dispatcher, never within a tick;
a domain whose record is deleted, or whose objective is cleared, loses its series."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from tickd.scheduler.logs import log_event
from tickd.scheduler.metrics import Metrics
from tickd.scheduler.ports.backends import StoreError
from tickd.scheduler.ports.store_api import DomainStore

log = logging.getLogger("tickd.engine")

# An objective set or changed shows within this: far less than the minutes the alert waits.
REFRESH_EVERY_SECONDS = 30.0


class LagObjectives:
    def __init__(self, domains: DomainStore, metrics: Metrics) -> None:
        self._domains = domains
        self._metrics = metrics
        self._exported: set[str] = set()

    async def run(self, stop: asyncio.Event) -> None:
        """A refresh, then one every REFRESH_EVERY_SECONDS, until `stop`; a failed read keeps
        the gauge as it was, and the next one tries again."""
        while not stop.is_set():
            try:
                await self.refresh()
            except StoreError as exc:
                log_event(log, "objectives.unread", level=logging.WARNING, error=str(exc))
            except Exception:  # a bug of ours must not end the refreshes for good
                log.exception("objectives.unexpected_error")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=REFRESH_EVERY_SECONDS)

    async def refresh(self) -> None:
        objectives = {
            record.name: record.lag_objective_seconds
            for record in await self._domains.list_domains()
            if record.lag_objective_seconds is not None
        }
        for domain in self._exported - objectives.keys():
            self._metrics.lag_objective.remove(domain)
        for domain, seconds in objectives.items():
            self._metrics.lag_objective.labels(domain).set(seconds)
        self._exported = set(objectives)
