"""A run's page shows what its handler logged: each line's time, level and message, the run's
secrets masked, as text (a line is never markup); a phone and a laptop, light and dark, leave
var/screenshots/run-log-<width>-<scheme>.png."""

from __future__ import annotations

import pytest
from playwright.async_api import Page, expect

from tests.conftest import Harness, make_job
from tests.ui.test_phone_night_keys import SCREENSHOTS, SETTINGS, document_width, themed
from tickd.scheduler.plugin.api import HandlerContext, Result
from tickd.scheduler.ports.backends import ExecutionQuery
from tickd.scheduler.secrets.masking import MASK

__all__ = ["themed"]  # the fixture, used by name

TOKEN = "partner-token-9f3a77"


async def partner_export(ctx: HandlerContext) -> Result:
    ctx.logger.info("fetching %s", "https://partner.example/feed")
    ctx.logger.warning("partner refused token %s, retrying with the spare", ctx.params["token"])
    ctx.logger.info("<img src=x onerror=alert(1)> rows: %d", 4213)
    return {"rows": 4213}


async def a_run_that_logged(harness: Harness) -> str:
    harness.registry.register("partner_export", partner_export)
    await harness.add(make_job("exports.partner", "partner_export", params={"token": TOKEN}))
    await harness.engine.drain()
    [run] = await harness.store.list_executions(ExecutionQuery(limit=5))
    return run.id


async def test_a_run_page_shows_its_handlers_log_lines_masked_and_as_text(
    open_daemon: tuple[Harness, str], page: Page
) -> None:
    harness, url = open_daemon
    run_id = await a_run_that_logged(harness)
    await page.goto(f"{url}/ui#/runs/{run_id}")
    lines = page.get_by_test_id("run-log").locator("li")
    await expect(lines).to_have_count(3)
    await expect(lines.nth(0)).to_contain_text("INFO")
    await expect(lines.nth(0)).to_contain_text("fetching https://partner.example/feed")
    await expect(lines.nth(1)).to_contain_text("WARNING")
    await expect(lines.nth(1)).to_contain_text(f"partner refused token {MASK}, retrying")
    await expect(lines.nth(2)).to_contain_text("<img src=x onerror=alert(1)> rows: 4213")
    assert await page.locator("main img").count() == 0
    await expect(page.locator("main")).not_to_contain_text(TOKEN)


@pytest.mark.parametrize("themed", SETTINGS, indirect=True, ids=lambda s: f"{s[0]}-{s[1]}")
async def test_a_run_pages_log_fits_a_phone_and_a_laptop_in_light_and_dark(
    open_daemon: tuple[Harness, str], themed: Page
) -> None:
    harness, url = open_daemon
    page = themed
    width = page.viewport_size["width"] if page.viewport_size else 0
    dark = await page.evaluate("matchMedia('(prefers-color-scheme: dark)').matches")
    run_id = await a_run_that_logged(harness)
    await page.goto(f"{url}/ui#/runs/{run_id}")
    await expect(page.get_by_test_id("run-log").locator("li")).to_have_count(3)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    scheme = "dark" if dark else "light"
    await page.screenshot(path=SCREENSHOTS / f"run-log-{width}-{scheme}.png", full_page=True)
    assert await document_width(page) <= width
