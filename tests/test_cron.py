"""Cron fields mean what POSIX cron means: tickd against cronsim (Healthchecks.io's engine, which
follows Debian cron) over generated expressions in every syntax tickd accepts."""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from cronsim import CronSim, CronSimError
from hypothesis import assume, given, note, settings
from hypothesis import strategies as st

import tickd.scheduler.schedule.cron as cron_module
from tests.clock_changes import changes
from tests.properties import examples
from tickd.scheduler.model import CronSchedule, ValidationError
from tickd.scheduler.schedule.schedules import next_fire, validate

ZONES = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Sydney",
    "Pacific/Auckland",
    "Australia/Lord_Howe",  # a half-hour change
    "Asia/Kolkata",  # a half-hour offset, no changes
]
FIRES = 4


@dataclass(frozen=True)
class FieldRange:
    low: int
    high: int
    size: int  # distinct values: the longest step tickd takes
    names: tuple[str, ...] = ()  # names[i] is value i

    def name_of(self, value: int) -> str | None:
        return self.names[value] if value < len(self.names) and self.names[value] else None


SECOND = FieldRange(0, 59, 60)
MINUTE = FieldRange(0, 59, 60)
HOUR = FieldRange(0, 23, 24)
DAY = FieldRange(1, 31, 31)
MONTH = FieldRange(1, 12, 12, ("", *calendar.month_abbr[1:]))
WEEKDAY = FieldRange(0, 7, 7, ("Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"))
FIELDS = (SECOND, MINUTE, HOUR, DAY, MONTH, WEEKDAY)


def spelled(field: FieldRange, value: int) -> st.SearchStrategy[str]:
    """A value as a number or, where it has one, as a name in any case."""
    name = field.name_of(value)
    if name is None:
        return st.just(str(value))
    return st.sampled_from([str(value), name, name.upper(), name.lower()])


def value(field: FieldRange) -> st.SearchStrategy[str]:
    return st.integers(field.low, field.high).flatmap(lambda v: spelled(field, v))


@st.composite
def value_range(draw: st.DrawFn, field: FieldRange) -> str:
    low = draw(st.integers(field.low, field.high))
    # Equal ends (`9-9`) are a class of their own: croniter read them as the whole field.
    high = low if draw(st.booleans()) else draw(st.integers(low, field.high))
    return f"{draw(spelled(field, low))}-{draw(spelled(field, high))}"


def step(field: FieldRange) -> st.SearchStrategy[str]:
    return st.integers(1, field.size).map(lambda s: f"/{s}")


def term(field: FieldRange) -> st.SearchStrategy[str]:
    return st.one_of(
        value(field),
        value_range(field),
        st.tuples(st.just("*"), step(field)).map("".join),
        st.tuples(value_range(field), step(field)).map("".join),
        st.tuples(value(field), step(field)).map("".join),  # `5/15`: 5 to the end, every 15
    )


def plain_field(
    field: FieldRange, extra: st.SearchStrategy[str] | None = None
) -> st.SearchStrategy[str]:
    terms = term(field) if extra is None else st.one_of(term(field), extra)
    return st.one_of(st.just("*"), st.lists(terms, min_size=1, max_size=3).map(",".join))


def weekday_field() -> st.SearchStrategy[str]:
    nth = st.tuples(value(WEEKDAY), st.integers(1, 5)).map(lambda t: f"{t[0]}#{t[1]}")
    last = st.integers(0, 7).map(lambda d: f"{d}L")  # the last Friday: `5L`
    return st.one_of(
        plain_field(WEEKDAY), st.lists(st.one_of(nth, last), min_size=1, max_size=2).map(",".join)
    )


expressions = st.tuples(
    plain_field(SECOND),
    plain_field(MINUTE),
    plain_field(HOUR),
    plain_field(DAY, extra=st.just("L")),
    st.one_of(st.just("*"), plain_field(MONTH)),
    weekday_field(),
).map(" ".join)


@st.composite
def instants(draw: st.DrawFn, zone: str) -> datetime:
    """Any instant of 2026 to 2030, often a few hours from one of the zone's clock changes."""
    near = changes(zone)
    if len(near) > 0 and draw(st.booleans()):
        origin = draw(st.sampled_from(near)).at
        return origin + timedelta(seconds=draw(st.integers(-4 * 3600, 4 * 3600)))
    start = datetime(2026, 1, 1, tzinfo=UTC)
    micros = draw(st.sampled_from([0, 0, 500_000]))
    return start + timedelta(seconds=draw(st.integers(0, 5 * 365 * 86400)), microseconds=micros)


