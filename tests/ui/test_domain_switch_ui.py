"""The domain switch in the page header: "All domains" or one, kept for the tab; every view's
lists and figures (jobs, runs, dead letters, the overview) are then of that domain's jobs only.
Hidden while there is one domain to show."""

from __future__ import annotations

from dataclasses import replace

from playwright.async_api import Page, expect

from tests.conftest import Harness, make_job
from tests.ui.test_dead_letters_ui import failed_for_good
from tickd.scheduler.model import Job


async def seed(harness: Harness) -> tuple[Job, Job]:
    """A job with a dead letter in each of two domains."""
    alpha = replace(make_job("alpha.sync", "boom"), domain="team-a")
    bravo = replace(make_job("bravo.sync", "boom"), domain="team-b")
    for job in (alpha, bravo):
        await harness.store.insert_job(job)
    await harness.store.insert_executions([failed_for_good(alpha, 10), failed_for_good(bravo, 5)])
    return alpha, bravo


async def test_each_view_shows_the_domain_chosen_in_the_header(
    open_daemon: tuple[Harness, str], page: Page
) -> None:
    harness, url = open_daemon
    await seed(harness)
    await page.goto(f"{url}/ui#/jobs")
    jobs = page.get_by_test_id("jobs").locator("tbody tr[data-job]")
    await expect(jobs).to_have_count(2)

    await page.get_by_test_id("domain").select_option("team-b")
    await expect(jobs).to_have_count(1)
    await expect(jobs.first).to_have_attribute("data-job", "bravo.sync")
    await page.get_by_role("link", name="Runs", exact=True).click()
    runs = page.get_by_test_id("runs").locator("tbody tr[data-run]")
    await expect(runs).to_have_count(1)
    await expect(runs.first).to_contain_text("bravo.sync")
    await page.get_by_role("link", name="Dead letters", exact=True).click()
    dead = page.get_by_test_id("dead-letters").locator("tbody tr[data-dead-letter]")
    await expect(dead).to_have_count(1)
    await expect(dead.first).to_contain_text("bravo.sync")

    await page.get_by_role("link", name="Now", exact=True).click()
    await expect(page.get_by_test_id("by-handler")).to_contain_text("boom")

    # Kept for the tab: a reload shows the same domain.
    await page.reload()
    await expect(page.get_by_test_id("domain")).to_have_value("team-b")
    await page.get_by_role("link", name="Dead letters", exact=True).click()
    await expect(dead).to_have_count(1)
    await page.get_by_test_id("domain").select_option("")
    await expect(dead).to_have_count(2)


async def test_no_switch_while_every_job_is_in_one_domain(
    open_daemon: tuple[Harness, str], page: Page
) -> None:
    harness, url = open_daemon
    await harness.store.insert_job(make_job("only.one", "boom"))
    await page.goto(f"{url}/ui#/jobs")
    await expect(page.get_by_test_id("jobs").locator("tbody tr[data-job]")).to_have_count(1)
    await expect(page.get_by_test_id("domain")).to_have_count(0)
