"""The jobs page with 20,000 jobs, in Chromium: it shows a page of them and their true number,
and a search, answered by the API, finds the job that sorts last."""

from __future__ import annotations

from datetime import timedelta

from playwright.async_api import Page, expect

from tests.conftest import T0, Harness, make_job
from tests.ui.test_dashboard import sign_in
from tickd.scheduler.model import Job

JOBS = 20_000
# Jobs written per store call: one transaction each.
BATCH = 2_000
# The name that sorts after every other, and a part of it no hex id can hold.
LAST = "zulu.omega-nightly"
# Between the first and the last row shown, in the count above the table.
DASH = "\N{EN DASH}"


def many_jobs() -> list[Job]:
    jobs = [
        make_job(f"svc-{i:05}.ping", "ping", next_run_at=T0 + timedelta(minutes=1 + i % 600))
        for i in range(JOBS - 1)
    ]
    return [*jobs, make_job(LAST, "ping", next_run_at=T0 + timedelta(seconds=5))]


async def test_twenty_thousand_jobs_are_paged_and_searched_by_the_api(
    daemon: tuple[Harness, str], page: Page
) -> None:
    harness, url = daemon
    harness.clock.set(T0)
    jobs = many_jobs()
    for start in range(0, len(jobs), BATCH):
        await harness.store.insert_missing_jobs(jobs[start : start + BATCH])

    await sign_in(page, url)
    await page.get_by_role("link", name="Jobs", exact=True).click()
    table = page.get_by_test_id("jobs")
    count = page.get_by_test_id("jobs-count")
    await expect(count).to_have_text(f"1{DASH}50 of 20000 jobs")
    await expect(table.locator("tbody tr")).to_have_count(50)
    await page.get_by_role("button", name="Next").click()
    await expect(count).to_have_text(f"51{DASH}100 of 20000 jobs")
    await expect(table.locator("tbody tr").first).to_have_attribute("data-job", "svc-00050.ping")

    await page.get_by_label("Search jobs").fill("OMEGA")
    await expect(count).to_have_text(f"1{DASH}1 of 1 job")
    await expect(table.locator("tbody tr")).to_have_count(1)
    await expect(table.locator(f"tr[data-job='{LAST}']")).to_be_visible()

    await page.get_by_label("Search jobs").fill("")
    await page.get_by_label("Sort by").select_option("next_run")
    await expect(table.locator("tbody tr").first).to_have_attribute("data-job", LAST)
    await expect(count).to_have_text(f"1{DASH}50 of 20000 jobs")
