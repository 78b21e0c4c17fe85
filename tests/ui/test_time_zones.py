"""Times on the dashboard, in Chromium set to New York's zone: every absolute time shown in one
zone and labelled with it (UTC unless chosen otherwise), its column or term naming the zone, its
tooltip the instant in UTC; a switch in the header between UTC, the browser's zone and, on a
job's page, the job's own zone, remembered after a reload.

Leaves var/screenshots/time-zones-<page>-<width>-<scheme>.png behind, to be looked at.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import pytest
from playwright.async_api import Browser, Page, expect

from tests.conftest import T0, Harness, make_job
from tests.ui.conftest import _is_error
from tests.ui.test_dashboard import seed_last_hour, sign_in
from tests.ui.test_run_page import seed as seed_runs
from tickd.scheduler.model import CronSchedule, Job

SCREENSHOTS = Path(__file__).resolve().parents[2] / "var" / "screenshots"
BROWSER_ZONE = "America/New_York"
PHONE = 375
LAPTOP = 1280
Scheme = Literal["light", "dark"]
SETTINGS = [(PHONE, "light"), (PHONE, "dark"), (LAPTOP, "light"), (LAPTOP, "dark")]
# Tokyo has no abbreviation in English: Chromium names it by its offset.
TOKYO = r"(?:JST|UTC\+9)"


@pytest.fixture
async def in_new_york(browser: Browser, request: pytest.FixtureRequest) -> AsyncIterator[Page]:
    """A tab whose browser runs in New York's zone, of the given width and colour scheme;
    failing the test on any script error."""
    setting: tuple[int, Scheme] = getattr(request, "param", (LAPTOP, "light"))
    width, scheme = setting
    context = await browser.new_context(
        viewport={"width": width, "height": 800}, color_scheme=scheme, timezone_id=BROWSER_ZONE
    )
    errors: list[Any] = []
    tab = await context.new_page()
    tab.on("pageerror", lambda error: errors.append(error))
    tab.on("console", lambda m: errors.append(m.text) if _is_error(m) else None)
    try:
        yield tab
    finally:
        await context.close()
    assert not errors, errors


async def seed_tokyo(harness: Harness) -> Job:
    """A job at 09:00 every day in Tokyo: next at 2026-03-03 09:00 JST, 00:00 UTC."""
    harness.clock.set(T0)
    job = make_job(
        "tokyo.report",
        "ping",
        params={"url": "https://reports.example/tokyo"},
        schedule=CronSchedule(expr="0 0 9 * * *", timezone="Asia/Tokyo"),
        next_run_at=datetime(2026, 3, 3, 0, 0, tzinfo=UTC),
    )
    await harness.store.insert_job(job)
    return job


def facts_row(page: Page, term: str) -> Any:
    return page.locator("dl.facts dt", has_text=term)


async def test_the_now_page_labels_its_times_utc_and_the_switch_to_local_outlives_a_reload(
    daemon: tuple[Harness, str], in_new_york: Page
) -> None:
    harness, url = daemon
    page = in_new_york
    harness.clock.set(T0)
    await seed_last_hour(harness)
    await sign_in(page, url)
    window = page.get_by_text("runs due since")

    await expect(window).to_contain_text("since 2026-03-02 08:00:00 UTC; refreshed 09:00 UTC.")
    switch = page.get_by_label("Show times in")
    await expect(switch).to_have_value("utc")

    await switch.select_option("local")
    await expect(window).to_contain_text("since 2026-03-02 03:00:00 EST; refreshed 04:00 EST.")
    await page.reload()
    await expect(page.get_by_text("runs due since")).to_contain_text("03:00:00 EST")
    await expect(page.get_by_label("Show times in")).to_have_value("local")
    await expect(page.get_by_label("Show times in")).to_contain_text(f"Local ({BROWSER_ZONE})")


async def test_a_job_page_shows_its_times_in_utc_local_or_the_jobs_own_zone_labelled(
    daemon: tuple[Harness, str], in_new_york: Page
) -> None:
    harness, url = daemon
    page = in_new_york
    job = await seed_tokyo(harness)
    await sign_in(page, url)
    await page.evaluate(f"location.hash = '#/jobs/{job.id}'")
    next_run = page.locator("dl.facts dd").nth(1)
    fire_times = page.get_by_test_id("fire-times").locator("li")

    # UTC by default, the term and each time labelled, the instant in UTC on hover.
    await expect(next_run).to_contain_text("2026-03-03 00:00:00 UTC")
    await expect(facts_row(page, "next run")).to_have_text("next run (UTC)")
    await expect(fire_times.first).to_have_text("2026-03-03 00:00:00 UTC")
    await expect(fire_times.first.locator("span")).to_have_attribute(
        "title", "2026-03-03T00:00:00Z"
    )

    # The browser's zone: New York's evening before.
    await page.get_by_label("Show times in").select_option("local")
    await expect(next_run).to_contain_text("2026-03-02 19:00:00 EST")
    await expect(facts_row(page, "next run")).to_have_text("next run (EST)")
    await expect(fire_times.first.locator("span")).to_have_attribute(
        "title", "2026-03-03T00:00:00Z"
    )

    # The job's own zone: 09:00 in Tokyo, as its schedule says.
    await page.get_by_label("Show times in").select_option("job")
    await expect(page.get_by_label("Show times in")).to_contain_text("Job's zone (Asia/Tokyo)")
    await expect(next_run).to_contain_text(re.compile(rf"2026-03-03 09:00:00 {TOKYO}"))
    await expect(fire_times.nth(1)).to_have_text(re.compile(rf"^2026-03-04 09:00:00 {TOKYO}$"))
    await expect(facts_row(page, "next run")).to_have_text(re.compile(rf"^next run \({TOKYO}\)$"))
    await page.reload()
    await expect(next_run).to_contain_text(re.compile(rf"2026-03-03 09:00:00 {TOKYO}"))

    # Elsewhere a job's zone means nothing: UTC, and said so.
    await page.get_by_role("link", name="Now", exact=True).click()
    await expect(page.get_by_text("runs due since")).to_contain_text("refreshed 09:00 UTC.")


async def test_a_run_page_labels_its_terms_and_attempt_columns_with_the_zone(
    daemon: tuple[Harness, str], in_new_york: Page
) -> None:
    harness, url = daemon
    page = in_new_york
    _, retried, _, _ = await seed_runs(harness)  # its first attempt at 08:55 UTC
    await sign_in(page, url)
    await page.evaluate(f"location.hash = '#/runs/{retried.id}'")
    attempts = page.get_by_test_id("attempts")

    await expect(page.locator("h1")).to_contain_text("Run of 2026-03-02 08:55:00 UTC")
    await expect(facts_row(page, "scheduled")).to_have_text("scheduled (UTC)")
    await expect(attempts.locator("th").nth(1)).to_have_text("started (UTC)")
    first_start = attempts.locator("tbody tr").first.locator("td").nth(1)
    await expect(first_start).to_have_text("2026-03-02 08:55:00 UTC")
    await expect(first_start).to_have_attribute("title", "2026-03-02T08:55:00Z")

    await page.get_by_label("Show times in").select_option("local")
    await expect(page.locator("h1")).to_contain_text("Run of 2026-03-02 03:55:00 EST")
    await expect(attempts.locator("th").nth(1)).to_have_text("started (EST)")
    await expect(first_start).to_have_text("2026-03-02 03:55:00 EST")
    await expect(first_start).to_have_attribute("title", "2026-03-02T08:55:00Z")


@pytest.mark.parametrize("in_new_york", SETTINGS, indirect=True, ids=lambda s: f"{s[0]}-{s[1]}")
async def test_the_zone_switch_and_labelled_times_fit_the_screen_in_light_and_dark(
    daemon: tuple[Harness, str], in_new_york: Page
) -> None:
    harness, url = daemon
    page = in_new_york
    width = page.viewport_size["width"] if page.viewport_size else 0
    dark = await page.evaluate("matchMedia('(prefers-color-scheme: dark)').matches")
    scheme = "dark" if dark else "light"
    await seed_last_hour(harness)
    job = await seed_tokyo(harness)
    _, retried, _, _ = await seed_runs(harness)
    await sign_in(page, url)
    await page.get_by_label("Show times in").select_option("local")

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    pages = {
        "now": ("#/now", page.get_by_text("runs due since")),
        "job": (f"#/jobs/{job.id}", page.get_by_test_id("fire-times")),
        "run": (f"#/runs/{retried.id}", page.get_by_test_id("attempts")),
    }
    for name, (hash_, ready) in pages.items():
        await page.evaluate(f"location.hash = {hash_!r}")
        await expect(ready).to_contain_text("EST")
        await expect(page.get_by_label("Show times in")).to_be_visible()
        await page.screenshot(
            path=SCREENSHOTS / f"time-zones-{name}-{width}-{scheme}.png", full_page=True
        )
        width_used: int = await page.evaluate("document.documentElement.scrollWidth")
        assert width_used <= width, f"{name} is wider than {width} px"
