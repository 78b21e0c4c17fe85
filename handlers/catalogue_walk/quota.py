"""The vendor's daily quota as the walk spends it: units reserved in the product store (atomic
across tasks, processes and instances), a few at a time, handed out one per call."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, date, datetime

from tickd.handlers.product_store import ProductStore


class QuotaPool:
    """Reserves at most `chunk` units at a time (the calls in flight at once), and only one for
    a run's first call (which goes alone, see Walk._call).

    The day is the UTC day of each reservation, not of the run's start: a run that crosses
    midnight charges its later calls to the new day, and the units it still held for the old
    one are dropped (the vendor's old day is over). Units reserved and not used when the run
    stops are lost to the day, `chunk - 1` at most: the quota errs towards fewer calls, never
    more."""

    def __init__(self, products: ProductStore, *, key: str, limit: int, chunk: int) -> None:
        self._products = products
        self.key = key
        self.limit = limit
        self._chunk = chunk
        self.day: date | None = None
        self._left = 0
        self._spent = False
        self._probed = False
        self.unused_reserved = 0
        self._lock = asyncio.Lock()

    async def take(self, upcoming: int, now: Callable[[], datetime]) -> bool:
        """One unit for one call made now, with `upcoming` calls (this one included) in view, so
        that no more are reserved than will be asked. False once the day's quota is spent."""
        async with self._lock:
            # The time is read holding the lock: a worker that waited for it past midnight
            # must not take the pool back to the day before.
            self._turn_day(now().astimezone(UTC).date())
            if self._left == 0 and not self._spent:
                want = min(self._chunk, upcoming) if self._probed else 1
                self._probed = True
                self._left = await self._products.reserve_quota(
                    self.key, self._current_day, limit=self.limit, want=want
                )
                self._spent = self._left == 0
            if self._left == 0:
                return False
            self._left -= 1
            return True

    def _turn_day(self, day: date) -> None:
        if self.day is None or day > self.day:
            self.unused_reserved += self._left
            self.day, self._left, self._spent = day, 0, False

    @property
    def _current_day(self) -> date:
        assert self.day is not None
        return self.day

    def release_unused(self) -> None:
        """Count what is left as lost (the store never gives units back)."""
        self.unused_reserved += self._left
        self._left = 0
