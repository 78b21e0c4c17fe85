"""Times the `tickd` client commands print: in UTC unless --tz says otherwise, each labelled
with its zone, to the second; a zone that does not exist refused before anything is printed."""

from __future__ import annotations

import pytest

from tests.api.test_cli import NIGHTLY, Live

# The `tickd` command in a subprocess, against a real port: left out of `make quick`.
pytestmark = pytest.mark.slow


async def test_a_jobs_next_run_prints_in_utc_labelled_utc_by_default(live: Live) -> None:
    await live.post("/v1/jobs", NIGHTLY)

    shown = await live.tickd("jobs", "show", "nightly-ping")
    listed = await live.tickd("jobs", "list")

    assert shown.code == 0, shown.err
    assert "next run  2026-03-03 01:30:00 UTC" in shown.out
    assert "2026-03-03 01:30:00 UTC" in listed.out.splitlines()[1]


async def test_tz_europe_paris_shifts_every_time_and_labels_it_cet(live: Live) -> None:
    await live.post("/v1/jobs", NIGHTLY)

    shown = await live.tickd("jobs", "show", "nightly-ping", "--tz", "Europe/Paris")
    listed = await live.tickd("--tz", "Europe/Paris", "jobs", "list")

    assert shown.code == 0, shown.err
    assert "next run  2026-03-03 02:30:00 CET" in shown.out
    assert "UTC" not in shown.out.replace("(Europe/Berlin)", "")
    assert "2026-03-03 02:30:00 CET" in listed.out.splitlines()[1]


async def test_a_schedule_preview_labels_both_the_instant_and_the_schedules_wall_clock(
    live: Live,
) -> None:
    run = await live.tickd(
        "schedules", "preview", "--cron", "0 0 9 * * *", "--timezone", "Asia/Tokyo",
        "--after", "2026-12-06T00:00:00Z", "--count", "1", "--tz", "Europe/Paris",
    )  # fmt: skip

    assert run.code == 0, run.err
    header, row = run.out.splitlines()
    assert header.split()[:2] == ["AT", "IN"]
    assert row.split() == ["2026-12-07", "01:00:00", "CET", "2026-12-07", "09:00:00", "UTC+09:00"]


async def test_tz_mars_base_is_refused_naming_the_flag_and_prints_nothing_else(
    live: Live,
) -> None:
    await live.post("/v1/jobs", NIGHTLY)

    run = await live.tickd("jobs", "list", "--tz", "Mars/Base")

    assert run.code == 2
    assert run.out == ""
    assert run.err.splitlines() == [
        "tickd jobs list: error: --tz: no time zone 'Mars/Base'; give an IANA name (UTC, "
        "Europe/Paris) or local"
    ]
