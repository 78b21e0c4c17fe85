"""What a cron expression means, field by field, as POSIX cron (Vixie cron, cronie) reads it.

croniter reads some fields its own way: an equal range (`9-9`, `SUN-SUN`) as the whole field, a
reversed one (`30-10`) as wrapping round, `?` as `*`. So tickd reads each field itself into the
explicit set of values it names, and hands croniter only those values: croniter walks the calendar,
it no longer decides what an expression means.

Besides POSIX: `H` (a value hashed from the job's name, as croniter hashed it, except that a bare
`H` or `H/step` in the day-of-month field stays within 1-28, in every month), `L` in the
day-of-month field (the last day of the month), `N#K` (the K-th weekday N of the month, K 1 to 5)
and `NL` (the last weekday N of the month; croniter's `LN` too) in the day-of-week field. Refused,
with a reason: `?`, `W` (nearest weekday), `R` (random: a schedule must be the same every time it
is read).
"""

from __future__ import annotations

import binascii
import dataclasses
import functools
import threading
from dataclasses import dataclass
from datetime import datetime

from croniter import croniter
from croniter.croniter import CroniterBadDateError

from tickd.scheduler.model import ValidationError

FIELD_PATH = "schedule.expr"
# More digits than any field value needs; also keeps int() far from its digit limit.
MAX_VALUE_DIGITS = 4
NTH_WEEKDAYS = range(1, 6)  # `1#5`: the fifth Monday, in the months that have one


@dataclass(frozen=True)
class Field:
    name: str
    low: int
    high: int
    # The number of distinct values, the longest step that still means something.
    size: int
    names: tuple[str, ...] = ()
    # croniter's number for the field and its top value: `H` hashes with them, so that a job keeps
    # the fire times it had before tickd read fields itself.
    hash_index: int = 0
    hash_high: int = 0
    # The top value a bare `H` or `H/step` may pick, where the field's top values do not come every
    # cycle: a value croniter hashed above it is hashed again below it.
    hash_ceiling: int | None = None


MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
WEEKDAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")

SECOND = Field("second", 0, 59, 60, hash_index=5, hash_high=59)
MINUTE = Field("minute", 0, 59, 60, hash_index=0, hash_high=59)
HOUR = Field("hour", 0, 23, 24, hash_index=1, hash_high=23)
# `H` picks days from 1-28, as Jenkins does: every month has them, so a monthly job fires twelve
# times a year. `H(1-31)` still names 29 to 31 when asked for.
DAY = Field("day-of-month", 1, 31, 31, hash_index=2, hash_high=31, hash_ceiling=28)
MONTH = Field("month", 1, 12, 12, ("", *MONTH_NAMES), hash_index=3, hash_high=12)
# 0 and 7 are both Sunday, as in every cron: `5-7` is Friday to Sunday.
WEEKDAY = Field("day-of-week", 0, 7, 7, WEEKDAY_NAMES, hash_index=4, hash_high=6)
FIELDS = (SECOND, MINUTE, HOUR, DAY, MONTH, WEEKDAY)


class CronError(ValidationError):
    def __init__(self, field: Field, reason: str) -> None:
        super().__init__(FIELD_PATH, f"{field.name} field: {reason}")


@dataclass(frozen=True)
class Days:
    """The day-of-month or day-of-week field: plain values and the month-relative extras."""

    values: frozenset[int]
    last_day: bool = False  # `L` in the day of month
    nth: frozenset[tuple[int, int]] = frozenset()  # `5#2`: (weekday, n)
    last_weekdays: frozenset[int] = frozenset()  # `5L`: the last Friday

    @property
    def extras(self) -> bool:
        return self.last_day or bool(self.nth) or bool(self.last_weekdays)


@dataclass(frozen=True)
class Cron:
    """A six-field expression, read: the values each field allows."""

    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    days: Days
    months: frozenset[int]
    weekdays: Days
    # POSIX: when both day fields are restricted (neither starts with `*`), a day matching either
    # one fires; otherwise both must match.
    either_day: bool
    # The hour field names hours (does not start with `*`): the daylight-saving rules differ.
    named_hour: bool
    walkers: tuple[str, ...]  # what croniter is given: one expression, or one per day field

    def next_wall_time(self, after: datetime) -> datetime:
        """The first wall-clock time strictly after the naive `after` that the expression names.

        Raises CroniterBadDateError when no date matches (February 30th)."""
        # Whole seconds: croniter steps from the start of the second it is given.
        start = after.replace(microsecond=0)
        found: list[datetime] = []
        for text in self.walkers:
            try:
                found.append(walker(text).get_next(datetime, start_time=start))
            except CroniterBadDateError:
                continue  # one side of an either-day expression may name no date
        if not found:
            raise CroniterBadDateError("failed to find next date")
        return min(found)


