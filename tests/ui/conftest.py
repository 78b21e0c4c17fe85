"""The dashboard in a real browser: the daemon's app on loopback (an engine the test drains on a
fake clock, SQLite), and Debian's Chromium driven by Playwright.

Playwright is pointed at the system `chromium` (installed by `make test`); it never downloads a
browser of its own.
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer
from playwright.async_api import Browser, ConsoleMessage, Page, ViewportSize, async_playwright

from tests.api.conftest import api_app, boom, ping
from tests.conftest import EngineFactory, Harness
from tests.fixtures.services import service_missing
from tests.fixtures.stores import opened
from tickd.app import build_api
from tickd.handlers.sleep import sleep
from tickd.scheduler.ports.backends import Store

# A laptop screen.
VIEWPORT: ViewportSize = {"width": 1440, "height": 900}


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    """SQLite only: the store backends have their own contract tests; this is about the page."""
    async with opened(f"sqlite:///{tmp_path}/tickd.db") as sqlite:
        yield sqlite


@pytest.fixture
async def daemon(make_engine: EngineFactory) -> AsyncIterator[tuple[Harness, str]]:
    """The API and dashboard of an engine in drain mode, served on 127.0.0.1; yields its URL."""
    harness, app = api_app(make_engine)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield harness, str(server.make_url(""))
    finally:
        await server.close()


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    executable = shutil.which("chromium")
    if executable is None:
        service_missing("no chromium on PATH (apt-get install chromium; `make test` does)")
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=executable, args=["--no-sandbox"]
        )
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
async def page(browser: Browser) -> AsyncIterator[Page]:
    context = await browser.new_context(viewport=VIEWPORT)
    errors: list[Any] = []
    opened_page = await context.new_page()
    opened_page.on("pageerror", lambda error: errors.append(error))
    opened_page.on("console", lambda m: errors.append(m.text) if _is_error(m) else None)
    try:
        yield opened_page
    finally:
        await context.close()
    # A script error or a refused load (CSP) is a bug even if the page looked right.
    assert not errors, errors


def _is_error(message: ConsoleMessage) -> bool:
    # The browser logs every 4xx it is answered; the 401 before signing in and the 422 of a form
    # are expected answers, shown on the page, not errors of the page.
    return message.type == "error" and not message.text.startswith("Failed to load resource")


@pytest.fixture
async def open_daemon(make_engine: EngineFactory) -> AsyncIterator[tuple[Harness, str]]:
    """As `daemon`, with no tokens: the API open on loopback, as `make run` serves it."""
    harness = make_engine({"ping": ping, "sleep": sleep, "boom": boom}, max_timeout_seconds=600)
    engine = harness.engine
    app = build_api(
        harness.settings, harness.registry, engine.ports, engine.metrics, engine, dispatch=False
    )
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield harness, str(server.make_url(""))
    finally:
        await server.close()