def expected(expr: str, zone: str, after: datetime) -> list[datetime]:
    """The documented rules on cronsim's calendar: cronsim says which wall-clock times the
    expression names, zoneinfo's folds place them in time.

    Every wall time fires at its first occurrence (fold=0), a time the clocks skipped not at all.
    Besides, for a named hour, a skipped time fires at the instant the offset before the change
    gives it (fold=0 again: RFC 5545); for a wildcard hour, a repeated time fires again at its
    second occurrence (fold=1). Those land among other times, so they are gathered on their own.
    """
    tz, expr = ZoneInfo(zone), as_cronsim_reads_it(expr)
    named_hour = not expr.split(" ")[2].startswith("*")
    found = placed(expr, tz, after, local_wall(after, tz), None, fold=0)
    for change in changes(zone):
        if change.at + abs(change.jump) <= after:
            continue
        if named_hour and change.jump > timedelta(0):
            skipped = local_wall(change.at, tz) - change.jump, local_wall(change.at, tz)
            found += placed(expr, tz, after, *skipped, fold=0)
        elif not named_hour and change.jump < timedelta(0):
            repeated = local_wall(change.at, tz), local_wall(change.at, tz) - change.jump
            found += placed(expr, tz, after, *repeated, fold=1)
    return sorted(set(found))[:FIRES]


def placed(
    expr: str, tz: ZoneInfo, after: datetime, wall: datetime, until: datetime | None, fold: int
) -> list[datetime]:
    """The first instants after `after` of the wall times cronsim names from `wall` on: all up to
    `until` if given, otherwise only times that exist."""
    found: list[datetime] = []
    for time in CronSim(expr, wall - timedelta(seconds=1)):
        if (until is not None and time >= until) or len(found) == FIRES:
            break
        instant = time.replace(tzinfo=tz, fold=fold).astimezone(UTC)
        exists = local_wall(instant, tz) == time
        if instant > after and (exists or until is not None):
            found.append(instant)
    return found


def local_wall(instant: datetime, tz: ZoneInfo) -> datetime:
    return instant.astimezone(tz).replace(tzinfo=None)


def cronsim_in_real_time(expr: str, zone: str, after: datetime) -> list[datetime]:
    """cronsim's own rule for a six-field expression: it ticks through real time, matching the
    wall clock. (In a zone whose clocks change by half an hour it misses times the clock shows:
    02:00 to 02:29 on Lord Howe's autumn night, for `* * */2 * * *`; so it is not the oracle.)"""
    times = CronSim(as_cronsim_reads_it(expr), after.astimezone(ZoneInfo(zone)))
    return [next(times).astimezone(UTC) for _ in range(FIRES)]


def as_cronsim_reads_it(expr: str) -> str:
    """cronsim reads a stepped equal range (`9-9/2`) as `9/2`, from 9 to the end of the field;
    POSIX cron, Vixie cron and tickd read it as 9. Written as 9, cronsim reads it as 9 too."""
    fields = expr.split(" ")
    for index, field in enumerate(FIELDS):
        fields[index] = ",".join(single(term, field) for term in fields[index].split(","))
    return " ".join(fields)


def single(term: str, field: FieldRange) -> str:
    ends, slash, _ = term.partition("/")
    low, dash, high = ends.partition("-")
    if slash and dash and number(low, field) == number(high, field):
        return low
    return term


def number(text: str, field: FieldRange) -> int:
    names = [n.upper() for n in field.names]
    return names.index(text.upper()) if text.upper() in names and text else int(text)


def tickd(expr: str, zone: str, after: datetime) -> list[datetime]:
    schedule = CronSchedule(expr=expr, timezone=zone)
    validate(schedule, job_name="j")
    found: list[datetime] = []
    current = after
    for _ in range(FIRES):
        fire = next_fire(schedule, current, job_name="j")
        assert fire is not None
        found.append(fire)
        current = fire
    return found


@settings(derandomize=True, deadline=None, max_examples=examples(1500))
@given(expr=expressions, zone=st.sampled_from(ZONES), data=st.data())
def test_tickd_fires_when_cronsim_does_in_every_field_syntax(
    expr: str, zone: str, data: st.DataObject
) -> None:
    after = data.draw(instants(zone))
    note(f"{expr!r} in {zone} after {after.isoformat()}")
    try:
        oracle = expected(expr, zone, after)
    except (CronSimError, StopIteration):
        oracle = []
    # A date no month has (the 31st of February), or none for fifty years (the fifth Sunday of
    # a February on a day divisible by three): the API refuses what never fires.
    assume(len(oracle) == FIRES)
    fires = tickd(expr, zone, after)
    assert fires == oracle
    if expr.split(" ")[2].startswith("*") and zone != "Australia/Lord_Howe":
        assert fires == cronsim_in_real_time(expr, zone, after)


