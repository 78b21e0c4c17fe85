"""Fire times: pure functions of a schedule and "now", so they are tested without a clock.

Cron expressions have six fields, seconds first (``*/10 * * * * *``); five fields are accepted with
seconds = 0, and the usual macros (``@hourly``, ``@daily`` ...) too. What each field means is
scheduler/schedule/cron.py's business (POSIX cron, plus ``H``, ``L`` and ``#``).

Cron is evaluated on the wall clock of the job's timezone. Where the clocks change:

* an expression that names its hours (``0 30 2 * * *``) fires once for each wall time it names,
  as RFC 5545 (iCalendar) reads a local time: a time that happens twice fires at its first
  occurrence; a time skipped by a spring change fires at the instant it would have had under the
  offset before the change, shifted by the jump (02:30 in Europe/Berlin on the last Sunday of
  March fires at 03:30). Vixie cron and cronie run a skipped time at the moment of the change
  (03:00) instead, which merges 02:00 and 02:30 into one instant and tells nothing of the time
  that was meant;
* an expression whose hour field starts with ``*`` (``0 */20 * * * *``) fires whenever the clock
  shows a time it names: through both passes of a repeated hour, never in a skipped one, since
  real time passes in the one and not in the other. Vixie cron does the same.

The search walks stretches of time with one UTC offset: the wall-clock time that fires next in a
stretch is one croniter step from ``after`` read in that stretch's offset. A clock change ends a
stretch; it is found by looking at the offset every ``SCAN_STEP`` between two candidate instants
and bisecting, so a call costs a few offset look-ups, not a scan of hours.
"""

from __future__ import annotations

import functools
import itertools
import random
from dataclasses import dataclass
from datetime import MAXYEAR, UTC, datetime, timedelta
from importlib import resources
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter.croniter import CroniterBadDateError

from tickd.scheduler.model import (
    CronSchedule,
    IntervalSchedule,
    OnceSchedule,
    Schedule,
    ValidationError,
)
from tickd.scheduler.schedule.cron import Cron, parse

MACROS = {
    "@yearly": "0 0 0 1 1 *",
    "@annually": "0 0 0 1 1 *",
    "@monthly": "0 0 0 1 * *",
    "@weekly": "0 0 0 * * 0",
    "@daily": "0 0 0 * * *",
    "@midnight": "0 0 0 * * *",
    "@hourly": "0 0 * * * *",
}

SECOND = timedelta(seconds=1)
# How far a search for the next fire time looks. The rarest date an expression can name, the
# 29th of February on a given weekday, recurs within 40 years; croniter looks 50 ahead too.
SEARCH_YEARS = 50
SEARCH_HORIZON = timedelta(days=366 * SEARCH_YEARS)
# A change this recent still decides what fires next. As long as the clock changes of the
# time-zone database (Antarctica/Troll's two hours each year), but for a few one-off shifts:
# the date line moved over Kwajalein (1993), Kiribati (1994) and Apia and Fakaofo (2011, a day
# skipped), and around those a fire time can be missed. Historic dates only (previews,
# backfills); a search looking back a day would find them, and is not made.
MAX_SHIFT = timedelta(hours=3)
# Shorter than the time between two clock changes of any zone since 1970 (the closest: six days
# and 22 hours, America/Cambridge_Bay in 2000; Asia/Gaza's in 2040): one look a step finds them.
SCAN_STEP = timedelta(days=6)


def six_fields(expr: str) -> str:
    """The expression in six fields, seconds first."""
    text = " ".join(expr.split())
    if text.lower() in MACROS:
        return MACROS[text.lower()]
    fields = text.split(" ")
    if len(fields) == 5:
        return "0 " + text
    if len(fields) == 6:
        return text
    raise ValidationError(
        "schedule.expr", f"expected 5 or 6 fields (seconds first) or a macro, got {len(fields)}"
    )


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValidationError("schedule.timezone", f"unknown timezone {name!r}") from None


@functools.cache
def iana_zones() -> frozenset[str]:
    """The zone names of the IANA database (the tzdata package): the same on every host."""
    listing = resources.files("tzdata").joinpath("zones").read_text(encoding="utf-8")
    return frozenset(listing.split())


def checked_zone(name: str) -> ZoneInfo:
    """A zone named as IANA names it; not `localtime`, a path or a file that differs by host."""
    if name not in iana_zones():
        raise ValidationError("schedule.timezone", _unknown_zone(name))
    return zone(name)


def _unknown_zone(name: str) -> str:
    spelled = [z for z in iana_zones() if z.lower() == name.lower()]
    hint = f"; did you mean {spelled[0]!r}?" if spelled else " (e.g. 'Europe/Berlin' or 'UTC')"
    return f"{name!r} is not an IANA time zone name{hint}"


def validate(schedule: Schedule, *, job_name: str) -> None:
    """Raise ValidationError naming the field if the schedule can never be evaluated."""
    if isinstance(schedule, CronSchedule):
        checked_zone(schedule.timezone)
        parse(six_fields(schedule.expr), job_name)


