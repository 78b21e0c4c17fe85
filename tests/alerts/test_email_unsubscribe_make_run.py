"""`make run`'s alert emails (the embedded defaults of config/tickd.toml, mail into the outbox)
carry RFC 8058 one-click unsubscribe headers pointing at the daemon's own API, and a POST to
that link, as a mailbox provider's button sends it, unsubscribes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from email.message import EmailMessage
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tests.alerts.conftest import Outbox
from tests.conftest import EngineFactory
from tests.fixtures.stores import opened
from tests.fixtures.times import T0
from tickd.app import build_api
from tickd.handlers.alert_scanner import limits_from
from tickd.handlers.alert_scanner.scan import scan
from tickd.handlers.product_store import ProductStore, open_product_store
from tickd.scheduler.config.settings import Settings, load_settings
from tickd.scheduler.ports.backends import Store
from tickd.scheduler.ports.clock import FakeClock
from tickd.seed.demo_products import DEMO_FROM_ADDRESS, seed_demo_products

MAKE_RUN_CONFIG = Path(__file__).resolve().parents[2] / "config" / "tickd.toml"
Client = TestClient[Any, Any]


@pytest.fixture
def make_run() -> Settings:
    """The settings `make run` starts with: the shipped file, nothing from the environment."""
    return load_settings(MAKE_RUN_CONFIG, environ={})


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    """The embedded job store (SQLite), as `make run` has it."""
    async with opened(f"sqlite:///{tmp_path}/tickd.db") as sqlite:
        yield sqlite


@pytest.fixture
async def demo_products(tmp_path: Path) -> AsyncIterator[ProductStore]:
    """The demo's product data in the embedded store (SQLite), as `make run` seeds it."""
    products = open_product_store(f"sqlite:///{tmp_path}/demo-products.db")
    await products.open()
    try:
        await seed_demo_products(products)
        yield products
    finally:
        await products.close()


async def demo_emails(make_run: Settings, products: ProductStore, outbox: Outbox) -> None:
    """One run of the demo's scan job, with the scanner's settings from the shipped file."""
    config = make_run.handler_settings.get("alert_scanner", {})
    limits = limits_from({"from_address": DEMO_FROM_ADDRESS}, config)
    await scan(products, outbox.mailer, FakeClock(T0), limits)


def to(outbox: Outbox, address: str) -> EmailMessage:
    (message,) = [m for m in outbox.messages() if m["To"] == address]
    return message


async def email_flags(products: ProductStore, *alert_ids: str) -> list[Any]:
    flags = []
    for alert_id in alert_ids:
        stored = await products.get_alert(alert_id)
        assert stored is not None
        flags += [rule.get("notifyEmail") for rule in stored.doc["rules"]]
    return flags


GRACE = ("demo-alert-grace-atmega328p", "demo-alert-grace-max232")
ADA = ("demo-alert-ada-lm317t", "demo-alert-ada-ne555p")


async def test_make_runs_emails_unsubscribe_in_one_click_at_the_daemons_api(
    make_run: Settings,
    demo_products: ProductStore,
    outbox: Outbox,
    make_engine: EngineFactory,
) -> None:
    await demo_emails(make_run, demo_products, outbox)
    grace = to(outbox, "grace@example.com")
    assert grace["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    header = str(grace["List-Unsubscribe"])
    assert header.startswith("<") and header.endswith(">")
    link = urlsplit(header[1:-1])
    # The daemon's own API: where `make run` listens.
    assert (link.scheme, link.hostname, link.port, link.path) == (
        "http",
        make_run.api_host,
        make_run.api_port,
        "/unsubscribe",
    )
    text = grace.get_body(("plain",))
    assert text is not None and f"Stop all alert emails: {header[1:-1]}" in text.get_content()

    # The API as the daemon builds it from the same settings, answering the provider's POST.
    harness = make_engine({}, handler_settings=make_run.handler_settings)
    engine = harness.engine
    app = build_api(
        harness.settings,
        harness.registry,
        engine.ports,
        engine.metrics,
        engine,
        dispatch=False,
        resources={"products": demo_products},
    )
    assert await email_flags(demo_products, *GRACE) == [True, True, True, False]
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        response = await client.post(
            f"{link.path}?{link.query}", data={"List-Unsubscribe": "One-Click"}
        )
        assert response.status == 200, await response.text()
    assert await email_flags(demo_products, *GRACE) == [False, False, False, False]
    assert all(await email_flags(demo_products, *ADA))  # another user's alerts are left on