# -- equal ranges -------------------------------------------------------------------------------


def with_field(index: int, text: str) -> str:
    """`text` in one field; the fields below it at their first value, those above `*`."""
    fields = [str(f.low) if i < index else "*" for i, f in enumerate(FIELDS)]
    fields[index] = text
    return " ".join(fields)


@st.composite
def equal_ranges(draw: st.DrawFn) -> tuple[int, str, str]:
    """A field, an equal range in it (maybe stepped, maybe in a list), and what it means."""
    index = draw(st.integers(0, len(FIELDS) - 1))
    field = FIELDS[index]
    n = draw(st.integers(field.low, field.high))
    ends = f"{draw(spelled(field, n))}-{draw(spelled(field, n))}"
    if draw(st.booleans()):
        ends += draw(step(field))
    other = draw(st.integers(field.low, field.high))
    if draw(st.booleans()):
        return index, f"{other},{ends}", f"{other},{n}"
    return index, ends, str(n)


@settings(derandomize=True, deadline=None, max_examples=examples(300))
@given(case=equal_ranges(), zone=st.sampled_from(ZONES), data=st.data())
def test_a_range_whose_ends_are_equal_is_that_one_value(
    case: tuple[int, str, str], zone: str, data: st.DataObject
) -> None:
    index, written, meant = case
    after = data.draw(instants(zone))
    expr, plain = with_field(index, written), with_field(index, meant)
    note(f"{expr!r} against {plain!r} in {zone} after {after.isoformat()}")
    assert tickd(expr, zone, after) == tickd(plain, zone, after)


# -- H: a value hashed from the job's name ------------------------------------------------------


@st.composite
def hash_forms(draw: st.DrawFn, field: FieldRange) -> str:
    """`H`, `H/step`, `H(low-high)`, `H(low-high)/step` as croniter took them (low below high;
    croniter's weeks run 0 to 6)."""
    top = 6 if field is WEEKDAY else field.high
    low = draw(st.integers(field.low, top - 1))
    ranged = f"H({low}-{draw(st.integers(low + 1, top))})"
    stepped = draw(st.integers(1, field.size).map(lambda s: f"/{s}"))
    return draw(st.sampled_from(["H", f"H{stepped}", ranged, f"{ranged}{stepped}"]))


job_names = st.from_regex(r"[a-z][a-z0-9-]{0,30}", fullmatch=True)


def spread_over_every_month(index: int, form: str) -> bool:
    """A bare `H` or `H/step` in the day of month: tickd keeps it to 1-28, croniter does not."""
    return FIELDS[index] is DAY and not form.upper().startswith("H(")


@settings(derandomize=True, deadline=None, max_examples=examples(300))
@given(index=st.integers(0, 5), name=job_names, data=st.data())
def test_hashed_fields_fire_where_they_fired_before_tickd_read_fields_itself(
    index: int, name: str, data: st.DataObject
) -> None:
    """Stored jobs keep their times: `H` resolves as croniter resolved it, but for the days of
    month a bare `H` spreads over."""
    form = data.draw(hash_forms(FIELDS[index]))
    assume(not spread_over_every_month(index, form))
    expr = with_field(index, form)
    after = data.draw(instants("UTC"))
    note(f"{expr!r} for {name!r} after {after.isoformat()}")
    before = croniter(expr, after, hash_id=name.encode(), second_at_beginning=True)
    schedule = CronSchedule(expr=expr, timezone="UTC")
    assert next_fire(schedule, after, job_name=name) == before.get_next(datetime)


def fires_in(year: int, expr: str, name: str) -> list[datetime]:
    schedule = CronSchedule(expr=expr, timezone="UTC")
    start = datetime(year, 1, 1, tzinfo=UTC) - timedelta(microseconds=1)
    end = datetime(year + 1, 1, 1, tzinfo=UTC)
    fires: list[datetime] = []
    fire = next_fire(schedule, start, job_name=name)
    while fire is not None and fire < end:
        fires.append(fire)
        fire = next_fire(schedule, fire, job_name=name)
    return fires


job_ids = st.uuids().map(str)


@settings(derandomize=True, deadline=None, max_examples=examples(200))
@given(name=st.one_of(job_names, job_ids, st.text(max_size=40)), year=st.integers(2026, 2040))
def test_a_job_spread_over_the_month_fires_every_month(name: str, year: int) -> None:
    """`H` in the day of month picks a day every month has (1-28, as Jenkins does): a monthly job
    never skips February or the 30-day months."""
    fires = fires_in(year, "0 0 0 H * *", name)
    assert [fire.month for fire in fires] == list(range(1, 13))
    assert len({fire.day for fire in fires}) == 1
    assert fires[0].day <= 28