def next_fire(schedule: Schedule, after: datetime, *, job_name: str) -> datetime | None:
    """The first fire time strictly after `after`, in UTC; None when there is none left."""
    if isinstance(schedule, CronSchedule):
        return _next_cron(schedule, after, job_name)
    if isinstance(schedule, IntervalSchedule):
        return after + timedelta(seconds=schedule.every_seconds)
    return schedule.at if schedule.at > after else None


# What shortest_gap reads: the first fire times after now (the gaps a schedule repeats), and
# those around each clock change of the next year (the one gap a change shortens): a few
# milliseconds on the API's loop.
GAP_FIRES = 100
GAP_SPAN = timedelta(days=366)
FIRES_AROUND_A_CHANGE = 16


def shortest_gap(schedule: CronSchedule, after: datetime, *, job_name: str) -> timedelta | None:
    """The shortest time between two fire times after `after`: what a job's jitter must stay
    below, or one occurrence's delay would swallow the next. None if it fires less than
    twice. Not through the cache of fire times, which the dispatcher uses."""
    tz = zone(schedule.timezone)
    cron = parse(six_fields(schedule.expr), job_name)
    start = after.astimezone(UTC)
    fires = _fires_from(cron, tz, start, start + GAP_SPAN, GAP_FIRES)
    gaps = [later - earlier for earlier, later in itertools.pairwise(fires)]
    if not gaps:
        return None
    reach = 2 * max(gaps)  # wide enough to hold the fire times on either side of a change
    change = _first_change(tz, start, start + GAP_SPAN)
    while change is not None:
        around = _fires_from(cron, tz, change - reach, change + reach, FIRES_AROUND_A_CHANGE)
        gaps += [later - earlier for earlier, later in itertools.pairwise(around)]
        change = _first_change(tz, change, start + GAP_SPAN)
    return min(gaps)


def _fires_from(
    cron: Cron, tz: ZoneInfo, after: datetime, until: datetime, most: int
) -> list[datetime]:
    """Up to `most` fire times after `after`, up to `until` and one past it."""
    fires: list[datetime] = []
    current = after
    try:
        while len(fires) < most and current <= until:
            current = _search_cron(cron, tz, current)
            fires.append(current)
    except NoFireTime:
        pass
    return fires


def first_fire(schedule: Schedule, now: datetime, *, job_name: str) -> datetime | None:
    """When a new job first fires: a one-shot at its time (even if past), others after now."""
    if isinstance(schedule, OnceSchedule):
        return schedule.at
    return next_fire(schedule, now, job_name=job_name)


@dataclass(frozen=True)
class Stretch:
    """Time with one UTC offset, from the clock change that began it if that matters to the
    search (it was less than MAX_SHIFT ago, or the search crossed it)."""

    offset: timedelta
    start: datetime | None
    offset_before: timedelta  # the offset itself when there is no change to mind


# Jobs due at one instant share their expressions (a thousand on `* * * * * *`, the hourly ones
# at the top of the hour), and the next fire time is a pure function of what the expression
# names, its zone and the instant: each is worked out once, not once a job (the search is most
# of a run's cost on the dispatcher's loop otherwise). Bounded: cleared whole when full.
FIRES_KEPT = 8192
_fires: dict[tuple[tuple[str, ...], bool, str, datetime], datetime] = {}


def _next_cron(schedule: CronSchedule, after: datetime, job_name: str) -> datetime:
    tz = zone(schedule.timezone)
    cron = parse(six_fields(schedule.expr), job_name)
    after = after.astimezone(UTC)
    # `H` is read by then (walkers name its values), so jobs whose names hash apart differ here.
    key = (cron.walkers, cron.named_hour, schedule.timezone, after)
    found = _fires.get(key)
    if found is None:
        found = _search_cron(cron, tz, after)
        if len(_fires) >= FIRES_KEPT:
            _fires.clear()
        _fires[key] = found
    return found


class NoFireTime(ValidationError):
    """A cron expression names no time that exists in its zone within SEARCH_YEARS: a date no
    month has (February 30th), one the zone's clock change always skips (00:30 on the day
    Havana's clocks go from midnight to one), or none before the calendar ends (year 9999)."""

    def __init__(self) -> None:
        super().__init__(
            "schedule.expr",
            f"names no date that exists in its time zone within {SEARCH_YEARS} years: never fires",
        )


def _search_cron(cron: Cron, tz: ZoneInfo, after: datetime) -> datetime:
    """Stretch by stretch of one UTC offset, until a fire time lies before the next change.
    Bounded by SEARCH_HORIZON: a time each year's change skips would otherwise be looked for
    stretch after stretch up to the year 9999 (seconds of CPU on the loop, then a ValueError)."""
    wall_times = WallTimes(cron)
    try:
        stretch = _stretch_at(tz, after)
        while True:
            candidate = _first_in(stretch, wall_times, after)
            since = after if stretch.start is None else max(after, stretch.start)
            if since - after > SEARCH_HORIZON:
                raise NoFireTime
            change = _first_change(tz, since, candidate)
            if change is None:
                return candidate
            stretch = Stretch(_offset(tz, change), change, stretch.offset)
    except CroniterBadDateError:
        raise NoFireTime from None
    except (OverflowError, ValueError):
        if after.year < MAXYEAR - SEARCH_YEARS:
            raise  # not the calendar's end: a fault of ours, not of the expression
        raise NoFireTime from None


