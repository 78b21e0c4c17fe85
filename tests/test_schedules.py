"""Fire times: cron (six fields, five, macros, H, timezones, DST), interval, once."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, date, datetime, time, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from tests.clock_changes import Change, every_change
from tests.conftest import make_job
from tests.properties import examples
from tickd.handlers.noop import noop
from tickd.scheduler.config.settings import Settings
from tickd.scheduler.jobspec import JobRules
from tickd.scheduler.model import CronSchedule, IntervalSchedule, OnceSchedule, ValidationError
from tickd.scheduler.plugin.registry import HandlerRegistry
from tickd.scheduler.schedule.cron import parse
from tickd.scheduler.schedule.schedules import (
    first_fire,
    next_fire,
    occurrences,
    six_fields,
    validate,
)

BERLIN = ZoneInfo("Europe/Berlin")


def cron(expr: str, tz: str = "UTC") -> CronSchedule:
    return CronSchedule(expr=expr, timezone=tz)


def fires(
    schedule: CronSchedule, start: datetime, end: datetime, name: str = "job"
) -> list[datetime]:
    found: list[datetime] = []
    current = start
    while True:
        nxt = next_fire(schedule, current, job_name=name)
        assert nxt is not None and nxt > current, "fire times always move forward"
        if nxt > end:
            return found
        found.append(nxt)
        current = nxt


def at(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def test_six_fields_have_seconds_first() -> None:
    s = cron("*/10 * * * * *")
    assert next_fire(s, at(2026, 1, 1, 0, 0, 3), job_name="j") == at(2026, 1, 1, 0, 0, 10)
    assert next_fire(s, at(2026, 1, 1, 0, 0, 10), job_name="j") == at(2026, 1, 1, 0, 0, 20)


def test_five_fields_mean_second_zero() -> None:
    assert six_fields("*/5 * * * *") == "0 */5 * * * *"
    s = cron("*/5 * * * *")
    assert next_fire(s, at(2026, 1, 1, 0, 1, 30), job_name="j") == at(2026, 1, 1, 0, 5, 0)


def test_sub_second_start_still_fires_at_the_next_second() -> None:
    s = cron("* * * * * *")
    after = at(2026, 1, 1, 0, 0, 0) + timedelta(microseconds=999_999)
    assert next_fire(s, after, job_name="j") == at(2026, 1, 1, 0, 0, 1)


@pytest.mark.parametrize(
    ("macro", "expected"),
    [
        ("@hourly", at(2026, 1, 1, 11, 0, 0)),
        ("@daily", at(2026, 1, 2, 0, 0, 0)),
        ("@midnight", at(2026, 1, 2, 0, 0, 0)),
        ("@weekly", at(2026, 1, 4, 0, 0, 0)),  # Sunday
        ("@monthly", at(2026, 2, 1, 0, 0, 0)),
        ("@yearly", at(2027, 1, 1, 0, 0, 0)),
        ("@annually", at(2027, 1, 1, 0, 0, 0)),
    ],
)
def test_macros(macro: str, expected: datetime) -> None:
    assert next_fire(cron(macro), at(2026, 1, 1, 10, 30), job_name="j") == expected


def test_timezone_is_the_wall_clock_of_the_job() -> None:
    s = cron("0 0 9 * * *", "America/New_York")
    # 09:00 in New York in January is 14:00 UTC.
    assert next_fire(s, at(2026, 1, 5, 0, 0), job_name="j") == at(2026, 1, 5, 14, 0)


def daily_runs_on(schedule: CronSchedule, day: date) -> list[datetime]:
    start = datetime(day.year, day.month, day.day, tzinfo=BERLIN) - timedelta(days=1)
    end = start + timedelta(days=3)
    return [t for t in fires(schedule, start, end) if t.astimezone(BERLIN).date() == day]


def test_dst_spring_forward_daily_job_runs_exactly_once_shifted_by_the_jump() -> None:
    # 2026-03-29: Berlin clocks jump from 02:00 to 03:00; 02:30 does not exist.
    runs = daily_runs_on(cron("0 30 2 * * *", "Europe/Berlin"), date(2026, 3, 29))
    assert len(runs) == 1
    assert runs[0] == at(2026, 3, 29, 1, 30)  # 03:30 CEST
    assert runs[0].astimezone(BERLIN).strftime("%H:%M") == "03:30"


def test_dst_fall_back_daily_job_runs_exactly_once_at_first_pass() -> None:
    # 2026-10-25: Berlin clocks go back from 03:00 to 02:00; 02:30 happens twice.
    runs = daily_runs_on(cron("0 30 2 * * *", "Europe/Berlin"), date(2026, 10, 25))
    assert runs == [at(2026, 10, 25, 0, 30)]  # 02:30 CEST, the first pass


def test_dst_fall_back_from_inside_the_repeated_hour_does_not_rerun() -> None:
    # A daemon that computes the next run from 02:15 in the second pass (01:15 UTC) must not
    # run the 02:30 job a second time that night.
    s = cron("0 30 2 * * *", "Europe/Berlin")
    assert next_fire(s, at(2026, 10, 25, 1, 15), job_name="j") == at(2026, 10, 26, 1, 30)


def test_dst_fall_back_wildcard_hour_keeps_its_rhythm_through_both_passes() -> None:
    s = cron("0 */20 * * * *", "Europe/Berlin")
    runs = fires(s, at(2026, 10, 24, 23, 50), at(2026, 10, 25, 2, 10))
    gaps = {b - a for a, b in pairwise(runs)}
    assert gaps == {timedelta(minutes=20)}
    assert len(runs) == 7  # 00:00 .. 02:00 UTC: three hours of wall clock in two local hours


def test_dst_spring_forward_wildcard_hour_skips_the_missing_hour_without_duplicates() -> None:
    s = cron("0 */20 * * * *", "Europe/Berlin")
    runs = fires(s, at(2026, 3, 29, 0, 0), at(2026, 3, 29, 2, 0))
    assert len(runs) == len(set(runs)) == 6
    assert {b - a for a, b in pairwise(runs)} == {timedelta(minutes=20)}


def test_hash_field_is_stable_per_job_and_spreads_jobs() -> None:
    s = cron("H H * * * *")
    start = at(2026, 1, 1)
    first = next_fire(s, start, job_name="report-a")
    assert first == next_fire(s, start, job_name="report-a")
    seconds = {next_fire(s, start, job_name=f"job-{i}") for i in range(50)}
    assert len(seconds) > 40, "fifty jobs on `H H * * * *` must not all fire at one instant"


def test_hash_with_step_stays_within_each_period() -> None:
    runs = fires(cron("H/15 * * * * *"), at(2026, 1, 1), at(2026, 1, 1, 0, 1), name="x")
    assert len(runs) == 4
    assert {t.second % 15 for t in runs} == {runs[0].second % 15}


@pytest.mark.parametrize(
    ("schedule", "field"),
    [
        (cron("61 * * * * *"), "schedule.expr"),
        (cron("* * * *"), "schedule.expr"),
        (cron("* * * * * * * *"), "schedule.expr"),
        (cron("not a cron line at all"), "schedule.expr"),
        (cron("* * * * *", "Mars/Olympus_Mons"), "schedule.timezone"),
    ],
)
def test_invalid_cron_names_the_field(schedule: CronSchedule, field: str) -> None:
    with pytest.raises(ValidationError) as raised:
        validate(schedule, job_name="j")
    assert raised.value.field == field


def test_interval_is_after_plus_every() -> None:
    s = IntervalSchedule(every_seconds=90)
    assert next_fire(s, at(2026, 1, 1), job_name="j") == at(2026, 1, 1, 0, 1, 30)


@pytest.mark.parametrize("every", [0, -5])
def test_interval_must_be_positive(every: float) -> None:
    with pytest.raises(ValidationError, match=r"schedule\.every_seconds"):
        IntervalSchedule(every_seconds=every)


def test_once_fires_at_its_time_and_then_never() -> None:
    s = OnceSchedule(at=at(2026, 5, 1, 12))
    assert first_fire(s, at(2026, 6, 1), job_name="j") == at(2026, 5, 1, 12)
    assert next_fire(s, at(2026, 5, 1, 12), job_name="j") is None


def test_once_requires_an_aware_time() -> None:
    with pytest.raises(ValidationError, match=r"schedule\.at"):
        OnceSchedule(at=datetime(2026, 5, 1, 12))


def test_occurrences_are_bounded_and_ordered() -> None:
    found = occurrences(cron("* * * * * *"), at(2026, 1, 1), at(2026, 1, 2), job_name="j", limit=5)
    assert found == [at(2026, 1, 1) + timedelta(seconds=i) for i in range(5)]


# -- clock changes in every zone, 2026 to 2030 ----------------------------------------------------
#
# The rules (docs/jobs.md, "Daylight saving"), checked against oracles built from zoneinfo alone:
# a wildcard hour fires whenever the zone's clock shows a time the expression names; a named hour
# fires once a day, at the instant RFC 5545 gives its wall time (fold=0: the first pass of a
# repeated time, the offset before the change for a skipped one).

# (expression, seconds it names, minutes it names, period)
WILDCARD_HOURS = [
    ("0 0 * * * *", {0}, {0}, timedelta(hours=1)),
    ("0 */20 * * * *", {0}, {0, 20, 40}, timedelta(minutes=20)),
    ("0 15,45 * * * *", {0}, {15, 45}, timedelta(minutes=30)),
    ("*/30 * * * * *", {0, 30}, set(range(60)), timedelta(seconds=30)),
]
any_change = st.deferred(lambda: st.sampled_from(every_change()))
CALENDAR = settings(derandomize=True, deadline=None, max_examples=examples(400))


def clock_shows(
    change: Change, seconds: set[int], minutes: set[int], start: datetime, end: datetime
) -> list[datetime]:
    """Every instant in (start, end] whose wall-clock time has those seconds and minutes."""
    found = []
    instant = start.replace(second=start.second // 30 * 30, microsecond=0)
    while instant <= end:
        local = instant.astimezone(change.tz)
        if instant > start and local.second in seconds and local.minute in minutes:
            found.append(instant)
        instant += timedelta(seconds=30)
    return found


def runs_of_a_wildcard_hour(
    change: Change, case: tuple[str, set[int], set[int], timedelta]
) -> list[datetime]:
    """The runs around the change, checked: the times the clock shows, in real-time rhythm."""
    expr, seconds, minutes, period = case
    margin = abs(change.jump) + min(period * 4, timedelta(minutes=40))
    start, end = change.at - margin, change.at + margin
    runs = fires(cron(expr, change.zone), start, end)
    assert runs == clock_shows(change, seconds, minutes, start, end)
    if change.jump % period == timedelta(0):
        # Real time passes evenly through the change: so do the runs.
        assert {b - a for a, b in pairwise(runs)} == {period}
    return runs


@CALENDAR
@given(change=any_change, case=st.sampled_from(WILDCARD_HOURS), data=st.data())
def test_a_wildcard_hour_fires_whenever_the_clock_shows_its_time_across_every_change(
    change: Change,
    case: tuple[str, set[int], set[int], timedelta],
    data: st.DataObject,
) -> None:
    note(f"{case[0]!r} around {change}")
    runs = runs_of_a_wildcard_hour(change, case)
    # From any instant, the next fire time is the next of those runs.
    start = runs[0] - case[3]
    after = data.draw(
        st.integers(0, int((runs[-1] - start).total_seconds()) - 1).map(seconds_after(start))
    )
    schedule = cron(case[0], change.zone)
    assert next_fire(schedule, after, job_name="j") == next(t for t in runs if t > after)


def seconds_after(origin: datetime) -> Callable[[int], datetime]:
    return lambda s: origin + timedelta(seconds=s)


def rfc5545(day: date, wall: time, tz: ZoneInfo) -> datetime:
    return datetime.combine(day, wall, tzinfo=tz).astimezone(UTC)  # fold=0


named_times = st.one_of(
    st.sampled_from([time(2, 30), time(9, 0), time(0, 0), time(23, 30)]),
    # a time in the skipped or repeated stretch, or at its edges
    st.integers(-150, 150).map(lambda minutes: timedelta(minutes=minutes)),
)


def runs_of_a_named_time(change: Change, named: time) -> list[datetime]:
    """The runs from two days before the change to two days after, checked: one a day."""
    tz = change.tz
    schedule = cron(f"{named.second} {named.minute} {named.hour} * * *", change.zone)
    local_day = change.at.astimezone(tz).date()
    days = [local_day + timedelta(days=d) for d in range(-3, 4)]
    start, end = rfc5545(days[1], named, tz), rfc5545(days[-2], named, tz)
    runs = fires(schedule, start, end)
    assert runs == [rfc5545(day, named, tz) for day in days[2:-1]]
    # One run for each day; each at the time named, or, on the day that time was skipped, at
    # the time the jump moved it to.
    for run, day in zip(runs, days[2:-1], strict=True):
        local = run.astimezone(tz).replace(tzinfo=None)
        assert local == datetime.combine(day, named) or (
            change.jump > timedelta(0) and local == datetime.combine(day, named) + change.jump
        )
    return runs


@CALENDAR
@given(change=any_change, named=named_times, data=st.data())
def test_a_named_daily_time_fires_exactly_once_a_day_across_every_change(
    change: Change, named: time | timedelta, data: st.DataObject
) -> None:
    if isinstance(named, timedelta):
        named = ((change.at + change.before + named).replace(tzinfo=None)).time()
    note(f"{named} daily around {change}")
    runs = runs_of_a_named_time(change, named)
    after = data.draw(st.integers(-3 * 3600, 3 * 3600).map(seconds_after(change.at)))
    schedule = cron(f"{named.second} {named.minute} {named.hour} * * *", change.zone)
    assert next_fire(schedule, after, job_name="j") == next(t for t in runs if t > after)


def test_every_change_of_every_zone_keeps_both_rules() -> None:
    """Beyond the samples above: each change, an hourly job and a daily one at the time the
    change skips or repeats (halfway through it)."""
    for change in every_change():
        midway = change.at + change.before + abs(change.jump) / 2
        try:
            runs_of_a_wildcard_hour(change, WILDCARD_HOURS[0])
            runs_of_a_named_time(change, midway.replace(tzinfo=None).time())
        except AssertionError as failed:
            raise AssertionError(f"around {change}") from failed


@given(names=st.lists(st.text(min_size=1, max_size=12), min_size=2, max_size=6, unique=True))
@settings(max_examples=50)
def test_jobs_sharing_an_expression_with_h_each_fire_at_their_own_second(
    names: list[str],
) -> None:
    """Fire times are worked out once for the jobs of one expression (a thousand on the same
    cron fall due together); `H` makes the expression each job's own, by its name."""
    schedule = CronSchedule(expr="H * * * * *")
    after = datetime(2026, 3, 29, 0, 59, 59, tzinfo=UTC)
    for name in [*names, *reversed(names)]:  # asked again, in another order
        fire = next_fire(schedule, after, job_name=name)
        [second] = parse(six_fields(schedule.expr), name).seconds
        assert fire == datetime(2026, 3, 29, 1, 0, second, tzinfo=UTC), name