@settings(derandomize=True, deadline=None, max_examples=examples(200))
@given(name=st.one_of(job_names, job_ids), step=st.integers(1, 31))
def test_a_stepped_hash_in_the_day_of_month_stays_in_days_every_month_has(
    name: str, step: int
) -> None:
    fires = fires_in(2026, f"0 0 0 H/{step} * *", name)
    days = {fire.day for fire in fires}
    assert days and max(days) <= 28
    assert len(fires) == 12 * len(days)


@settings(derandomize=True, deadline=None, max_examples=examples(300))
@given(name=st.one_of(job_names, job_ids), form=st.sampled_from(["H", "H/7", "H/10", "H/30"]))
def test_a_spread_day_keeps_the_days_croniter_gave_it_that_every_month_has(
    name: str, form: str
) -> None:
    """Stored jobs move only off the days some months lack: croniter's days from 1-28 stay."""
    expr = f"0 0 0 {form} * *"
    january = datetime(2026, 1, 1, tzinfo=UTC)
    start = january - timedelta(seconds=1)
    walk = croniter(expr, start, hash_id=name.encode(), second_at_beginning=True)
    before = {d.day for d in (walk.get_next(datetime) for _ in range(31)) if d.month == 1}
    now = {fire.day for fire in fires_in(2026, expr, name) if fire.month == 1}
    if min(before) <= 28:
        assert now == {day for day in before if day <= 28}
    else:
        assert now and max(now) <= 28


def test_a_hashed_day_range_keeps_the_days_it_names() -> None:
    """`H(29-31)` asks for the end of the month: it stays there, months without the day skip."""
    fires = fires_in(2026, "0 0 0 H(29-31) * *", "any")
    assert {fire.day for fire in fires} <= {29, 30, 31}
    assert len({fire.day for fire in fires}) == 1


def test_a_hashed_range_of_one_value_is_that_value() -> None:
    schedule = CronSchedule(expr="0 0 H(9-9) * * *", timezone="UTC")
    after = datetime(2026, 1, 1, tzinfo=UTC)
    assert next_fire(schedule, after, job_name="any") == datetime(2026, 1, 1, 9, tzinfo=UTC)


# -- the extensions tickd keeps: L and # --------------------------------------------------------


@settings(derandomize=True, deadline=None, max_examples=examples(100))
@given(
    year=st.integers(2026, 2040),
    month=st.integers(1, 12),
    weekday=st.integers(0, 6),
    nth=st.integers(1, 4),
)
def test_l_is_the_last_day_and_hash_the_nth_weekday_of_the_month(
    year: int, month: int, weekday: int, nth: int
) -> None:
    last_day = calendar.monthrange(year, month)[1]
    days = [
        d for d in range(1, last_day + 1) if (calendar.weekday(year, month, d) + 1) % 7 == weekday
    ]
    after = datetime(year, month, 1, tzinfo=UTC) - timedelta(seconds=1)

    def first(expr: str) -> datetime | None:
        return next_fire(CronSchedule(expr=expr, timezone="UTC"), after, job_name="j")

    assert first("0 0 0 L * *") == datetime(year, month, last_day, tzinfo=UTC)
    assert first(f"0 0 0 * * {weekday}#{nth}") == datetime(year, month, days[nth - 1], tzinfo=UTC)
    assert first(f"0 0 0 * * {weekday}L") == datetime(year, month, days[-1], tzinfo=UTC)
    assert first(f"0 0 0 * * L{weekday}") == datetime(year, month, days[-1], tzinfo=UTC)


# -- refused, naming the field ------------------------------------------------------------------

