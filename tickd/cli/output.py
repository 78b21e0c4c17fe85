"""What the client commands print: tables, fields, the API's JSON (--json), problem details,
and the API's values in a few characters (times, durations, schedules)."""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, tzinfo
from typing import TYPE_CHECKING, Any, TextIO
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from tickd.api.safejson import encodable

if TYPE_CHECKING:
    from pydantic import BaseModel

    from tickd.client import ApiError

Json = dict[str, Any]


def dumped(model: BaseModel) -> Json:
    """The API's answer as the JSON it was sent in: what --json prints and the views read."""
    return model.model_dump(mode="json")


def encodable_output() -> None:
    """stdout and stderr write a character UTF-8 cannot encode (a lone surrogate in what a
    server sent) as its escape, rather than stop the command halfway through its output."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")


def print_json(value: Any) -> None:
    # Escaped before it is written: a `\ud800` the stream wrote would read as JSON's escape.
    print(json.dumps(encodable(value), indent=2, ensure_ascii=False))


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, empty: str) -> None:
    if not rows:
        print(empty)
        return
    rows = [[terminal_text(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]
    for row in [headers, *rows]:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )


def print_fields(fields: Sequence[tuple[str, str]]) -> None:
    width = max(len(name) for name, _ in fields)
    for name, value in fields:
        print(f"{name.ljust(width)}  {terminal_text(value)}")


def print_fire_times(preview: Json, args: argparse.Namespace) -> None:
    if args.json:
        print_json(preview)
        return
    rows = [
        [
            when(t.get("at")),
            wall_clock_text(t.get("local")),
            "DST change" if t.get("dst_transition") else "",
        ]
        for t in preview.get("times") or []
    ]
    print_table(("AT", "IN THE SCHEDULE'S ZONE", ""), rows, empty="No fire times.")


def report_problem(problem: ApiError, *, as_json: bool, out: TextIO | None = None) -> None:
    """As the API sent it, on `out` (stderr): its JSON with --json; else the title, the detail,
    each field."""
    out = out or sys.stderr
    if as_json:
        print(json.dumps(problem.problem.model_dump(mode="json", exclude_none=True)), file=out)
        return
    head = f"tickd: {problem.status} {problem.title}"
    errors = [(e.field, plain_reason(e.reason)) for e in problem.errors]
    detail = plain_reason(problem.detail) if problem.detail else None
    # The detail of a validation problem is its errors again, joined: each is printed once.
    listed = detail and any(reason in detail for _, reason in errors)
    print(f"{head}: {detail}" if detail and not listed else head, file=out)
    for field, reason in errors:
        print(f"  {field}: {reason}", file=out)


def plain_reason(text: str) -> str:
    """A reason without the "Value error, " pydantic puts before a validator's own words."""
    return _PYDANTIC_PREFIX.sub("", text)


_PYDANTIC_PREFIX = re.compile(r"(?:(?<=^)|(?<=: )|(?<=; ))(?:Value|Assertion) error, ")


# Characters a terminal acts on rather than shows: C0 and C1 controls (ESC starts a sequence that
# can recolour, retitle or rewrite the screen), DEL, and the bidirectional overrides and
# isolates, which reorder what is shown.
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def terminal_text(text: str) -> str:
    """`text` as a terminal shows it and does nothing else: each control character as its
    escape (`\\x1b`, `\\n`), so that a server's or a handler's text cannot move the cursor,
    change colours or hide what follows."""
    return _UNSAFE.sub(lambda found: found.group().encode("unicode_escape").decode(), text)


def terminal_lines(text: str) -> str:
    """A text of several lines (a traceback) for a terminal: its line breaks kept, every other
    control character escaped."""
    return "\n".join(terminal_text(line) for line in text.splitlines())


ERROR_CHARS = 60


