"""Dead letters in bulk, as on-call uses them in the dashboard: identical errors counted, a
group or several rows selected and re-driven or discarded at once, all that match discarded;
an error shown as its type and first line (the whole of it on hover), as text, never markup.

Leaves var/screenshots/dead-letters-bulk-<width>-<scheme>.png and
now-errors-<width>-<scheme>.png behind, to be looked at."""

from __future__ import annotations

from datetime import timedelta

import pytest
from playwright.async_api import Locator, Page, expect

from tests.conftest import T0, Harness, make_job
from tests.ui.test_phone_night_keys import SCREENSHOTS, SETTINGS, document_width, themed
from tickd.scheduler.model import DeadLetter, Execution, ExecutionError, Job, Status
from tickd.scheduler.ports.backends import ExecutionQuery

__all__ = ["themed"]

REFUSED = ExecutionError(
    type="ConnectionError", message="upstream refused the connection\nretry budget spent: 3 of 3"
)
EXPIRED = ExecutionError(type="HTTPError", message="401 token expired")
HOSTILE = ExecutionError(
    type="ValueError", message='bad row <img src=x onerror="alert(1)"> in feed'
)
LONG = ExecutionError(type="RuntimeError", message="the vendor said: " + "very " * 60 + "long")


def failed_for_good(job: Job, minutes_ago: int, error: ExecutionError) -> Execution:
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
        error=error,
        dead_letter=DeadLetter.OPEN,
    )


async def seed(harness: Harness) -> tuple[Job, Job, list[Execution]]:
    """sync.partner-feed: three refused connections and an expired token; mail.digest: a row
    that holds markup and a very long message. The newest first."""
    harness.clock.set(T0)
    feed = make_job("sync.partner-feed", "boom")
    mail = make_job("mail.digest", "boom")
    for job in (feed, mail):
        await harness.store.insert_job(job)
    runs = [
        failed_for_good(mail, 2, HOSTILE),
        failed_for_good(mail, 4, LONG),
        failed_for_good(feed, 10, REFUSED),
        failed_for_good(feed, 20, EXPIRED),
        failed_for_good(feed, 30, REFUSED),
        failed_for_good(feed, 40, REFUSED),
    ]
    await harness.store.insert_executions(runs)
    return feed, mail, runs


def rows(page: Page) -> Locator:
    return page.get_by_test_id("dead-letters").locator("tbody tr[data-dead-letter]")


async def open_ids(harness: Harness) -> list[str]:
    left = await harness.store.list_executions(ExecutionQuery(dead_letter=DeadLetter.OPEN))
    return [e.id for e in left]


async def test_a_group_of_identical_errors_is_selected_and_discarded_at_once(
    open_daemon: tuple[Harness, str], page: Page
) -> None:
    harness, url = open_daemon
    feed, _, runs = await seed(harness)
    await page.goto(f"{url}/ui#/dead-letters")
    groups = page.get_by_test_id("error-groups")
    await expect(groups).to_contain_text("Identical errors: 4 groups")
    largest = groups.locator("tbody tr").first
    await expect(largest).to_contain_text("3")
    await expect(largest).to_contain_text("ConnectionError: upstream refused the connection")
    await expect(largest).not_to_contain_text("retry budget")

    await largest.get_by_role("button", name="Select the 3 sync.partner-feed").click()
    await expect(page.get_by_test_id("selection-count")).to_have_text("3 selected")
    await page.get_by_role("button", name="Discard selected").click()
    confirm = page.get_by_test_id("selection").get_by_role("alertdialog")
    await expect(confirm).to_contain_text("Discard the 3 selected dead letters?")
    await confirm.get_by_role("button", name="Discard selected").click()
    await expect(page.locator("#notices")).to_contain_text("Discarded 3")
    await expect(rows(page)).to_have_count(3)

    refused = {runs[2].id, runs[4].id, runs[5].id}
    assert set(await open_ids(harness)) == {r.id for r in runs} - refused
    history = await page.request.get(f"{url}/v1/jobs/{feed.id}/history")
    entry = (await history.json())["items"][0]
    assert (entry["action"], entry["changes"]["count"]) == ("discard", 3)