def test_jitter_is_checked_against_the_shortest_gap_not_the_first() -> None:
    """`0 0 9,17 * * *` fires 8 and 16 hours apart. Checked against the first gap after its
    creation only, 12 hours of jitter was refused at 08:00 and accepted at 10:00, and then lost
    every run that followed a jittered morning one by more than 8 hours."""
    registry = HandlerRegistry()
    registry.register("noop", noop)
    rules = JobRules(registry, Settings())
    twice_a_day = make_job(schedule=CronSchedule(expr="0 0 9,17 * * *"), jitter_seconds=12 * 3600)
    for hour in (8, 10, 18):
        created = datetime(2026, 3, 2, hour, tzinfo=UTC)
        with pytest.raises(ValidationError) as refused:
            rules.check(twice_a_day, created, new_schedule=True)
        assert refused.value.field == "jitter_seconds" and "28800 s" in str(refused.value)
    rules.check(replace(twice_a_day, jitter_seconds=8 * 3600 - 1), created, new_schedule=True)
    # The spring change makes one gap an hour shorter, once a year, whenever the job is made.
    every_six_hours = CronSchedule(expr="0 0 */6 * * *", timezone="Europe/Berlin")
    for made in (datetime(2026, 1, 15, tzinfo=UTC), datetime(2026, 4, 1, tzinfo=UTC)):
        job = make_job(schedule=every_six_hours, jitter_seconds=5.5 * 3600)
        with pytest.raises(ValidationError):
            rules.check(job, made, new_schedule=True)
