"""Addresses typed or pasted by hand: a hash the router cannot read shows a page that says so,
never a script error."""

from __future__ import annotations

import pytest
from playwright.async_api import Page, expect

from tests.conftest import T0, Harness, make_job

# A %-escape cut short: decodeURIComponent throws URIError ("URI malformed") on it.
BROKEN_ESCAPE = "%E0%A4%A"


@pytest.mark.parametrize(
    "hash_", [f"#/jobs/{BROKEN_ESCAPE}", f"#/jobs/{BROKEN_ESCAPE}/edit", f"#/{BROKEN_ESCAPE}"]
)
async def test_a_hash_with_a_broken_escape_shows_no_such_page(
    open_daemon: tuple[Harness, str], page: Page, hash_: str
) -> None:
    _, url = open_daemon
    await page.goto(f"{url}/ui{hash_}")
    await expect(page.get_by_test_id("not-found")).to_contain_text("No such page")
    await expect(page.locator("#main")).not_to_contain_text("URI malformed")
    await expect(page.locator("#main")).not_to_contain_text("Something went wrong")

    await page.get_by_role("link", name="Go to the overview").click()
    await expect(page.get_by_test_id("problems")).to_be_visible()


async def test_a_broken_hash_reached_from_a_page_and_back(
    open_daemon: tuple[Harness, str], page: Page
) -> None:
    """Moving to a broken hash from a job's page replaces that page; a good hash reads again."""
    harness, url = open_daemon
    harness.clock.set(T0)
    job = make_job("reports.daily", "sleep")
    await harness.store.insert_job(job)
    await page.goto(f"{url}/ui#/jobs/{job.id}")
    await expect(page.locator(".job-head")).to_contain_text("reports.daily")

    await page.evaluate(f"location.hash = '#/jobs/{BROKEN_ESCAPE}'")
    await expect(page.get_by_test_id("not-found")).to_be_visible()
    await expect(page.locator(".job-head")).to_have_count(0)

    # The id written as %-escapes, one a character, still decodes to the job.
    escaped = "".join(f"%{ord(c):02X}" for c in job.id)
    await page.evaluate(f"location.hash = '#/jobs/{escaped}'")
    await expect(page.locator(".job-head")).to_contain_text("reports.daily")
