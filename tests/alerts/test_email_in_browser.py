"""A rendered digest in headless Chromium (Debian's, driven by Playwright): what a recipient's
browser shows, a screenshot of it kept at var/alert-email.png for people to look at."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.alerts.test_emails import lifecycle, many, notification, rohs_lost
from tests.fixtures.times import T0
from tickd.handlers.alert_scanner.emails import compose
from tickd.handlers.alert_scanner.settings import EmailSettings

CHROMIUM = shutil.which("chromium")
SCREENSHOT = Path(__file__).resolve().parents[2] / "var" / "alert-email.png"
HOSTILE = "<img src=x onerror=\"document.title='pwned'\">LM317T"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (make test installs it)"),
]


async def test_a_digest_reads_right_in_a_browser() -> None:
    from playwright.async_api import async_playwright

    settings = EmailSettings(
        app_base_url="https://app.example",
        public_base_url="https://tickd.example",
        unsubscribe_secret="c" * 32,
        max_items=8,
    )
    rules = [
        rohs_lost(),
        lifecycle(time_zone="Europe/Berlin"),
        notification(HOSTILE, "n0", currency="USD"),
        *many(40),
    ]
    message = compose("ada@example.com", rules, now=T0, settings=settings)
    html_part = message.get_body(("html",))
    assert html_part is not None
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, timeout=30_000)
        try:
            page = await browser.new_page(viewport={"width": 900, "height": 700})
            page.set_default_timeout(10_000)
            # Offline, as a mail client shows it: no request leaves the page.
            await page.route("**/*", lambda route: route.abort())
            await page.set_content(html_part.get_content())
            title = await page.title()
            rows = await page.locator("tr.item").count()
            images = await page.locator("img").count()
            first = await page.locator("tr.item").nth(0).inner_text()
            more = page.get_by_role("link", name="and 35 more")
            more_href = await more.get_attribute("href")
            stop_all = await page.get_by_role("link", name="Stop all alert emails").count()
            SCREENSHOT.parent.mkdir(exist_ok=True)
            await page.screenshot(path=str(SCREENSHOT), full_page=True)
        finally:
            await browser.close()
    assert title != "pwned" and images == 0  # the part name stayed text
    assert rows == 8
    assert first.split("\t")[:2] == ["MAX232CPE", "is no longer RoHS compliant"]
    assert more_href == "https://app.example/notifications"
    assert stop_all == 1
    assert SCREENSHOT.stat().st_size > 10_000
