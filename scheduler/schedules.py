"""Fire times: pure functions of a schedule and "now", so they are tested without a clock.

Cron expressions have six fields, seconds first (``*/10 * * * * *``); five fields are accepted with
seconds = 0, and the usual macros (``@hourly``, ``@daily`` ...) too. ``H`` in a field picks a value
from a hash of the job's name, the same every time, to spread jobs that would all fire at :00.

Cron is evaluated on the wall clock of the job's timezone. Daylight-saving transitions:

* spring forward: a wall time that does not exist that day (02:30 in Europe/Berlin on the last
  Sunday of March) fires once, shifted by the jump: at 03:30 local, the UTC instant that 02:30
  winter time would have been;
* fall back: a wall time that happens twice fires once, at its first occurrence, when the
  expression names the hour (``0 30 2 * * *``); when the hour field is a wildcard (``*/10 * * * *
  *``) the job keeps its rhythm through both passes of the repeated hour, since real time passes.
This is what Vixie cron does, and what ops expect from a daily job.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from croniter.croniter import CroniterError

from scheduler.model import (
    CronSchedule,
    IntervalSchedule,
    OnceSchedule,
    Schedule,
    ValidationError,
)

MACROS = {
    "@yearly": "0 0 0 1 1 *",
    "@annually": "0 0 0 1 1 *",
    "@monthly": "0 0 0 1 * *",
    "@weekly": "0 0 0 * * 0",
    "@daily": "0 0 0 * * *",
    "@midnight": "0 0 0 * * *",
    "@hourly": "0 0 * * * *",
}


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


def validate(schedule: Schedule, *, job_name: str) -> None:
    """Raise ValidationError naming the field if the schedule can never be evaluated."""
    if isinstance(schedule, CronSchedule):
        zone(schedule.timezone)
        try:
            _cron(schedule.expr, datetime(2000, 1, 1), job_name)
        except CroniterError as exc:
            raise ValidationError("schedule.expr", str(exc)) from None


def _cron(expr: str, start: datetime, job_name: str) -> croniter:
    return croniter(
        six_fields(expr),
        start,
        hash_id=job_name.encode(),
        second_at_beginning=True,
    )


def next_fire(schedule: Schedule, after: datetime, *, job_name: str) -> datetime | None:
    """The first fire time strictly after `after`, in UTC; None when there is none left."""
    if isinstance(schedule, CronSchedule):
        return _next_cron(schedule, after, job_name)
    if isinstance(schedule, IntervalSchedule):
        return after + timedelta(seconds=schedule.every_seconds)
    return schedule.at if schedule.at > after else None


def first_fire(schedule: Schedule, now: datetime, *, job_name: str) -> datetime | None:
    """When a new job first fires: a one-shot at its time (even if past), others after now."""
    if isinstance(schedule, OnceSchedule):
        return schedule.at
    return next_fire(schedule, now, job_name=job_name)


def _next_cron(schedule: CronSchedule, after: datetime, job_name: str) -> datetime:
    tz = zone(schedule.timezone)
    both_passes = six_fields(schedule.expr).split(" ")[2].startswith("*")
    # Near a transition, `after` reads as two different wall times (one per UTC offset in force
    # around it); the answer is the earliest fire time found from either reading.
    offsets = {tz.utcoffset(after + timedelta(hours=h)) for h in (-3, 0, 3)}
    starts = {(after + offset).replace(tzinfo=None) for offset in offsets if offset is not None}
    return min(
        _first_after(start, after, tz, both_passes, schedule.expr, job_name) for start in starts
    )


def _first_after(
    start: datetime, after: datetime, tz: ZoneInfo, both_passes: bool, expr: str, job_name: str
) -> datetime:
    # Whole seconds: croniter steps from the start of the second it is given.
    wall_clock = _cron(expr, start.replace(microsecond=0), job_name)
    while True:
        wall: datetime = wall_clock.get_next(datetime)
        for instant in _instants(wall, tz, both_passes):
            if instant > after:
                return instant


def _instants(wall: datetime, tz: ZoneInfo, both_passes: bool) -> list[datetime]:
    """The UTC instants at which a wall-clock time fires, by the rules in the module docstring."""
    first = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)
    if not both_passes:
        return [first]
    second = wall.replace(tzinfo=tz, fold=1).astimezone(UTC)
    repeated = second != first and second.astimezone(tz).replace(tzinfo=None) == wall
    return [first, second] if repeated else [first]


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
        current = next_fire(schedule, current, job_name=job_name)
    return found
