"""Previews: the fire times a job will have, from a time of the client's choosing, with the clock
changes they cross marked."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, note, settings
from hypothesis import strategies as st

from tests.api.conftest import READ, Api
from tests.api.test_jobs_api import CRON_JOB
from tests.clock_changes import Change, changes, every_change
from tests.properties import examples
from tickd.api.schedules import preview
from tickd.scheduler.model import CronSchedule

LAST = datetime(2031, 1, 1, tzinfo=UTC)  # tests.clock_changes knows the changes until then
EXPRESSIONS = [
    "0 0 * * * *",
    "0 */20 * * * *",
    "0 30 2 * * *",
    "0 0 3 * * 0",
    "0 0 12 1 * *",
    "0 0 12 1 1 *",  # crosses two changes a year and comes back to the same UTC offset
]


@settings(derandomize=True, deadline=None, max_examples=examples(300))
@given(
    change=st.deferred(lambda: st.sampled_from(every_change())),
    expr=st.sampled_from(EXPRESSIONS),
    before=st.integers(1, 400 * 86400),
)
def test_the_mark_is_on_each_fire_time_that_crosses_a_clock_change(
    change: Change, expr: str, before: int
) -> None:
    after = max(change.at - timedelta(seconds=before), datetime(2026, 1, 1, tzinfo=UTC))
    note(f"{expr!r} in {change.zone} after {after.isoformat()}")
    times = preview(CronSchedule(expr=expr, timezone=change.zone), "j", after, 30).times
    starts = [after, *(t.at for t in times)]
    for since, fire in zip(starts, times, strict=False):
        if fire.at >= LAST:
            break
        crossed = any(since < c.at <= fire.at for c in changes(change.zone))
        assert fire.dst_transition == crossed, fire


async def create(api: Api, **overrides: Any) -> dict[str, Any]:
    status, body, _ = await api.call("POST", "/v1/jobs", json={**CRON_JOB, **overrides})
    assert status == 201, body
    created: dict[str, Any] = body
    return created


async def test_a_saved_jobs_preview_starts_where_the_client_says(api: Api) -> None:
    # Sydney's clocks go back at 03:00 on 5 April 2026 (16:00 UTC): an hourly job keeps firing
    # every hour through both passes of 02:00.
    schedule = {"kind": "cron", "expr": "0 0 * * * *", "timezone": "Australia/Sydney"}
    job = await create(api, schedule=schedule)
    path = f"/v1/jobs/{job['id']}/preview?count=4&after=2026-04-04T13:30:00Z"
    status, body, _ = await api.call("GET", path, token=READ)
    assert status == 200, body
    assert [(t["local"], t["dst_transition"]) for t in body["times"]] == [
        ("2026-04-05T01:00:00+11:00", False),
        ("2026-04-05T02:00:00+11:00", False),
        ("2026-04-05T02:00:00+10:00", True),
        ("2026-04-05T03:00:00+10:00", False),
    ]


async def test_a_preview_before_a_saved_schedule_shows_the_same_times(api: Api) -> None:
    schedule = {"kind": "cron", "expr": "0 */30 * * * *", "timezone": "Australia/Lord_Howe"}
    job = await create(api, schedule=schedule)
    after = "2026-04-04T14:20:00Z"
    request = {"schedule": schedule, "name": job["name"], "count": 5, "after": after}
    _, unsaved, _ = await api.call("POST", "/v1/schedules/preview", json=request, token=READ)
    path = f"/v1/jobs/{job['id']}/preview?count=5&after={after}"
    _, saved, _ = await api.call("GET", path, token=READ)
    assert saved == unsaved
    # Lord Howe goes back half an hour at 02:00: 01:30 and 01:59 come twice, real time passes.
    assert [t["local"][11:] for t in saved["times"]] == [
        "01:30:00+11:00",
        "01:30:00+10:30",
        "02:00:00+10:30",
        "02:30:00+10:30",
        "03:00:00+10:30",
    ]


async def test_a_preview_from_an_unreadable_time_is_refused_naming_it(api: Api) -> None:
    job = await create(api)
    status, body, _ = await api.call(
        "GET", f"/v1/jobs/{job['id']}/preview?after=yesterday", token=READ
    )
    assert status == 400
    assert [e["field"] for e in body["errors"]] == ["query.after"]


# The 00:30 of the second Sunday of March: Havana's clocks go from midnight to one that night
# every year since 2013, so the schedule last fired in 2012.
SKIPPED_EVERY_YEAR = {"kind": "cron", "expr": "0 30 */24 * 3 0#2", "timezone": "America/Havana"}


async def test_a_schedule_whose_time_the_clocks_now_skip_every_year_is_refused_naming_it(
    api: Api,
) -> None:
    """Its search looked for a next time, clock change after clock change, up to the year 9999
    (seconds on the loop every job shares) and then failed with a 500. Now it looks fifty
    years ahead: a 422 naming the expression, and nothing saved; a preview lists no time."""
    body = {**CRON_JOB, "schedule": SKIPPED_EVERY_YEAR}
    status, problem, _ = await api.call("POST", "/v1/jobs", json=body)
    assert status == 422, problem
    assert [e["field"] for e in problem["errors"]] == ["schedule.expr"]
    assert "never fires" in problem["detail"]
    assert (await api.call("GET", "/v1/jobs", token=READ))[1]["items"] == []
    request = {"schedule": SKIPPED_EVERY_YEAR, "count": 100}
    status, shown, _ = await api.call("POST", "/v1/schedules/preview", json=request, token=READ)
    assert (status, shown["times"]) == (200, []), shown


async def test_a_preview_ends_with_the_calendar_not_a_500(api: Api) -> None:
    request = {
        "schedule": {"kind": "cron", "expr": "0 0 0 * 2 1#5", "timezone": "Europe/Berlin"},
        "count": 100,
        "after": "8999-01-01T00:00:00Z",
    }
    status, shown, _ = await api.call("POST", "/v1/schedules/preview", json=request, token=READ)
    assert status == 200, shown
    times = [datetime.fromisoformat(t["at"]) for t in shown["times"]]
    assert times and all(t.month == 2 and t.day in (28, 29) for t in times)
    assert times[-1].year < 9999


def test_a_preview_lists_the_fire_times_of_the_next_hundred_years_at_most() -> None:
    """A hundred fire times of a date that recurs every 28 years (the fifth Monday of February)
    would walk 2,800 years of clock changes, a second on the loop for one request."""
    after = datetime(2026, 1, 1, tzinfo=UTC)
    schedule = CronSchedule(expr="0 0 0 * 2 1#5", timezone="Europe/Berlin")
    times = [t.at for t in preview(schedule, "j", after, 100).times]
    assert [t.year for t in times] == [2044, 2072, 2112]  # 2100 is no leap year
    assert len(preview(CronSchedule(expr="@yearly"), "j", after, 100).times) == 100
