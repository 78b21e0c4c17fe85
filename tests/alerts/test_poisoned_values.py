"""One product value nobody foresaw (a price of "1e30", a name with a lone surrogate or with
bidirectional controls, a time at the end of the calendar) reaches the email readably, and one
that still cannot be rendered fails only its own notification: every other user's alert is
emailed, and the bad one is given up after a bounded number of scans, its error kept on it."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from decimal import Decimal
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest

from tests.alerts.builders import alert, part, rule
from tests.alerts.conftest import Outbox
from tickd.handlers.alert_scanner import emails
from tickd.handlers.alert_scanner.delivery import EmailPolicy
from tickd.handlers.alert_scanner.scan import ScanLimits, ScanResult, scan
from tickd.handlers.product_store import Notification, ProductStore, open_product_store
from tickd.scheduler.ports.clock import FakeClock

# Embeddings, overrides, isolates and marks: what could make a name read as something else.
BIDI_CONTROLS = set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")


def price_watch(alert_id: str, part_id: str, user: str) -> dict[str, Any]:
    """An alert on any change of the part's price, last seen at 1.0."""
    return alert(
        alert_id,
        rule("r1", "price_change", "changed", None, cursor=1.0),
        part_id=part_id,
        user=user,
    )


async def seeded(
    products: ProductStore, *, ada_price: Any = "1e30", ada_name: str = "LM317T"
) -> None:
    """Ada's part went from 1.0 to `ada_price` (a vendor feed's string); Grace's to 2.0."""
    await products.upsert_parts(
        [
            part("p-ada", price=ada_price, name=ada_name),
            part("p-grace", price=2.0, name="NE555"),
        ]
    )
    await products.upsert_alerts(
        [price_watch("a-ada", "p-ada", "ada"), price_watch("a-grace", "p-grace", "grace")]
    )


async def run(products: ProductStore, outbox: Outbox, clock: FakeClock) -> ScanResult:
    return await scan(products, outbox.mailer, clock, ScanLimits(email=EmailPolicy()))


async def of(products: ProductStore, user: str) -> Notification:
    (notification,) = await products.notifications(user_id=user)
    return notification


def by_recipient(outbox: Outbox) -> dict[str, EmailMessage]:
    return {str(message["To"]): message for message in outbox.messages()}


def rendered(message: EmailMessage) -> list[str]:
    """The subject, the text part and the HTML part."""
    text, html = message.get_body(("plain",)), message.get_body(("html",))
    assert text is not None and html is not None
    return [str(message["Subject"]), text.get_content(), html.get_content()]


async def test_a_price_of_1e30_is_emailed_in_digits_people_read(
    products: ProductStore, outbox: Outbox, clock: FakeClock
) -> None:
    await seeded(products)
    result = await run(products, outbox, clock)
    assert (result.emails_sent, result.emails_failed) == (2, 0)
    ada = by_recipient(outbox)["ada@example.com"]
    assert ada["Subject"] == "LM317T price rose 1e+32% to 1e+30"
    text = rendered(ada)[1]
    assert "before: 1.00" in text and "after:  1e+30" in text
    assert by_recipient(outbox)["grace@example.com"]["Subject"] == "NE555 price rose 100% to 2.00"


def quantized(value: float) -> str:
    """A percentage formatter with Decimal's default 28 digits: a 1e32 % move is beyond them
    and raises decimal.InvalidOperation, as an email's rendering may on a value nobody
    foresaw."""
    return f"{Decimal(repr(value)).quantize(Decimal('0.01'))}%"