def _stretch_at(tz: ZoneInfo, after: datetime) -> Stretch:
    offset = _offset(tz, after)
    earlier = after - MAX_SHIFT
    before = _offset(tz, earlier)
    if before == offset:
        return Stretch(offset, None, offset)
    return Stretch(offset, _first_change(tz, earlier, after), before)


class WallTimes:
    """The wall times an expression names, for one search. A search crossing clock changes asks
    again from each change, mostly for the time it has already found: that answer is kept, since
    croniter is the costly part of it."""

    def __init__(self, cron: Cron) -> None:
        self.cron = cron
        self._known: tuple[datetime, datetime] | None = None  # nothing named between the two

    def first_after(self, floor: datetime) -> datetime:
        floor = floor.replace(microsecond=0)
        if self._known is not None and self._known[0] <= floor < self._known[1]:
            return self._known[1]
        found = self.cron.next_wall_time(floor)
        self._known = (floor, found)
        return found


def _first_in(stretch: Stretch, wall_times: WallTimes, after: datetime) -> datetime:
    """The first fire time after `after` if the stretch's offset held from its start on."""
    offset, start, before = stretch.offset, stretch.start, stretch.offset_before
    named_hour = wall_times.cron.named_hour
    floor = _wall(after, offset)
    if start is not None:
        floor = max(floor, _wall(start, offset) - SECOND)
        if named_hour and before > offset:
            # Clocks went back: the named hour's second pass is not another occurrence.
            floor = max(floor, _wall(start, before) - SECOND)
    found = _instant(wall_times.first_after(floor), offset)
    if named_hour and start is not None and before < offset:
        skipped = _skipped_fire(wall_times, start, before, offset, after)
        found = found if skipped is None else min(found, skipped)
    return found


def _skipped_fire(
    wall_times: WallTimes, change: datetime, before: timedelta, offset: timedelta, after: datetime
) -> datetime | None:
    """A named wall time the spring change skipped, at the instant the old offset gives it."""
    floor = max(_wall(after, before), _wall(change, before) - SECOND)
    wall = wall_times.first_after(floor)
    return _instant(wall, before) if wall < _wall(change, offset) else None


def _wall(instant: datetime, offset: timedelta) -> datetime:
    return (instant + offset).replace(tzinfo=None)


def _instant(wall: datetime, offset: timedelta) -> datetime:
    return (wall - offset).replace(tzinfo=UTC)


def _offset(tz: ZoneInfo, instant: datetime) -> timedelta:
    offset = instant.astimezone(tz).utcoffset()
    assert offset is not None  # a ZoneInfo always has one
    return offset


def clock_changed(tz: ZoneInfo, since: datetime, until: datetime) -> bool:
    """Whether the zone's clocks change in (since, until]."""
    return _first_change(tz, since.astimezone(UTC), until.astimezone(UTC)) is not None


def _first_change(tz: ZoneInfo, since: datetime, until: datetime) -> datetime | None:
    """The first clock change in (since, until], to the second; None if there is none."""
    offset = _offset(tz, since)
    low = since
    while low < until:
        high = min(low + SCAN_STEP, until)
        if _offset(tz, high) != offset:
            return _bisect_change(tz, low, high, offset)
        low = high
    return None


def _bisect_change(tz: ZoneInfo, low: datetime, high: datetime, offset: timedelta) -> datetime:
    # Changes fall on whole seconds: once the interval is a second long, `high` is in it.
    while high - low > SECOND:
        middle = low + (high - low) / 2
        if _offset(tz, middle) == offset:
            low = middle
        else:
            high = middle
    return high.replace(microsecond=0)


def jittered(fire_time: datetime, jitter_seconds: float, rng: random.Random) -> datetime:
    if jitter_seconds <= 0:
        return fire_time
    return fire_time + timedelta(seconds=rng.uniform(0, jitter_seconds))


def occurrences(
    schedule: Schedule, first: datetime, until: datetime, *, job_name: str, limit: int
) -> list[datetime]:
    """Fire times from `first` (included) up to `until` (included), at most `limit` of them."""
    found: list[datetime] = []
    current: datetime | None = first
    while current is not None and current <= until and len(found) < limit:
        found.append(current)
        if isinstance(schedule, IntervalSchedule):
            break  # an interval job has one pending occurrence at a time, by definition
        try:
            current = next_fire(schedule, current, job_name=job_name)
        except NoFireTime:  # none for fifty years: none up to `until` either, for any use
            break
    return found
