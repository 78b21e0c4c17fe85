"""A daemon restart seen from an open dashboard: the page says it is reconnecting and when it
tries next, keeps what it showed, and draws the current view again by itself once the API
answers on the same address; a token refused after the restart asks to sign in, once."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import pytest
from aiohttp import web
from aiohttp.test_utils import unused_port
from playwright.async_api import Page, Request, expect

from tests.api.conftest import api_app
from tests.conftest import T0, EngineFactory, Harness, make_job
from tests.ui.test_dashboard import sign_in

# The refresh that notices the outage (5 s), then a try after 1 s, 2 s, 4 s, 8 s: a margin over
# the few tries a test goes through.
RECOVERED_MS = 30_000
NEXT_TRY = re.compile(r"^Next try in \d+ s\.$")


@dataclass
class Restartable:
    harness: Harness
    url: str
    stop: Callable[[], Awaitable[None]]
    start: Callable[[], Awaitable[None]]


@pytest.fixture
async def restartable(make_engine: EngineFactory) -> AsyncIterator[Restartable]:
    """The API and dashboard on a fixed port of 127.0.0.1, which the test can take down (the
    listener closed, open connections dropped, as a process exit does) and bring back."""
    harness, app = api_app(make_engine)
    runner = web.AppRunner(app)
    await runner.setup()
    port = unused_port()
    site: web.TCPSite | None = None

    async def start() -> None:
        nonlocal site
        site = web.TCPSite(runner, "127.0.0.1", port, reuse_address=True)
        await site.start()

    async def stop() -> None:
        nonlocal site
        assert site is not None
        await site.stop()
        site = None
        assert runner.server is not None
        runner.server.pre_shutdown()

    await start()
    try:
        yield Restartable(harness, f"http://127.0.0.1:{port}", stop, start)
    finally:
        await runner.cleanup()


async def test_the_dashboard_reconnects_by_itself_after_a_daemon_restart(
    restartable: Restartable, page: Page
) -> None:
    harness = restartable.harness
    harness.clock.set(T0)
    await harness.store.insert_job(make_job("billing.invoices", "ping"))
    await sign_in(page, restartable.url)
    await page.get_by_role("link", name="Jobs", exact=True).click()
    table = page.get_by_test_id("jobs")
    await expect(table.locator("tbody tr")).to_have_count(1)

    await restartable.stop()
    banner = page.locator("#connection")
    await expect(banner).to_contain_text("Reconnecting…", timeout=RECOVERED_MS)
    await expect(banner).to_contain_text("tickd is not answering (Failed to fetch)")
    await expect(banner.get_by_test_id("next-try")).to_have_text(NEXT_TRY)
    # What was on screen stays, rather than an error in its place.
    await expect(table.locator("tr[data-job='billing.invoices']")).to_be_visible()
    await expect(page.locator("main")).not_to_contain_text("Something went wrong")

    # Changed while the dashboard could not see it: the redrawn view shows it.
    await harness.store.insert_job(make_job("cache.warm", "sleep"))
    await restartable.start()
    await expect(banner).to_be_hidden(timeout=RECOVERED_MS)
    await expect(table.locator("tr[data-job='cache.warm']")).to_be_visible()
    await expect(page.locator("#session")).to_contain_text("deployer · write")
    assert page.url.endswith("#/jobs")  # the same page, not reloaded elsewhere


async def test_a_token_refused_after_a_restart_asks_to_sign_in_and_stops_trying(
    restartable: Restartable, page: Page
) -> None:
    await page.clock.install()
    await sign_in(page, restartable.url)
    await restartable.stop()
    await page.clock.run_for(6_000)  # the refresh notices
    banner = page.locator("#connection")
    await expect(banner).to_contain_text("Reconnecting…")

    # The daemon comes back knowing other tokens: this tab's token is now refused.
    await page.evaluate("sessionStorage.setItem('tickd.token', 'revoked-token')")
    await restartable.start()
    await page.clock.run_for(31_000)  # past the longest wait before a try
    await expect(page.locator("main")).to_contain_text("That token was not accepted.")
    await expect(banner).to_be_hidden()

    calls: list[str] = []

    def count(request: Request) -> None:
        if "/v1/" in request.url:
            calls.append(request.url)

    page.on("request", count)
    await page.clock.run_for(10 * 60_000)
    await page.evaluate("1")  # any call the timers started has reached the browser by now
    assert calls == []
    await expect(page.get_by_label("API token")).to_be_visible()


async def test_the_waits_between_tries_double_from_one_second_to_thirty_with_jitter(
    open_daemon: tuple[Harness, str], page: Page
) -> None:
    _, url = open_daemon
    await page.goto(f"{url}/ui")
    # Each try's wait, with the jitter at its least and at its most.
    waits = await page.evaluate(
        """async () => {
            const { nextWait } = await import("/ui/connection.js");
            const rows = [];
            let last = 0;
            for (let i = 0; i < 7; i += 1) {
                const [base, least] = nextWait(last, () => 0);
                const [, most] = nextWait(last, () => 1);
                rows.push([least, most]);
                last = base;
            }
            return rows;
        }"""
    )
    assert waits == [
        [800, 1200],
        [1600, 2400],
        [3200, 4800],
        [6400, 9600],
        [12800, 19200],
        [24000, 30000],
        [24000, 30000],
    ]
