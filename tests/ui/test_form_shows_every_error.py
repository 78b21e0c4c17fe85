"""The job form shows every mistake after one submit, each beside its field, and a cron
expression the server refuses gets its refusal as the hint, never words.

Leaves var/screenshots/form-errors-<width>-<scheme>.png behind, to be looked at."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest
from playwright.async_api import Locator, Page, expect

from tests.conftest import T0, Harness
from tickd.scheduler.ports.backends import JobSearch

SCREENSHOTS = Path(__file__).resolve().parents[2] / "var" / "screenshots"


async def fill_four_mistakes(page: Page, url: str) -> None:
    await page.goto(f"{url}/ui#/new")
    await page.get_by_label("Name").fill("nightly report")
    await page.get_by_label("Cron expression (seconds first)").fill("*/70 * * * * *")
    await page.get_by_label("Time zone").fill("Mars/Base")
    await page.get_by_label("Params (JSON)").fill("{not json")


def error_of(page: Page, field: str) -> Locator:
    return page.locator(f'.field[data-field="{field}"] .field-error')


async def test_four_mistakes_show_four_errors_after_one_submit(
    open_daemon: tuple[Harness, str], page: Page
) -> None:
    harness, url = open_daemon
    harness.clock.set(T0)
    await fill_four_mistakes(page, url)

    await page.get_by_role("button", name="Create job").click()

    await expect(error_of(page, "name")).to_contain_text("should match pattern")
    await expect(error_of(page, "schedule.expr")).to_contain_text("step 70")
    await expect(error_of(page, "schedule.timezone")).to_contain_text("Mars/Base")
    await expect(error_of(page, "params")).to_contain_text("not valid JSON")
    await expect(page.locator(".field.invalid")).to_have_count(4)
    # The schedule's preview, whenever it lands, keeps them.
    await expect(page.locator(".preview")).to_contain_text("No preview")
    await expect(page.locator(".field.invalid")).to_have_count(4)
    await expect(page.locator(".form-error")).to_have_text("")
    for field in ("schedule.expr", "schedule.timezone"):
        shown = await error_of(page, field).text_content()
        assert shown is not None and ";" not in shown, shown  # each reason once
    assert await harness.store.search_jobs(JobSearch()) == []


async def test_a_refused_cron_expression_gets_its_refusal_as_the_hint(
    open_daemon: tuple[Harness, str], page: Page
) -> None:
    harness, url = open_daemon
    harness.clock.set(T0)
    await page.goto(f"{url}/ui#/new")
    hint = page.get_by_test_id("schedule-words")
    await page.get_by_label("Cron expression (seconds first)").fill("*/15 * * * * *")
    await expect(hint).to_have_text("every 15 seconds")

    await page.get_by_label("Cron expression (seconds first)").fill("*/70 * * * * *")

    await expect(hint).to_contain_text("not a valid expression: second field: step 70")
    await expect(hint).not_to_contain_text("every 70 seconds")
    await expect(error_of(page, "schedule.expr")).to_contain_text("step 70")


@pytest.mark.parametrize("width", [375, 1280])
@pytest.mark.parametrize("scheme", ["light", "dark"])
async def test_the_errors_fit_the_screen(
    open_daemon: tuple[Harness, str],
    page: Page,
    width: int,
    scheme: Literal["light", "dark"],
) -> None:
    harness, url = open_daemon
    harness.clock.set(T0)
    await page.set_viewport_size({"width": width, "height": 900})
    await page.emulate_media(color_scheme=scheme)
    await fill_four_mistakes(page, url)
    await page.get_by_role("button", name="Create job").click()
    await expect(page.locator(".preview")).to_contain_text("No preview")
    await expect(page.locator(".field.invalid")).to_have_count(4)

    for field in ("name", "schedule.expr", "schedule.timezone", "params"):
        box = await error_of(page, field).bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width, field
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=SCREENSHOTS / f"form-errors-{width}-{scheme}.png", full_page=True)
