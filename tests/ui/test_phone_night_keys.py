"""The dashboard on a phone, at night and from the keyboard: every page fits a 375 px screen
(a wide table scrolls inside its panel, never the page), a job's Edit is within reach, a dark
system theme gives dark pages, "g" shortcuts move between pages, "?" lists them, and the
daemon's version is on every page.

Leaves var/screenshots/<page>-<width>-<scheme>.png behind, to be looked at.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal

import pytest
from playwright.async_api import Browser, Page, expect

from tests.conftest import Harness
from tests.ui.conftest import _is_error
from tests.ui.test_dashboard import seed_last_hour, sign_in
from tests.ui.test_run_page import seed as seed_runs

SCREENSHOTS = Path(__file__).resolve().parents[2] / "var" / "screenshots"
PHONE = 375
LAPTOP = 1280
Scheme = Literal["light", "dark"]
# The page's background in each scheme (app.css's --bg).
BACKGROUNDS = {"light": "rgb(244, 246, 249)", "dark": "rgb(15, 20, 27)"}


@pytest.fixture
async def themed(browser: Browser, request: pytest.FixtureRequest) -> AsyncIterator[Page]:
    """A tab of the given width and colour scheme, failing the test on any script error."""
    width, scheme = request.param
    context = await browser.new_context(
        viewport={"width": width, "height": 800}, color_scheme=scheme
    )
    errors: list[Any] = []
    tab = await context.new_page()
    tab.on("pageerror", lambda error: errors.append(error))
    tab.on("console", lambda m: errors.append(m.text) if _is_error(m) else None)
    try:
        yield tab
    finally:
        await context.close()
    assert not errors, errors


async def document_width(page: Page) -> int:
    width: int = await page.evaluate("document.documentElement.scrollWidth")
    return width


async def page_background(page: Page) -> str:
    colour: str = await page.evaluate("getComputedStyle(document.documentElement).backgroundColor")
    return colour


async def fits_the_screen(page: Page, name: str) -> None:
    """Screenshot the page whole (as `name`-width-scheme.png); it must be no wider than the
    screen and take its colour scheme's background."""
    width = page.viewport_size["width"] if page.viewport_size else 0
    dark = await page.evaluate("matchMedia('(prefers-color-scheme: dark)').matches")
    scheme = "dark" if dark else "light"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=SCREENSHOTS / f"{name}-{width}-{scheme}.png", full_page=True)
    assert await document_width(page) <= width, f"the {name} page is wider than {width} px"
    assert await page_background(page) == BACKGROUNDS[scheme]


SETTINGS = [(PHONE, "light"), (PHONE, "dark"), (LAPTOP, "light"), (LAPTOP, "dark")]


@pytest.mark.parametrize("themed", SETTINGS, indirect=True, ids=lambda s: f"{s[0]}-{s[1]}")
async def test_every_page_fits_the_screen_in_light_and_dark(
    daemon: tuple[Harness, str], themed: Page
) -> None:
    harness, url = daemon
    page = themed
    width = page.viewport_size["width"] if page.viewport_size else 0
    scheme = await page.evaluate("matchMedia('(prefers-color-scheme: dark)').matches")
    scheme_name = "dark" if scheme else "light"
    failing = await seed_last_hour(harness)
    await harness.engine.drain()
    _, retried, _, _ = await seed_runs(harness)
    await sign_in(page, url)

    pages = {
        "now": ("#/now", page.get_by_test_id("problems")),
        "jobs": ("#/jobs", page.get_by_test_id("jobs")),
        "job": (f"#/jobs/{failing.id}", page.get_by_test_id("executions")),
        "edit": (f"#/jobs/{failing.id}/edit", page.locator("form.job-form")),
        "dead-letters": ("#/dead-letters", page.get_by_test_id("dead-letters")),
        "run": (f"#/runs/{retried.id}", page.get_by_test_id("attempts")),
    }
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for name, (hash_, ready) in pages.items():
        await page.evaluate(f"location.hash = {hash_!r}")
        await expect(ready).to_be_visible()
        await page.screenshot(
            path=SCREENSHOTS / f"{name}-{width}-{scheme_name}.png", full_page=True
        )
        assert await document_width(page) <= width, f"{name} is wider than {width} px"
        assert await page_background(page) == BACKGROUNDS[scheme_name]


@pytest.mark.parametrize("themed", [(PHONE, "light")], indirect=True, ids=["375-light"])
async def test_a_job_can_be_edited_from_a_phone(daemon: tuple[Harness, str], themed: Page) -> None:
    harness, url = daemon
    page = themed
    failing = await seed_last_hour(harness)
    await sign_in(page, url)
    await page.evaluate(f"location.hash = '#/jobs/{failing.id}'")
    edit = page.get_by_role("link", name="Edit", exact=True)
    await expect(edit).to_be_in_viewport(ratio=1)
    box = await edit.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= PHONE
    await edit.click()
    await expect(page.locator("form.job-form")).to_be_visible()
    assert await document_width(page) <= PHONE


async def test_shortcuts_move_between_pages_and_the_version_is_shown(
    daemon: tuple[Harness, str], page: Page
) -> None:
    harness, url = daemon
    await seed_last_hour(harness)
    await sign_in(page, url)
    described = await page.request.get(f"{url}/openapi.json")
    version = (await described.json())["info"]["version"]
    await expect(page.locator("footer")).to_contain_text(f"tickd {version}")

    await page.keyboard.press("g")
    await page.keyboard.press("j")
    await expect(page.get_by_test_id("jobs")).to_be_visible()
    await expect(page.locator("[data-nav='jobs']")).to_have_class("active")

    await page.keyboard.press("/")
    search = page.get_by_label("Search jobs")
    await expect(search).to_be_focused()
    # Letters typed into a field are the field's, not shortcuts.
    await page.keyboard.type("g d")
    await expect(search).to_have_value("g d")
    await expect(page.get_by_test_id("jobs")).to_be_visible()
    await search.blur()

    await page.keyboard.press("g")
    await page.keyboard.press("d")
    await expect(page.get_by_test_id("dead-letters")).to_be_visible()
    await page.keyboard.press("g")
    await page.keyboard.press("n")
    await expect(page.get_by_test_id("problems")).to_be_visible()

    # "/" where there is no search box: the Jobs page's, focused.
    await page.keyboard.press("/")
    await expect(page.get_by_label("Search jobs")).to_be_focused()
    await page.get_by_label("Search jobs").blur()

    await page.keyboard.press("?")
    shortcuts = page.get_by_role("dialog", name="Keyboard shortcuts")
    await expect(shortcuts).to_be_visible()
    await expect(shortcuts).to_contain_text("Go to Dead letters")
    await page.keyboard.press("Escape")
    await expect(shortcuts).to_be_hidden()
    await page.get_by_role("button", name="Keyboard shortcuts").click()
    await expect(shortcuts).to_be_visible()
