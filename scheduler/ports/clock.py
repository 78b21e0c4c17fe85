"""Time as a port: the engine asks a Clock, so tests move time instead of waiting for it."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""

    def monotonic(self) -> float:
        """Seconds that really passed, from any origin: the wall clock (`now`) may be stepped
        forward or back (NTP, a VM restored); this never is."""

    async def sleep(self, seconds: float) -> None:
        """Wait this long (or, for a fake clock, move time on by this much)."""


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class FakeClock:
    """A clock that stands still until told to move; sleeping moves it at once. `advance` is
    time passing; `jump` and `set` step the wall clock only, as NTP or a restored VM do."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._monotonic = 0.0

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._monotonic

    def advance(self, seconds: float) -> datetime:
        self._now += timedelta(seconds=seconds)
        self._monotonic += seconds
        return self._now

    def jump(self, seconds: float) -> datetime:
        self._now += timedelta(seconds=seconds)
        return self._now

    def set(self, when: datetime) -> None:
        self._now = when

    async def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.advance(seconds)
        await asyncio.sleep(0)  # still a suspension point, as a real sleep is
