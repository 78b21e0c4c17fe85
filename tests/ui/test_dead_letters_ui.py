"""The dead-letter view as on-call uses it: the runs that failed for good, narrowed by job and
by handler, re-driven one at a time or all that match, discarded; each asked for first, each in
the job's history."""

from __future__ import annotations

from datetime import timedelta

from playwright.async_api import Locator, Page, expect

from tests.conftest import T0, Harness, make_job
from tickd.scheduler.model import DeadLetter, Execution, ExecutionError, Job, Status


def failed_for_good(job: Job, minutes_ago: int) -> Execution:
    at = T0 - timedelta(minutes=minutes_ago)
    return Execution(
        job_id=job.id,
        job_name=job.name,
        handler=job.handler,
        scheduled_at=at,
        status=Status.FAILED,
        started_at=at,
        finished_at=at + timedelta(seconds=2),
        duration_ms=2000,
        attempts=3,
        error=ExecutionError(type="RuntimeError", message=f"upstream said no ({job.name})"),
        dead_letter=DeadLetter.OPEN,
    )


async def seed(harness: Harness) -> tuple[Job, Job, Job]:
    """Three jobs with open dead letters: two on handler boom, one on sleep."""
    harness.clock.set(T0)
    feed = make_job("sync.partner-feed", "boom")
    mail = make_job("mail.digest", "boom")
    warm = make_job("cache.warm", "sleep")
    for job in (feed, mail, warm):
        await harness.store.insert_job(job)
    runs = [(feed, 30), (feed, 20), (mail, 10), (warm, 5)]
    await harness.store.insert_executions([failed_for_good(job, ago) for job, ago in runs])
    return feed, mail, warm


def rows(page: Page) -> Locator:
    return page.get_by_test_id("dead-letters").locator("tbody tr[data-dead-letter]")


async def test_a_dead_letter_is_found_by_its_job_and_redriven_from_its_view(
    open_daemon: tuple[Harness, str], page: Page
) -> None:
    harness, url = open_daemon
    feed, mail, _ = await seed(harness)
    await page.goto(f"{url}/ui")
    await page.get_by_role("link", name="Dead letters", exact=True).click()
    await expect(rows(page)).to_have_count(4)

    await page.get_by_label("Handler").select_option("boom")
    await expect(rows(page)).to_have_count(3)
    await page.get_by_label("Job").select_option(label="mail.digest")
    await expect(rows(page)).to_have_count(1)
    assert "handler=boom" in page.url and f"job_id={mail.id}" in page.url
    row = rows(page).first
    await expect(row).to_contain_text("upstream said no (mail.digest)")

    # Asked first: a cancel leaves it open, a confirm re-drives it.
    await row.get_by_role("button", name="Re-drive").click()
    confirm = row.get_by_role("alertdialog")
    await expect(confirm).to_contain_text("Re-drive the mail.digest run of")
    await confirm.get_by_role("button", name="Cancel").click()
    await expect(confirm).to_have_count(0)
    await row.get_by_role("button", name="Re-drive").click()
    await row.get_by_role("alertdialog").get_by_role("button", name="Re-drive").click()
    await expect(page.locator("#notices")).to_contain_text("Re-drive queued")
    await expect(rows(page)).to_have_count(0)

    assert await harness.store.run_request_pending(mail.id, T0 - timedelta(minutes=10))
    assert not await harness.store.run_request_pending(feed.id, T0 - timedelta(minutes=20))
    await page.get_by_label("State").select_option("redriving")
    await expect(rows(page)).to_have_count(1)
    await page.get_by_role("link", name="mail.digest").click()
    await expect(page.get_by_test_id("history")).to_contain_text("redrive")


async def test_all_that_match_are_redriven_and_one_is_discarded(
    open_daemon: tuple[Harness, str], page: Page
) -> None:
    harness, url = open_daemon
    feed, mail, warm = await seed(harness)
    await page.goto(f"{url}/ui#/dead-letters?handler=sleep")
    await expect(rows(page)).to_have_count(1)
    discard = rows(page).first
    await discard.get_by_role("button", name="Discard").click()
    await discard.get_by_role("alertdialog").get_by_role("button", name="Discard").click()
    await expect(page.locator("#notices")).to_contain_text("Dead letter discarded")
    await expect(rows(page)).to_have_count(0)

    await page.get_by_label("Handler").select_option("boom")
    await page.get_by_role("button", name="Re-drive all 3 matching").click()
    await page.get_by_role("alertdialog").get_by_role("button", name="Re-drive all").click()
    await expect(page.locator("#notices")).to_contain_text("Re-drive queued for 3")
    await expect(rows(page)).to_have_count(0)

    for job, minutes_ago in ((feed, 30), (feed, 20), (mail, 10)):
        assert await harness.store.run_request_pending(job.id, T0 - timedelta(minutes=minutes_ago))
    assert not await harness.store.run_request_pending(warm.id, T0 - timedelta(minutes=5))
    history = await page.request.get(f"{url}/v1/jobs/{warm.id}/history")
    assert (await history.json())["items"][0]["action"] == "discard"
