"""Previews: the fire times a job will have, from a time of the client's choosing, with the clock
changes they cross marked."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, note, settings
from hypothesis import strategies as st

from api.schedules import preview
from scheduler.model import CronSchedule
from tests.api.conftest import READ, Api
from tests.api.test_jobs_api import CRON_JOB
from tests.clock_changes import Change, changes, every_change

LAST = datetime(2031, 1, 1, tzinfo=UTC)  # tests.clock_changes knows the changes until then
EXPRESSIONS = [
    "0 0 * * * *",
    "0 */20 * * * *",
    "0 30 2 * * *",
    "0 0 3 * * 0",
    "0 0 12 1 * *",
    "0 0 12 1 1 *",  # crosses two changes a year and comes back to the same UTC offset
]


@settings(derandomize=True, deadline=None, max_examples=300)
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
