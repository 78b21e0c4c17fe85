"""Events as log lines (`log://`), or nowhere at all (`none://`)."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence

from tickd.scheduler.ports.backends import CloudEvent

log = logging.getLogger("tickd.events")


class LogPublisher:
    """`log://` logs each event at INFO; `log://?level=debug` keeps them out of a normal log."""

    keeps_events = True

    def __init__(self, level: int = logging.INFO) -> None:
        self.level = level

    def publish(self, event: CloudEvent) -> None:
        if log.isEnabledFor(self.level):
            log.log(
                self.level, "event %s", json.dumps(event, separators=(",", ":"), sort_keys=True)
            )

    async def publish_confirmed(
        self, events: Sequence[CloudEvent], *, timeout_seconds: float
    ) -> list[bool]:
        """A log line is delivered once written."""
        for event in events:
            self.publish(event)
        return [True] * len(events)

    async def close(self, timeout_seconds: float) -> None:
        return None


class NullPublisher:
    keeps_events = False

    def publish(self, event: CloudEvent) -> None:
        return None

    async def publish_confirmed(
        self, events: Sequence[CloudEvent], *, timeout_seconds: float
    ) -> list[bool]:
        return [True] * len(events)

    async def close(self, timeout_seconds: float) -> None:
        return None
