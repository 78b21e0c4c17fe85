"""The vendor's 429s, shared by the walk's workers: one pause for all of them, growing only with
new evidence.

A 429 asks every worker to wait, not just the one that got it: the pause is `resume_at`, and a
worker waits it out before its next call. Several workers' calls in flight when the vendor began
throttling all come back 429; those that started before the last 429 was known are the same
burst, already being waited for, and neither lengthen the pause nor count as another refusal.
A wait is what Retry-After says, and at least 1 s doubling with each new 429 in a row (a
Retry-After of 0, or a date in the past, must not turn into calls as fast as the vendor
answers). Too many in a row and the walk stops: the vendor has had enough for now.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from tickd.scheduler.plugin.api import Clock

MAX_BACKOFF_SECONDS = 60.0
# No wait is taken longer than this, whatever the vendor says (and no timedelta overflows).
MAX_WAIT_SECONDS = 86_400.0
MAX_THROTTLES_IN_A_ROW = 10


class Throttle:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.resume_at = clock.now()
        self.count = 0
        self.waited_seconds = 0.0
        self._in_a_row = 0
        self._last_known: datetime | None = None
        # One worker waits at a time; the others queue behind it, then find the pause over.
        self._waiting = asyncio.Lock()

    def refused(self, retry_after: float | None, *, call_started: datetime) -> bool:
        """Take a 429 into account. False when the vendor refused too many times in a row."""
        self.count += 1
        if self._last_known is not None and call_started <= self._last_known:
            return True  # the same burst
        now = self._clock.now()
        self._in_a_row += 1
        self._last_known = now
        if self._in_a_row > MAX_THROTTLES_IN_A_ROW:
            return False
        backoff = min(2.0 ** (self._in_a_row - 1), MAX_BACKOFF_SECONDS)
        wait = min(max(retry_after or 0.0, backoff), MAX_WAIT_SECONDS)
        self.resume_at = max(self.resume_at, now + timedelta(seconds=wait))
        return True

    def answered(self) -> None:
        """A call went through: the next 429 starts a new count."""
        self._in_a_row = 0

    async def wait(self, *, latest: datetime) -> bool:
        """Wait out the pause, if there is one. False, without waiting, if it ends after
        `latest` (the last moment a call may start)."""
        async with self._waiting:
            now = self._clock.now()
            if self.resume_at <= now:
                return True
            if self.resume_at > latest:
                return False
            wait = (self.resume_at - now).total_seconds()
            await self._clock.sleep(wait)
            self.waited_seconds += wait
            return True
