"""The clock changes of every time zone, found from the zone's UTC offsets alone (a day-by-day walk,
then bisection to the second): independent of how scheduler/schedule/schedules.py finds them."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, available_timezones

FIRST_YEAR, LAST_YEAR = 2026, 2030
ALL_ZONES = tuple(sorted(available_timezones()))


@dataclass(frozen=True)
class Change:
    zone: str
    at: datetime  # the first instant of the new offset
    before: timedelta
    after: timedelta

    @property
    def jump(self) -> timedelta:
        """Positive when the clocks spring forward."""
        return self.after - self.before

    @property
    def tz(self) -> ZoneInfo:
        return ZoneInfo(self.zone)


def offset(tz: ZoneInfo, instant: datetime) -> timedelta:
    found = instant.astimezone(tz).utcoffset()
    assert found is not None
    return found


@functools.cache
def changes(zone: str) -> tuple[Change, ...]:
    """Every change of the zone's UTC offset from FIRST_YEAR to LAST_YEAR."""
    tz = ZoneInfo(zone)
    day = timedelta(days=1)
    current = datetime(FIRST_YEAR, 1, 1, tzinfo=UTC)
    end = datetime(LAST_YEAR + 1, 1, 1, tzinfo=UTC)
    found: list[Change] = []
    while current < end:
        following = current + day
        if offset(tz, following) != offset(tz, current):
            found.append(_bisect(zone, tz, current, following))
        current = following
    return tuple(found)


def _bisect(zone: str, tz: ZoneInfo, low: datetime, high: datetime) -> Change:
    before = offset(tz, low)
    while high - low > timedelta(seconds=1):
        middle = low + (high - low) / 2
        low, high = (middle, high) if offset(tz, middle) == before else (low, middle)
    at = high.replace(microsecond=0)
    return Change(zone, at, before, offset(tz, at))


@functools.cache
def every_change() -> tuple[Change, ...]:
    """The changes of every zone, zone by zone."""
    return tuple(change for zone in ALL_ZONES for change in changes(zone))