# Reading an expression costs croniter several times what walking it does, and a steady load
# walks the same few expressions thousands of times a second: each thread keeps the walkers it
# made. A walker restarted at a time (`start_time`) keeps nothing of its earlier walks.
WALKERS_KEPT = 4096
_made = threading.local()


def walker(text: str) -> croniter:
    kept: dict[str, croniter] = _made.__dict__.setdefault("walkers", {})
    found = kept.get(text)
    if found is None:
        if len(kept) >= WALKERS_KEPT:
            kept.clear()
        found = kept[text] = croniter(text, second_at_beginning=True, day_or=False)
    return found


def parse(six: str, job_name: str) -> Cron:
    """Read an expression already in six fields (seconds first); `job_name` seeds `H`."""
    # Only `H` reads the name: without it, one reading serves every job of the expression, so
    # thousands of jobs on one expression share one cache entry. `THU` counts too: a spare entry
    # at most.
    return _parsed(six, job_name if "H" in six.upper() else "")


@functools.lru_cache(maxsize=4096)
def _parsed(six: str, job_name: str) -> Cron:
    texts = six.split(" ")
    hash_seed = binascii.crc32(job_name.encode()) & 0xFFFFFFFF
    seconds, minutes, hours = (
        _plain_values(texts[i], field, hash_seed) for i, field in enumerate(FIELDS[:3])
    )
    days = _days(texts[3], hash_seed)
    months = _plain_values(texts[4], MONTH, hash_seed)
    weekdays = _weekdays(texts[5], hash_seed)
    either_day = not texts[3].startswith("*") and not texts[5].startswith("*")
    named_hour = not texts[2].startswith("*")
    cron = Cron(seconds, minutes, hours, days, months, weekdays, either_day, named_hour, ())
    return dataclasses.replace(cron, walkers=_walkers(cron))


def _walkers(cron: Cron) -> tuple[str, ...]:
    clock = " ".join(
        _list(values, field)
        for values, field in (
            (cron.seconds, SECOND),
            (cron.minutes, MINUTE),
            (cron.hours, HOUR),
        )
    )
    months = _list(cron.months, MONTH)
    day, weekday = _day_list(cron.days), _weekday_list(cron.weekdays)
    if cron.either_day:
        return (f"{clock} {day} {months} *", f"{clock} * {months} {weekday}")
    return (f"{clock} {day} {months} {weekday}",)


def _list(values: frozenset[int], field: Field) -> str:
    if len(values) == field.size:
        return "*"
    return ",".join(str(v) for v in sorted(values))


def _day_list(days: Days) -> str:
    if len(days.values) == DAY.size:
        return "*"  # the last day among them
    return ",".join([str(v) for v in sorted(days.values)] + ["L"] * days.last_day)


def _weekday_list(weekdays: Days) -> str:
    if not weekdays.extras:
        return _list(weekdays.values, WEEKDAY)
    nth = [f"{day}#{n}" for day, n in sorted(weekdays.nth)]
    return ",".join(nth + [f"L{day}" for day in sorted(weekdays.last_weekdays)])


# -- one field --------------------------------------------------------------------------------


def _plain_values(text: str, field: Field, hash_seed: int) -> frozenset[int]:
    values: set[int] = set()
    for term in _terms(text, field):
        values.update(_term(term, field, hash_seed))
    return frozenset(values)


def _terms(text: str, field: Field) -> list[str]:
    terms = text.split(",")
    if "" in terms:
        raise CronError(field, f"{text!r} has an empty list item")
    return terms


def _days(text: str, hash_seed: int) -> Days:
    values: set[int] = set()
    last_day = False
    for term in _terms(text, DAY):
        if term.upper() == "L":
            last_day = True
        elif "W" in term.upper() or term == "?":
            raise CronError(DAY, _unsupported(term))
        else:
            values.update(_term(term, DAY, hash_seed))
    return Days(frozenset(values), last_day=last_day)