REFUSED_EXPRESSIONS = [
    ("0 */99 * * * *", "step 99 is longer than the field"),
    ("0 */61 * * * *", "step 61"),
    ("0 0 */25 * * *", "step 25"),
    ("0 */0 * * * *", "step '0'"),
    ("0 */x * * * *", "step 'x'"),
    ("0 30-10 * * * *", "runs backwards"),
    ("0 0 0 * * SAT-SUN", "SAT-7"),
    ("0 0 0 * DEC-JAN *", "runs backwards"),
    ("0 0 0 ? * *", "`?` is not cron"),
    ("0 0 0 * * ?", "`?` is not cron"),
    ("0 0 0 15W * *", "`W`"),
    ("0 0 0 LW * *", "`W`"),
    ("0 0 0 * * L", "last day of the month"),
    ("0 R * * * *", "`R` (random)"),
    ("0 R(0-10) * * * *", "`R` (random)"),
    ("0 0 0 * * 1#6", "1 to 5"),
    ("0 0 0 * * 1#0", "1 to 5"),
    ("0 0 0 * * 1,2#1", "mixes"),
    ("0 0 24 * * *", "out of range 0-23"),
    ("0 0 0 0 * *", "out of range 1-31"),
    ("0 0 0 * 13 *", "out of range 1-12"),
    ("0 0 0 * * 8", "out of range 0-7"),
    ("0 1,,2 * * * *", "empty list item"),
    ("0 0 H(5-2) * * *", "runs backwards"),
    ("0 0 H(5) * * *", "H(low-high)"),
    ("0 \uff15 * * * *", "not a minute value"),  # a full-width digit
    ("0 00000001 * * * *", "not a minute value"),
]


@pytest.mark.parametrize(("expr", "reason"), REFUSED_EXPRESSIONS)
def test_a_refused_expression_names_the_field_and_says_why(expr: str, reason: str) -> None:
    with pytest.raises(ValidationError) as raised:
        validate(CronSchedule(expr=expr, timezone="UTC"), job_name="j")
    assert raised.value.field == "schedule.expr"
    assert reason in raised.value.reason


@pytest.mark.parametrize(
    ("timezone", "reason"),
    [
        ("localtime", "not an IANA time zone name"),  # whatever the host's clock is set to
        ("/etc/localtime", "not an IANA"),
        ("/usr/share/zoneinfo/Europe/Berlin", "not an IANA"),
        ("../zoneinfo/UTC", "not an IANA"),
        ("posixrules", "not an IANA"),
        ("right/UTC", "not an IANA"),  # counts leap seconds
        ("posix/Europe/Berlin", "not an IANA"),
        ("europe/berlin", "did you mean 'Europe/Berlin'?"),
        ("", "not an IANA"),
    ],
)
def test_a_zone_must_be_an_iana_name(timezone: str, reason: str) -> None:
    with pytest.raises(ValidationError) as raised:
        validate(CronSchedule(expr="0 * * * * *", timezone=timezone), job_name="j")
    assert raised.value.field == "schedule.timezone"
    assert reason in raised.value.reason


@pytest.mark.parametrize("timezone", ["UTC", "Europe/Berlin", "US/Eastern", "Etc/GMT+5"])
def test_iana_names_and_their_links_are_accepted(timezone: str) -> None:
    validate(CronSchedule(expr="0 * * * * *", timezone=timezone), job_name="j")


def test_a_steady_schedule_reads_its_expression_once_not_at_every_fire(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A job on `* * * * * *` fires 86,400 times a day: croniter reads its text once (per
    thread), and every fire time is still the next second."""
    read: list[str] = []

    def reading(text: str, *args: Any, **kwargs: Any) -> croniter:
        read.append(text)
        return croniter(text, *args, **kwargs)

    monkeypatch.setattr(cron_module, "croniter", reading)
    schedule = CronSchedule(expr="* * * * * *", timezone="Europe/Berlin")
    start = datetime(2026, 3, 29, 0, 59, 30, tzinfo=UTC)  # across the spring-forward hour
    at = start
    for _ in range(100):
        fire = next_fire(schedule, at, job_name="steady")
        assert fire == at + timedelta(seconds=1)
        at = fire
    assert len(read) <= 1


def test_jobs_on_one_expression_read_it_once_not_once_a_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Thousands of jobs fire at the top of the minute on the same expression: without `H`,
    the job's name changes nothing, so the expression is read once for all of them (read once a
    job, past the cache's size every advance read it again). With `H`, each name is its own."""
    read: list[str] = []
    reading = cron_module._weekdays

    def counted(text: str, hash_seed: int) -> Any:
        read.append(text)
        return reading(text, hash_seed)

    monkeypatch.setattr(cron_module, "_weekdays", counted)
    plain = CronSchedule(expr="17 * * * * MON-FRI", timezone="UTC")
    after = datetime(2026, 12, 1, 9, 0, 0, tzinfo=UTC)
    for i in range(5000):
        assert next_fire(plain, after, job_name=f"job-{i}") == after.replace(second=17)
    assert len(read) <= 1
    hashed = CronSchedule(expr="H * * * * MON-FRI", timezone="UTC")
    fires = [next_fire(hashed, after, job_name=f"job-{i}") for i in range(50)]
    assert len({fire.second for fire in fires if fire is not None}) > 10