async def test_rows_ticked_are_redriven_and_the_rest_left_open(
    open_daemon: tuple[Harness, str], page: Page
) -> None:
    harness, url = open_daemon
    feed, mail, _ = await seed(harness)
    await page.goto(f"{url}/ui#/dead-letters")
    await expect(rows(page)).to_have_count(6)
    redrive = page.get_by_role("button", name="Re-drive selected")
    await expect(redrive).to_be_disabled()
    await rows(page).nth(0).get_by_role("checkbox").check()
    await rows(page).nth(3).get_by_role("checkbox").check()
    await expect(page.get_by_test_id("selection-count")).to_have_text("2 selected")
    await redrive.click()
    await (
        page.get_by_test_id("selection")
        .get_by_role("alertdialog")
        .get_by_role("button", name="Re-drive selected")
        .click()
    )
    await expect(page.locator("#notices")).to_contain_text("Re-drive queued for 2")
    await expect(rows(page)).to_have_count(4)
    assert await harness.store.run_request_pending(mail.id, T0 - timedelta(minutes=2))
    assert await harness.store.run_request_pending(feed.id, T0 - timedelta(minutes=20))
    assert not await harness.store.run_request_pending(feed.id, T0 - timedelta(minutes=10))


async def test_all_that_match_are_discarded_after_asking(
    open_daemon: tuple[Harness, str], page: Page
) -> None:
    harness, url = open_daemon
    await seed(harness)
    await page.goto(f"{url}/ui#/dead-letters")
    await page.get_by_role("button", name="Discard all 6 matching").click()
    confirm = page.get_by_role("alertdialog")
    await expect(confirm).to_contain_text("Discard all 6 open dead letters of every job")
    await confirm.get_by_role("button", name="Cancel").click()
    assert len(await open_ids(harness)) == 6, "a cancel changes nothing"
    await page.get_by_role("button", name="Discard all 6 matching").click()
    await page.get_by_role("alertdialog").get_by_role("button", name="Discard all").click()
    await expect(page.locator("#notices")).to_contain_text("Discarded 6")
    await expect(rows(page)).to_have_count(0)
    assert await open_ids(harness) == []


async def test_an_error_is_its_type_and_first_line_as_text_the_whole_on_hover(
    open_daemon: tuple[Harness, str], page: Page
) -> None:
    harness, url = open_daemon
    _, _, runs = await seed(harness)
    await page.goto(f"{url}/ui#/dead-letters")
    hostile = page.locator(f'tr[data-dead-letter="{runs[0].id}"] td.error-text')
    await expect(hostile).to_have_text('ValueError: bad row <img src=x onerror="alert(1)"> in feed')
    assert await page.locator("main img").count() == 0, "markup in an error stays text"
    long = page.locator(f'tr[data-dead-letter="{runs[1].id}"] td.error-text')
    shown = await long.text_content() or ""
    assert len(shown) == 120 and shown.endswith("…")
    await expect(long).to_have_attribute("title", f"RuntimeError: {LONG.message}")
    refused = page.locator(f'tr[data-dead-letter="{runs[2].id}"] td.error-text')
    await expect(refused).to_have_text("ConnectionError: upstream refused the connection")

    await page.goto(f"{url}/ui#/now")
    attention = page.get_by_test_id("attention-dead-letters")
    await expect(attention).to_contain_text("ConnectionError: upstream refused the connection")
    await expect(attention).not_to_contain_text("retry budget")
    assert await page.locator("main img").count() == 0


@pytest.mark.parametrize("themed", SETTINGS, indirect=True, ids=lambda s: f"{s[0]}-{s[1]}")
async def test_the_bulk_view_fits_a_phone_and_a_laptop_in_light_and_dark(
    open_daemon: tuple[Harness, str], themed: Page
) -> None:
    harness, url = open_daemon
    page = themed
    width = page.viewport_size["width"] if page.viewport_size else 0
    dark = await page.evaluate("matchMedia('(prefers-color-scheme: dark)').matches")
    scheme = "dark" if dark else "light"
    await seed(harness)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    await page.goto(f"{url}/ui#/dead-letters")
    await expect(rows(page)).to_have_count(6)
    await (
        page.get_by_test_id("error-groups").locator("tbody tr").first.get_by_role("button").click()
    )
    await expect(page.get_by_test_id("selection-count")).to_have_text("3 selected")
    await page.screenshot(
        path=SCREENSHOTS / f"dead-letters-bulk-{width}-{scheme}.png", full_page=True
    )
    assert await document_width(page) <= width

    await page.goto(f"{url}/ui#/now")
    await expect(page.get_by_test_id("attention-dead-letters")).to_be_visible()
    await page.screenshot(path=SCREENSHOTS / f"now-errors-{width}-{scheme}.png", full_page=True)
    assert await document_width(page) <= width