async def test_an_email_that_cannot_be_rendered_is_given_up_and_holds_back_no_other(
    products: ProductStore,
    outbox: Outbox,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(emails, "percent_text", quantized)
    await seeded(products)
    bound = EmailPolicy().scans_before_giving_up
    assert bound == 3

    first = await run(products, outbox, clock)
    assert (first.triggered, first.emails_sent, first.emails_failed) == (2, 1, 1)
    assert list(by_recipient(outbox)) == ["grace@example.com"]
    ada = await of(products, "ada")
    assert (ada.email_attempts, ada.email_failed_at, ada.emailed_at) == (1, None, None)
    assert ada.email_error is not None and "InvalidOperation" in ada.email_error
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and ada.id in warnings[0].getMessage()

    for attempt in range(2, bound + 1):
        clock.advance(300)
        again = await run(products, outbox, clock)
        assert (again.emails_sent, again.emails_failed) == (0, 1)
        assert (await of(products, "ada")).email_attempts == attempt
    assert again.emails_given_up == 1
    given_up = await of(products, "ada")
    assert given_up.email_failed_at == clock.now() and given_up.emailed_at is None
    assert given_up.email_error is not None and "cannot be rendered" in given_up.email_error

    clock.advance(300)
    after = await run(products, outbox, clock)
    assert (after.emails_sent, after.emails_failed) == (0, 0)
    assert (await of(products, "ada")).email_attempts == bound
    assert len(outbox.messages()) == 1


@pytest.fixture
async def sqlite_products(tmp_path: Path) -> AsyncIterator[ProductStore]:
    """SQLite only: its JSON holds a lone surrogate (`"\\ud800"`), which BSON cannot."""
    store = open_product_store(f"sqlite:///{tmp_path}/products.db")
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def test_a_part_name_with_a_lone_surrogate_is_emailed_with_a_replacement_character(
    sqlite_products: ProductStore, outbox: Outbox, clock: FakeClock
) -> None:
    await seeded(sqlite_products, ada_price=2.0, ada_name="LM\ud800317T")
    result = await run(sqlite_products, outbox, clock)
    assert (result.emails_sent, result.emails_failed) == (2, 0)
    ada = by_recipient(outbox)["ada@example.com"]
    assert ada["Subject"] == "LM\ufffd317T price rose 100% to 2.00"
    assert all("LM\ufffd317T" in shown for shown in rendered(ada))
    assert (await of(sqlite_products, "ada")).part_name == "LM\ufffd317T"


async def test_bidirectional_controls_in_product_data_are_dropped_from_the_email(
    products: ProductStore, outbox: Outbox, clock: FakeClock
) -> None:
    """A name that an RLO (U+202E) would show as "invoiceexe.pdf", and a new alternate with an
    isolate in it: the words stay, in the order they are written."""
    await products.upsert_parts(
        [part("p1", name="\u200finvoice\u202efdp.exe\u202c", alternates=["ALT\u2067-1\u2069"])]
    )
    await products.upsert_alerts(
        [
            alert(
                "a1",
                rule("r1", "new_alternate", "changed", None, cursor=[]),
                rule("r2", "price_change", "changed", None, cursor=1.0),
                part_id="p1",
                user="ada",
            )
        ]
    )
    assert (await run(products, outbox, clock)).emails_sent == 1
    (message,) = outbox.messages()
    shown = rendered(message)
    assert "invoicefdp.exe" in shown[0]
    assert all("invoicefdp.exe" in s and "ALT-1" in s for s in shown[1:])
    assert all(not BIDI_CONTROLS & set(s) for s in shown)


@pytest.mark.parametrize(
    "changes",
    [
        {"lastCheckedAt": "9999-12-31T23:59:59+00:00"},
        {"lastCheckedAt": "0001-01-01T00:00:00+01:00"},
        {"lastCheckedAt": "2026-03-02T08:00:00+00:00", "cooldownMinutes": 1e300},
    ],
    ids=["checked-at-the-end-of-time", "checked-before-the-first-utc-time", "cooldown-1e300"],
)
async def test_a_rule_time_beyond_the_calendar_does_not_stop_the_scan(
    products: ProductStore, outbox: Outbox, clock: FakeClock, changes: dict[str, Any]
) -> None:
    await seeded(products, ada_price=2.0)
    ada = price_watch("a-ada", "p-ada", "ada")
    ada["rules"][0] |= changes
    await products.upsert_alerts([ada])
    await run(products, outbox, clock)
    assert "grace@example.com" in by_recipient(outbox)
    stored = await products.get_alert("a-ada")
    assert stored is not None and stored.doc.get("nextCheckAt") is not None
