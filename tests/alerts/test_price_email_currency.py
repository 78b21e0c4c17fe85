"""A price alert's email says every amount in the part's currency: the price before and after,
and the baseline its change is measured against."""

from __future__ import annotations

from email.message import EmailMessage

import pytest

from tests.alerts.builders import alert, part, price_rule
from tests.alerts.conftest import Outbox
from tickd.handlers.alert_scanner.scan import ScanLimits, scan
from tickd.handlers.product_store import ProductStore
from tickd.scheduler.ports.clock import FakeClock


def bodies(message: EmailMessage) -> tuple[str, str]:
    text, html = message.get_body(("plain",)), message.get_body(("html",))
    assert text is not None and html is not None
    return text.get_content(), html.get_content()


async def emailed(products: ProductStore, outbox: Outbox, clock: FakeClock) -> EmailMessage:
    await scan(products, outbox.mailer, clock, ScanLimits())
    (message,) = outbox.messages()
    return message


@pytest.mark.parametrize(
    ("currency", "price", "baseline", "now"),
    [
        ({"priceCurrency": "EUR"}, 3.68, "€3.20", "€3.68"),
        ({"priceCurrency": "CHF"}, 3.68, "3.20 CHF", "3.68 CHF"),
        ({}, "$3.68", "$3.20", "$3.68"),
    ],
)
async def test_the_why_line_gives_the_baseline_in_the_currency_of_the_price(
    products: ProductStore,
    outbox: Outbox,
    clock: FakeClock,
    currency: dict[str, str],
    price: object,
    baseline: str,
    now: str,
) -> None:
    await products.upsert_parts([part(name="ATMEGA328P-PU", price=price, **currency)])
    await products.upsert_alerts([alert("alert-1", price_rule(baseline=3.2))])
    text, html = bodies(await emailed(products, outbox, clock))
    for body in (text, html):
        assert f"rose 15% to {now}" in body
        assert f"+15% against the baseline {baseline}, more than +10%" in body
    assert f"after:  {now}" in text
    assert f"why:    +15% against the baseline {baseline}" in text


async def test_without_a_known_currency_the_baseline_is_shown_as_the_price_is(
    products: ProductStore, outbox: Outbox, clock: FakeClock
) -> None:
    await products.upsert_parts([part(name="LM317T", price=12.5)])
    await products.upsert_alerts([alert("alert-1", price_rule(baseline=10.0))])
    text, _ = bodies(await emailed(products, outbox, clock))
    assert "after:  12.50" in text
    assert "why:    +25% against the baseline 10.00, more than +10%" in text
