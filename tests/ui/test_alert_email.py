"""An alert email's HTML part in Chromium, at a phone's width (375 px) and a desktop's (1280 px):
what a recipient relies on seeing. Screenshots of both are kept under var/screenshots/ for people
to look at."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, FloatRect, Locator, Page, ViewportSize

from tests.alerts.test_emails import lifecycle, notification
from tests.fixtures.times import T0
from tickd.handlers.alert_scanner.emails import compose
from tickd.handlers.alert_scanner.settings import EmailSettings
from tickd.handlers.product_store import Notification

SCREENSHOTS = Path(__file__).resolve().parents[2] / "var" / "screenshots"
PHONE: ViewportSize = {"width": 375, "height": 740}
DESKTOP: ViewportSize = {"width": 1280, "height": 800}
HOSTILE = "<img src=x onerror=\"document.title='pwned'\">LM317T"
SETTINGS = EmailSettings(
    app_base_url="https://app.example",
    public_base_url="https://tickd.example",
    unsubscribe_secret="c" * 32,
    max_items=8,
)


def grace_digest() -> list[Notification]:
    """What the demo's Grace is told, as the scanner stores it (flag names canonical), with a
    part name that tries to be markup, a part number longer than a phone is wide, and more
    rules than one email lists."""
    rohs = notification(
        "MAX232CPE",
        "n-rohs",
        alert_id="a-max232",
        type="compliance",
        operator="changed",
        threshold=None,
        previous_value={"REACH": "YES", "ROHS": "YES"},
        current_value={"REACH": "YES", "ROHS": "NO"},
        reason="compliance flags flipped: ROHS YES -> NO",
    )
    eol = lifecycle(
        "ATMEGA328P-PU", "n-eol", current_value="EOL", reason="the lifecycle stage changed"
    )
    price = notification(
        "ATMEGA328P-PU",
        "n-price",
        operator="lt",
        threshold="-5%",
        previous_value=3.2,
        current_value=2.95,
        currency="USD",
        reason="-7.8% against the baseline 3.2, less than -5%",
    )
    long_part = notification("STM32F103C8T6TR-" + "X" * 60, "n-long", current_value=0.7)
    return [rohs, eol, price, notification(HOSTILE, "n-hostile"), long_part, *alternates(40)]


def alternates(count: int) -> list[Notification]:
    """New alternates of `count` parts: the least important news, listed last."""
    return [
        notification(
            f"PART-{i:03d}",
            f"n-alt-{i:03d}",
            part_id=f"p{i}",
            alert_id=f"a{i}",
            type="new_alternate",
            previous_value=["LM317TG"],
            current_value=["LM317TG", "LM350T"],
            reason="1 new alternate: LM350T",
        )
        for i in range(count)
    ]


@pytest.fixture(scope="module")
def html() -> str:
    message = compose(
        "grace@example.com",
        grace_digest(),
        now=T0,
        from_address="alerts@tickd.example",
        settings=SETTINGS,
    )
    part = message.get_body(("html",))
    assert part is not None
    content: str = part.get_content()
    return content


@dataclass(frozen=True)
class Shown:
    page: Page
    errors: list[Any]

    def item(self, text: str) -> Locator:
        return self.page.locator("tr.item", has_text=text)


@pytest.fixture
async def shown(browser: Browser, html: str, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """Opens the email at a viewport, offline as a mail client shows it; yields Shown."""
    contexts = []

    async def at(viewport: ViewportSize) -> Shown:
        context = await browser.new_context(viewport=viewport)
        contexts.append(context)
        page = await context.new_page()
        page.set_default_timeout(10_000)
        errors: list[Any] = []
        page.on("pageerror", lambda error: errors.append(error))
        # No request leaves the page: an email must not need the network to read right.
        await page.route("**/*", lambda route: route.abort())
        await page.set_content(html)
        return Shown(page, errors)

    yield at
    for context in contexts:
        await context.close()


async def box(locator: Locator) -> FloatRect:
    found = await locator.bounding_box()
    assert found is not None, f"{locator} is not laid out"
    return found


async def screenshot(page: Page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / name
    await page.screenshot(path=str(path), full_page=True)
    return path


async def test_on_a_phone_nothing_is_wider_than_the_screen_and_each_rule_reads_down(
    shown: Any,
) -> None:
    phone: Shown = await shown(PHONE)
    page = phone.page
    width = await page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"the page scrolls sideways: {width} px"
    price = phone.item("price fell")
    after = price.locator("td").nth(3)
    assert await after.inner_text() == "After: $2.95"
    where = await box(after)
    assert await after.is_visible() and where["x"] >= 0
    assert where["x"] + where["width"] <= PHONE["width"]
    # The cells of a rule are stacked, each saying what it is, not squeezed into columns.
    part = await box(price.locator("td").first)
    assert part["y"] < where["y"] and abs(part["x"] - where["x"]) < 1
    assert await price.locator("td").nth(2).inner_text() == "Before: $3.20"
    assert not await page.locator("th", has_text="After").is_visible()
    for link in await page.get_by_role("link").all():
        link_box = await box(link)
        assert link_box["x"] + link_box["width"] <= PHONE["width"], await link.inner_text()
    path = await screenshot(page, "alert-email-phone.png")
    assert path.stat().st_size > 10_000 and not phone.errors


async def test_on_a_desktop_the_rules_are_a_table_in_a_bounded_column(shown: Any) -> None:
    desktop: Shown = await shown(DESKTOP)
    page = desktop.page
    assert await page.evaluate("document.documentElement.scrollWidth") <= DESKTOP["width"]
    assert [await th.inner_text() for th in await page.locator("th").all()] == [
        "PART",  # shown in capitals by the header's style
        "CHANGE",
        "BEFORE",
        "AFTER",
        "WHY",
    ]
    price = desktop.item("price fell")
    cells = [await cell.inner_text() for cell in await price.locator("td").all()]
    assert cells[2:4] == ["$3.20", "$2.95"]
    part, after = await box(price.locator("td").first), await box(price.locator("td").nth(3))
    assert abs(part["y"] - after["y"]) < 1 and after["x"] > part["x"]
    table = await box(page.locator("table.items"))
    assert table["width"] <= 680 and table["x"] > (DESKTOP["width"] - 680) / 2 - 1
    path = await screenshot(page, "alert-email-desktop.png")
    assert path.stat().st_size > 10_000 and not desktop.errors


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["phone", "desktop"])
async def test_what_matters_most_comes_first_named_as_people_write_it(
    shown: Any, viewport: ViewportSize
) -> None:
    page = (await shown(viewport)).page
    first = page.locator("tr.item").first
    assert await first.locator("td").nth(0).inner_text() == "MAX232CPE"
    assert await first.locator("td").nth(1).inner_text() == "is no longer RoHS compliant"
    assert "RoHS: NO" in await first.inner_text()
    assert await page.locator("tr.item").count() == 8
    more = page.get_by_role("link", name="and 37 more")
    assert await more.get_attribute("href") == "https://app.example/notifications"
    assert await page.get_by_role("link", name="Stop all alert emails").is_visible()


async def test_a_part_name_that_is_markup_stays_text(shown: Any) -> None:
    page = (await shown(DESKTOP)).page
    assert await page.title() == "MAX232CPE is no longer RoHS compliant, and 44 more"
    assert await page.locator("img").count() == 0
    assert await page.get_by_text(HOSTILE).count() == 1