def error_text(error: Json | None, width: int = ERROR_CHARS) -> str:
    """An execution's error in a table's cell: its type and the first line of its message, cut
    to `width` characters (an ellipsis marks the cut), escaped for a terminal; "-" without one."""
    if not error:
        return "-"
    message = str(error.get("message") or "")
    first = next((line.strip() for line in message.splitlines() if line.strip()), "")
    text = terminal_text(f"{error.get('type')}: {first}" if first else str(error.get("type")))
    return text if len(text) <= width else text[: width - 1] + "…"


# -- values ---------------------------------------------------------------------------------------


def schedule_text(schedule: Json) -> str:
    kind = schedule.get("kind")
    if kind == "cron":
        zone = schedule.get("timezone") or "UTC"
        return f"cron {schedule.get('expr')}" + ("" if zone == "UTC" else f" ({zone})")
    if kind == "interval":
        return f"every {seconds_text(schedule.get('every_seconds'))}"
    if kind == "once":
        return f"once {when(schedule.get('at'))}"
    return json.dumps(schedule)


def seconds_text(seconds: Any) -> str:
    """60 -> 1m, 5400 -> 1h30m, 0.5 -> 0.5s."""
    if not isinstance(seconds, int | float):
        return "-"
    if seconds < 60:
        return f"{seconds:g}s"
    rest = round(seconds)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def duration_text(seconds: Any) -> str:
    """A measured time as people read it: 0.001342 -> 1.3 ms, 2.5 -> 2.5 s, 5400 -> 1h30m."""
    if not isinstance(seconds, int | float):
        return "-"
    if seconds < 1:
        millis = seconds * 1000
        return f"{millis:.1f} ms" if millis < 100 else f"{millis:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    return seconds_text(seconds)


def millis_text(millis: Any) -> str:
    if not isinstance(millis, int | float):
        return "-"
    if millis < 1000:
        return f"{millis:.0f}ms"
    if millis < 60_000:
        return f"{millis / 1000:.2f}s"
    return seconds_text(millis / 1000)


# -- times ----------------------------------------------------------------------------------------

LOCAL_ZONE = "local"


class UnknownZone(ValueError):
    """A --tz that names no time zone."""


_shown_zone: tzinfo | None = UTC  # None: the machine's own zone


def show_times_in(name: str | None) -> None:
    """Every time the command prints, in the zone `name` (an IANA name, or `local` for the
    machine's own zone); UTC, as the API and the logs have it, when `name` is None."""
    global _shown_zone
    _shown_zone = zone_named(name)


def zone_named(name: str | None) -> tzinfo | None:
    if name is None:
        return UTC
    if name.strip().lower() == LOCAL_ZONE:
        return None
    try:
        return ZoneInfo(name.strip())
    except (ZoneInfoNotFoundError, ValueError):
        raise UnknownZone(
            f"--tz: no time zone {name!r}; give an IANA name (UTC, Europe/Paris) or {LOCAL_ZONE}"
        ) from None


def when(value: Any) -> str:
    """An API time as people read it, in the zone --tz chose and labelled with it, to the
    second: 2026-03-02 01:30:00 UTC, 2026-03-02 02:30:00 CET."""
    if not isinstance(value, str) or not value:
        return "-"
    try:
        instant = datetime.fromisoformat(value)
    except ValueError:
        return value
    if instant.tzinfo is None:  # the API always sends an offset; a bare time is UTC's
        instant = instant.replace(tzinfo=UTC)
    return wall_clock(instant.astimezone(_shown_zone))


def wall_clock(moment: datetime) -> str:
    """2026-03-02 02:30:00 CET: 24 hours, the zone's abbreviation (or its offset) after."""
    return f"{moment:%Y-%m-%d %H:%M:%S} {moment.tzname() or moment.strftime('%z')}"


def wall_clock_text(value: Any) -> str:
    """A wall-clock time the API sends with its offset (a fire time in its schedule's zone),
    as `wall_clock` prints it: 2026-03-02 10:30:00 UTC+01:00."""
    if not isinstance(value, str) or not value:
        return "-"
    try:
        return wall_clock(datetime.fromisoformat(value))
    except ValueError:
        return value
