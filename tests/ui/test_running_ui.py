"""The Running page: each run on the workers with its age, instance and attempt, a link to the
instances that hold them, and a Cancel that asks before it acts, on a phone and a laptop, light
and dark.

Leaves var/screenshots/running-<width>-<scheme>.png behind, to be looked at.
"""

from __future__ import annotations

import pytest
from playwright.async_api import Page, expect

from tests.conftest import T0, Harness, make_job
from tests.ui.test_dashboard import sign_in
from tests.ui.test_phone_night_keys import (
    SCREENSHOTS,
    SETTINGS,
    fits_the_screen,
    themed,
)
from tickd.scheduler.model import Execution, Status

__all__ = ["themed"]


async def stuck_run(harness: Harness, name: str, instance: str) -> Execution:
    """A run recorded running on `instance`, its handler not answering."""
    job = await harness.add(make_job(name, "ping", params={"url": "https://example.com"}))
    run = Execution(
        job_id=job.id,
        job_name=job.name,
        handler=job.handler,
        scheduled_at=T0,
        status=Status.RUNNING,
        started_at=T0,
        owner=instance,
        token=1,
        attempts=1,
    )
    await harness.store.insert_executions([run])
    await harness.store.beat(instance, T0)
    return run


@pytest.mark.parametrize("themed", SETTINGS, indirect=True, ids=lambda s: f"{s[0]}-{s[1]}")
async def test_the_running_page_shows_each_runs_age_and_instance_and_fits_the_screen(
    daemon: tuple[Harness, str], themed: Page
) -> None:
    harness, url = daemon
    page = themed
    harness.clock.set(T0)
    await stuck_run(harness, "nightly-export-of-the-warehouse", "worker-eu-west-1a-7f9c")
    await stuck_run(harness, "invoice-sync", "worker-eu-west-1b-2d41")
    harness.clock.advance(42 * 60)
    await sign_in(page, url)

    await page.get_by_role("link", name="Running", exact=True).click()

    table = page.get_by_test_id("running")
    row = table.locator("tr", has_text="invoice-sync")
    await expect(row).to_contain_text("worker-eu-west-1b-2d41")
    await expect(row.get_by_test_id("age")).to_have_text("42 min")
    await expect(table).to_contain_text("worker-eu-west-1a-7f9c")
    await fits_the_screen(page, "running")


async def test_cancel_asks_first_then_records_who_asked(
    daemon: tuple[Harness, str], page: Page
) -> None:
    harness, url = daemon
    harness.clock.set(T0)
    run = await stuck_run(harness, "invoice-sync", "worker-2")
    await sign_in(page, url)
    await page.evaluate("location.hash = '#/running'")
    row = page.get_by_test_id("running").locator(f"tr[data-run='{run.id}']")

    await row.get_by_role("button", name="Cancel").click()
    await row.get_by_role("button", name="Keep it running").click()
    assert await harness.store.cancel_requests([run.id]) == [], "kept: nothing asked"

    await row.get_by_role("button", name="Cancel").click()
    await expect(row.get_by_role("alertdialog")).to_contain_text("invoice-sync run on worker-2")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=SCREENSHOTS / "running-cancel-asks-1440-light.png")
    await row.get_by_role("button", name="Cancel the run").click()

    await expect(row.get_by_test_id("cancel-asked")).to_have_text("cancel asked by deployer")
    [request] = await harness.store.cancel_requests([run.id])
    assert request.requested_by == "deployer"
