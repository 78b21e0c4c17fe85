"""The dashboard at scale, in Chromium: with 20,000 jobs the jobs page shows a page of them and
their true number, and a search, answered by the API, finds the job that sorts last; after a
burst of 6,000 runs, "Now" still counts the dead letters and failures from before it, by job."""

from __future__ import annotations

from datetime import timedelta

from playwright.async_api import Page, expect

from tests.conftest import T0, Harness, make_job
from tests.ui.test_dashboard import sign_in
from tickd.scheduler.model import DeadLetter, Execution, ExecutionError, Job, Status

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


def burst_after_failures(dead: Job, noisy: Job) -> list[Execution]:
    """18 dead letters of one job and 200 failures of another, then a burst of 6,000 runs."""

    def run(
        job: Job, minutes_ago: float, status: Status, dead_letter: DeadLetter | None = None
    ) -> Execution:
        at = T0 - timedelta(minutes=minutes_ago)
        error = ExecutionError(type="RuntimeError", message=f"{job.name} broke")
        return Execution(
            job_id=job.id, job_name=job.name, handler=job.handler, scheduled_at=at,
            status=status, started_at=at, finished_at=at, dead_letter=dead_letter,
            error=error if status is Status.FAILED else None,
        )  # fmt: skip

    dead_letters = [run(dead, 50 - i, Status.FAILED, DeadLetter.OPEN) for i in range(18)]
    failures = [run(noisy, 30 - i / 10, Status.FAILED) for i in range(200)]
    burst = [run(noisy, i / 1000, Status.SUCCESS) for i in range(6000)]
    return dead_letters + failures + burst


async def test_after_a_burst_now_still_shows_every_failure_grouped_by_job(
    daemon: tuple[Harness, str], page: Page
) -> None:
    harness, url = daemon
    harness.clock.set(T0)
    dead, noisy = make_job("billing.charge", "ping"), make_job("feed.noisy", "sleep")
    runs = burst_after_failures(dead, noisy)
    for start in range(0, len(runs), BATCH):
        await harness.store.insert_executions(runs[start : start + BATCH])

    await sign_in(page, url)
    problems = page.get_by_test_id("problems")
    await expect(problems.get_by_test_id("attention-dead-letters")).to_contain_text(
        "18 open dead letters in 1 job"
    )
    failures = problems.get_by_test_id("attention-failures").locator("tbody tr")
    await expect(failures).to_have_count(2)
    await expect(failures.nth(0)).to_contain_text("feed.noisy")
    await expect(failures.nth(1)).to_contain_text("billing.charge")
    await expect(page.get_by_test_id("by-handler")).to_contain_text("6200")