def _weekdays(text: str, hash_seed: int) -> Days:
    values: set[int] = set()
    nth: set[tuple[int, int]] = set()
    last: set[int] = set()
    for term in _terms(text, WEEKDAY):
        if "#" in term:
            day, _, n = term.partition("#")
            nth.add((_weekday(day), _nth(n)))
        elif term.upper().endswith("L") and term.upper() != "L":
            last.add(_weekday(term[:-1]))
        elif term.upper().startswith("L") and term.upper() != "L":
            last.add(_weekday(term[1:]))  # croniter's spelling, which stored jobs may have
        elif term.upper() in ("L", "?"):
            raise CronError(WEEKDAY, _unsupported(term))
        else:
            values.update(v % 7 for v in _term(term, WEEKDAY, hash_seed))
    if (nth or last) and values:
        raise CronError(
            WEEKDAY, f"{text!r} mixes plain weekdays with `#` or `L` ones; use one kind"
        )
    return Days(frozenset(values), nth=frozenset(nth), last_weekdays=frozenset(last))


def _weekday(text: str) -> int:
    return _value(text, WEEKDAY) % 7


def _nth(text: str) -> int:
    n = int(text) if _is_number(text) else 0
    if n not in NTH_WEEKDAYS:
        raise CronError(WEEKDAY, f"`#{text}`: the week in the month must be 1 to 5")
    return n


def _unsupported(term: str) -> str:
    if term == "?":
        return "`?` is not cron; write `*`"
    if term.upper() == "L":
        return "`L` alone is the last day of the month, in the day-of-month field"
    return f"{term!r}: `W` (nearest weekday) is not supported"


def _term(term: str, field: Field, hash_seed: int) -> range:
    """`*`, `5`, `1-5`, `MON`, each with an optional `/step`; or `H`, `H(0-29)`, `H/15`."""
    base, slash, step_text = term.partition("/")
    step = _step(step_text, field) if slash else None
    if base.upper().startswith("H"):
        return _hashed(base, step, field, hash_seed)
    if base.upper().startswith("R"):  # no field value starts with R
        raise CronError(field, "`R` (random) is not supported; `H` spreads jobs and stays put")
    if base == "*":
        return range(field.low, field.high + 1, step or 1)
    low_text, dash, high_text = base.partition("-")
    low = _value(low_text, field)
    if dash:
        high = _value(high_text, field)
        if high < low:
            raise CronError(field, _reversed(base, field))
    else:
        # `5/15` is 5, 20, 35, 50: from the value to the end of the field.
        high = low if step is None else field.high
    return range(low, high + 1, step or 1)


def _reversed(base: str, field: Field) -> str:
    hint = " (Sunday is also 7: `SAT-7`)" if field is WEEKDAY else ""
    return f"range {base!r} runs backwards; cron ranges do not wrap round{hint}"


def _step(text: str, field: Field) -> int:
    step = int(text) if _is_number(text) else -1
    if step < 1:
        raise CronError(field, f"step {text!r} must be a whole number from 1")
    if step > field.size:
        raise CronError(
            field,
            f"step {step} is longer than the field, which has {field.size} values "
            f"({field.low}-{field.high}): it would fire once a cycle, not every {step}",
        )
    return step


def _value(text: str, field: Field) -> int:
    if text and text.upper() in field.names:
        return field.names.index(text.upper())
    if not _is_number(text):
        raise CronError(field, f"{text!r} is not a {field.name} value")
    value = int(text)
    if not field.low <= value <= field.high:
        raise CronError(field, f"{value} is out of range {field.low}-{field.high}")
    return value


def _is_number(text: str) -> bool:
    return 0 < len(text) <= MAX_VALUE_DIGITS and text.isascii() and text.isdigit()


def _hashed(base: str, step: int | None, field: Field, hash_seed: int) -> range:
    """`H` as croniter hashes it (crc32 of the job name, shifted by the field's number), kept
    to the field's ceiling when it has one."""
    if base.upper() == "H":
        low, high = field.low, field.hash_high
        ceiling = field.hash_ceiling or high
    else:
        low, high = _hash_range(base, field)
        ceiling = high
    # One value, or a start drawn from the first period and then every `step` to the end.
    drawn_to = high if step is None else min(low + step - 1, high)
    start = _hash(hash_seed, field, low, drawn_to)
    if start > ceiling:
        start = _hash(hash_seed, field, low, min(drawn_to, ceiling))
    return range(start, start + 1) if step is None else range(start, ceiling + 1, step)


def _hash_range(base: str, field: Field) -> tuple[int, int]:
    inner = base[2:-1] if base.upper().startswith("H(") and base.endswith(")") else ""
    low_text, dash, high_text = inner.partition("-")
    if not dash:
        raise CronError(field, f"{base!r}: write H, H(low-high), H/step or H(low-high)/step")
    low, high = _value(low_text, field), _value(high_text, field)
    if high < low:
        raise CronError(field, _reversed(inner, field))
    return low, high


def _hash(hash_seed: int, field: Field, low: int, high: int) -> int:
    return ((hash_seed >> field.hash_index) % (high - low + 1)) + low
