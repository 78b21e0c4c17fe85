"""The dashboard's actions on a job and its runs, as an operator uses them: delete a job after a
question naming it (never one changed since the page was read), backfill a past range and see
how many runs were queued (a refusal names the input), list the runs of every job filtered by
status, handler and time (the filters in the address) a page at a time, and page past a job's
last 100 runs. An error shows as its type and first line, as text, never markup.

Leaves var/screenshots/runs-<width>-<scheme>.png and job-actions-<width>-<scheme>.png behind,
to be looked at."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import parse_qs

import pytest
from playwright.async_api import Locator, Page, expect

from tests.conftest import T0, Harness, make_job
from tests.ui.test_phone_night_keys import SCREENSHOTS, SETTINGS, document_width, themed
from tickd.scheduler.model import CronSchedule, Execution, ExecutionError, Job, Status

__all__ = ["themed"]

EVERY_TEN_MINUTES = CronSchedule(expr="0 */10 * * * *")
HOSTILE = ExecutionError(
    type="ValueError", message='bad row <img src=x onerror="alert(1)"> in feed\nrow 2 of 9'
)


def run_of(
    job: Job,
    minutes_ago: int,
    status: Status,
    error: ExecutionError | None = None,
    attempts: int = 1,
) -> Execution:
    at = T0 - timedelta(minutes=minutes_ago)
    return Execution(
        job_id=job.id,
        job_name=job.name,
        handler=job.handler,
        scheduled_at=at,
        status=status,
        started_at=at + timedelta(seconds=1),
        finished_at=at + timedelta(seconds=3),
        duration_ms=2000,
        attempts=attempts,
        error=error,
        owner="tickd-7f3a:4121",
    )


async def seed(harness: Harness) -> tuple[Job, Job]:
    """reports.daily (ping) succeeds; sync.partner-feed (boom) fails now and then, once with
    markup in its error."""
    harness.clock.set(T0)
    reports = make_job(
        "reports.daily",
        "ping",
        schedule=EVERY_TEN_MINUTES,
        params={"url": "https://reports.example/"},
    )
    feed = make_job("sync.partner-feed", "boom", schedule=EVERY_TEN_MINUTES)
    for job in (reports, feed):
        await harness.store.insert_job(job)
    await harness.store.insert_executions(
        [
            run_of(reports, 5, Status.SUCCESS),
            run_of(feed, 6, Status.FAILED, error=HOSTILE, attempts=3),
            run_of(reports, 65, Status.SUCCESS),
            run_of(feed, 66, Status.SUCCESS),
            run_of(
                feed,
                126,
                Status.TIMEOUT,
                error=ExecutionError(type="TimeoutError", message="ran past 30 s"),
            ),
        ]
    )
    return reports, feed


def rows(page: Page, testid: str = "runs") -> Locator:
    return page.get_by_test_id(testid).locator("tbody tr[data-status]")


def address_query(page: Page) -> dict[str, list[str]]:
    hash_ = page.url.partition("#")[2]
    return parse_qs(hash_.partition("?")[2])


async def test_a_job_is_deleted_after_a_question_naming_it(
    open_daemon: tuple[Harness, str], page: Page
) -> None:
    harness, url = open_daemon
    reports, _ = await seed(harness)
    await page.goto(f"{url}/ui#/jobs/{reports.id}")
    await page.get_by_role("button", name="Delete", exact=True).click()
    question = page.get_by_role("alertdialog")
    await expect(question).to_contain_text("Delete the job reports.daily?")
    await question.get_by_role("button", name="Delete reports.daily").click()
    await expect(page.locator("#notices")).to_contain_text("reports.daily: deleted")
    await expect(page.locator("[data-nav=jobs]")).to_have_class("active")
    assert page.url.endswith("#/jobs")
    assert await harness.store.get_job(reports.id) is None


async def test_a_job_changed_since_its_page_was_read_is_not_deleted(
    open_daemon: tuple[Harness, str], page: Page
) -> None:
    harness, url = open_daemon
    reports, _ = await seed(harness)
    await page.goto(f"{url}/ui#/jobs/{reports.id}")
    await page.get_by_role("button", name="Delete", exact=True).click()
    changed = await page.request.patch(f"{url}/v1/jobs/{reports.id}", data={"timeout_seconds": 120})
    assert changed.ok, await changed.text()
    await page.get_by_role("alertdialog").get_by_role("button", name="Delete reports.daily").click()
    refusal = page.get_by_test_id("delete-confirm").get_by_role("alert")
    await expect(refusal).to_contain_text("reports.daily was not deleted: it changed since")
    job = await harness.store.get_job(reports.id)
    assert job is not None and job.timeout_seconds == 120


async def test_a_refresh_keeps_the_delete_question_open_and_the_range_typed(
    open_daemon: tuple[Harness, str], page: Page
) -> None:
    harness, url = open_daemon
    reports, _ = await seed(harness)
    await page.clock.install()
    await page.goto(f"{url}/ui#/jobs/{reports.id}")
    await page.get_by_role("button", name="Delete", exact=True).click()
    backfill = page.get_by_test_id("backfill")
    await backfill.get_by_label("From (UTC)").fill("2026-03-02T07:00:00")
    await harness.store.insert_executions([run_of(reports, 1, Status.SUCCESS)])
    await page.clock.run_for(6_000)  # past the page's refresh
    await expect(rows(page, "executions")).to_have_count(3)
    await expect(page.get_by_role("alertdialog")).to_contain_text("Delete the job reports.daily?")
    await expect(backfill.get_by_label("From (UTC)")).to_have_value("2026-03-02T07:00")


async def test_a_past_range_is_previewed_then_backfilled_and_the_count_shown(
    open_daemon: tuple[Harness, str], page: Page
) -> None:
    harness, url = open_daemon
    reports, _ = await seed(harness)
    await page.goto(f"{url}/ui#/jobs/{reports.id}")
    backfill = page.get_by_test_id("backfill")
    await backfill.get_by_label("From (UTC)").fill("2026-03-02T07:00:00")
    await backfill.get_by_label("Until (UTC)").fill("2026-03-02T08:00:00")
    await backfill.get_by_role("button", name="Preview").click()
    outcome = page.get_by_test_id("backfill-outcome")
    # 07:00 to 07:50, ten minutes apart; the run of 07:55 is no occurrence of the schedule.
    await expect(outcome).to_have_text("6 occurrences would be queued.")
    assert await harness.store.count_pending_requests(reports.id, reason="backfill") == 0

    await backfill.get_by_role("button", name="Queue runs").click()
    await expect(outcome).to_have_text("Queued 6 occurrences.")
    assert await harness.store.count_pending_requests(reports.id, reason="backfill") == 6


async def test_a_backfill_into_the_future_is_refused_naming_until(
    open_daemon: tuple[Harness, str], page: Page
) -> None:
    harness, url = open_daemon
    reports, _ = await seed(harness)
    await page.goto(f"{url}/ui#/jobs/{reports.id}")
    backfill = page.get_by_test_id("backfill")
    await backfill.get_by_label("From (UTC)").fill("2026-03-02T08:00:00")
    await backfill.get_by_label("Until (UTC)").fill("2026-03-02T10:00:00")
    await backfill.get_by_role("button", name="Queue runs").click()
    await expect(page.get_by_test_id("backfill-outcome")).to_contain_text(
        "Not queued. Until: must not be in the future"
    )
    await expect(backfill.locator(".field.invalid")).to_have_attribute("data-field", "end")
    assert await harness.store.count_pending_requests(reports.id, reason="backfill") == 0


async def test_the_runs_of_every_job_are_listed_newest_first_with_their_errors(
    open_daemon: tuple[Harness, str], page: Page
) -> None:
    harness, url = open_daemon
    await seed(harness)
    await page.goto(f"{url}/ui#/runs")
    await expect(rows(page)).to_have_count(5)
    first, failed = rows(page).nth(0), rows(page).nth(1)
    await expect(first).to_contain_text("reports.daily")
    await expect(first).to_contain_text("2026-03-02 08:55:00 UTC")
    await expect(first).to_contain_text("tickd-7f3a:4121")
    await expect(failed).to_contain_text("sync.partner-feed")
    error = failed.locator("td.error-text")
    await expect(error).to_have_text('ValueError: bad row <img src=x onerror="alert(1)"> in feed')
    await expect(error).to_have_attribute("title", HOSTILE.type + ": " + HOSTILE.message)
    assert await failed.locator("img").count() == 0
    assert await failed.locator("td").nth(6).inner_text() == "3"  # attempt


async def test_the_runs_filters_live_in_the_address(
    open_daemon: tuple[Harness, str], page: Page
) -> None:
    harness, url = open_daemon
    await seed(harness)
    await page.goto(f"{url}/ui#/runs")
    filters = page.get_by_test_id("runs-filters")
    await filters.get_by_label("Handler").select_option("boom")
    await filters.get_by_label("Scheduled from (UTC)").fill("2026-03-02T07:00:00")
    await filters.get_by_label("Scheduled until (UTC)").fill("2026-03-02T08:30:00")
    await filters.get_by_role("button", name="Show").click()
    await expect(rows(page)).to_have_count(1)
    await expect(rows(page).first).to_contain_text("sync.partner-feed")
    await expect(rows(page).first).to_contain_text("2026-03-02 07:54:00 UTC")
    assert address_query(page) == {
        "handler": ["boom"],
        "since": ["2026-03-02T07:00:00Z"],
        "until": ["2026-03-02T08:30:00Z"],
    }

    # The link, opened in another tab, shows the same runs and the same filters.
    shared = await page.context.new_page()
    await shared.goto(page.url)
    await expect(rows(shared)).to_have_count(1)
    await expect(shared.get_by_label("Handler")).to_have_value("boom")
    await expect(shared.get_by_label("Scheduled from (UTC)")).to_have_value("2026-03-02T07:00")
    await shared.goto(f"{url}/ui#/runs?status=failed")
    await expect(rows(shared)).to_have_count(1)
    await expect(shared.get_by_label("Status")).to_have_value("failed")
    await shared.close()


async def test_a_range_that_ends_before_it_starts_is_refused_naming_until(
    open_daemon: tuple[Harness, str], page: Page
) -> None:
    harness, url = open_daemon
    await seed(harness)
    await page.goto(f"{url}/ui#/runs?since=2026-03-02T09:00:00Z&until=2026-03-02T08:00:00Z")
    await expect(page.get_by_test_id("runs-refused")).to_contain_text(
        "query.until: must be after since"
    )


async def test_the_runs_page_pages_to_older_runs_and_back(
    open_daemon: tuple[Harness, str], page: Page
) -> None:
    harness, url = open_daemon
    reports, _ = await seed(harness)
    await harness.store.insert_executions(
        [run_of(reports, 200 + 10 * i, Status.SUCCESS) for i in range(60)]
    )
    await page.goto(f"{url}/ui#/runs?handler=ping")
    await expect(rows(page)).to_have_count(50)
    await page.get_by_test_id("runs-pager").get_by_role("link", name="Older runs").click()
    await expect(rows(page)).to_have_count(12)  # 62 runs of ping
    assert address_query(page)["handler"] == ["ping"]
    await page.get_by_test_id("runs-pager").get_by_role("link", name="Newest").click()
    await expect(rows(page)).to_have_count(50)
    assert "cursor" not in address_query(page)


async def test_a_job_page_lists_runs_past_its_last_100(
    open_daemon: tuple[Harness, str], page: Page
) -> None:
    harness, url = open_daemon
    reports, _ = await seed(harness)
    await harness.store.insert_executions(
        [run_of(reports, 200 + 10 * i, Status.SUCCESS) for i in range(128)]
    )
    await page.goto(f"{url}/ui#/jobs/{reports.id}")
    await expect(rows(page, "executions")).to_have_count(100)
    await page.get_by_role("button", name="Older runs (100 more)").click()
    await expect(rows(page, "executions")).to_have_count(130)
    await expect(page.get_by_test_id("runs-pager")).to_contain_text("130 runs shown")
    await expect(page.get_by_role("button", name="Older runs (100 more)")).to_have_count(0)


async def test_a_job_page_shows_each_error_as_its_type_and_first_line(
    open_daemon: tuple[Harness, str], page: Page
) -> None:
    harness, url = open_daemon
    _, feed = await seed(harness)
    await page.goto(f"{url}/ui#/jobs/{feed.id}")
    error = rows(page, "executions").first.locator("td.error-text")
    await expect(error).to_have_text('ValueError: bad row <img src=x onerror="alert(1)"> in feed')


@pytest.mark.parametrize("themed", SETTINGS, indirect=True, ids=lambda s: f"{s[0]}-{s[1]}")
async def test_the_runs_page_and_a_job_s_actions_fit_the_screen(
    open_daemon: tuple[Harness, str], themed: Page
) -> None:
    harness, url = open_daemon
    page = themed
    width = page.viewport_size["width"] if page.viewport_size else 0
    dark = await page.evaluate("matchMedia('(prefers-color-scheme: dark)').matches")
    scheme = "dark" if dark else "light"
    _, feed = await seed(harness)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    await page.goto(f"{url}/ui#/runs")
    await expect(rows(page)).to_have_count(5)
    await page.screenshot(path=SCREENSHOTS / f"runs-{width}-{scheme}.png", full_page=True)
    assert await document_width(page) <= width, f"the Runs page is wider than {width} px"

    await page.goto(f"{url}/ui#/jobs/{feed.id}")
    backfill = page.get_by_test_id("backfill")
    await backfill.get_by_label("From (UTC)").fill("2026-03-02T08:00:00")
    await backfill.get_by_label("Until (UTC)").fill("2026-03-02T10:00:00")
    await backfill.get_by_role("button", name="Preview").click()
    await expect(backfill.locator(".field.invalid")).to_have_count(1)
    await page.get_by_role("button", name="Delete", exact=True).click()
    delete = page.get_by_role("alertdialog")
    await expect(delete).to_be_visible()
    await page.screenshot(path=SCREENSHOTS / f"job-actions-{width}-{scheme}.png", full_page=True)
    assert await document_width(page) <= width, f"the job page is wider than {width} px"
    box = await delete.get_by_role("button", name="Delete sync.partner-feed").bounding_box()
    assert box is not None and box["x"] + box["width"] <= width
