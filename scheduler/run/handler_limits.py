"""Each handler's concurrency limit: at most that many of its runs queued, running, staged or
armed at once, as the handler declares it (`max_concurrency`) or the settings override it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from tickd.scheduler.config.settings import Settings
from tickd.scheduler.plugin.registry import HandlerRegistry
from tickd.scheduler.run.due import DueRun


class HandlerLimits:
    def __init__(self, settings: Settings, registry: HandlerRegistry) -> None:
        self.settings = settings
        self.registry = registry

    def limit(self, handler: str) -> int | None:
        if handler in self.settings.handler_concurrency:
            return self.settings.handler_concurrency[handler]
        registered = self.registry.get(handler)
        return registered.handler.max_concurrency if registered else None

    def saturated(self, busy: Counter[str]) -> list[str]:
        """The handlers with no room left, given how many runs of each are `busy`."""
        return [
            handler
            for handler in busy
            if (limit := self.limit(handler)) is not None and busy[handler] >= limit
        ]

    def within(self, runs: Sequence[DueRun], busy: Counter[str]) -> list[DueRun]:
        """The runs their handlers have room for. A sharded run counts as many runs as it has
        shards; one wider than the limit itself (the limit lowered since the job was checked)
        goes when the handler is idle."""
        taken: Counter[str] = Counter()
        kept = []
        for run in runs:
            handler = run.job.handler
            limit = self.limit(handler)
            now_busy = busy[handler] + taken[handler]
            wider = limit is not None and run.width > limit
            if limit is None or now_busy + run.width <= limit or (wider and now_busy == 0):
                taken[handler] += run.width
                kept.append(run)
        return kept
