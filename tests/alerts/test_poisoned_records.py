"""One stored record nobody foresaw (a notification with an unreadable `createdAt`, a document
SQLite holds but Python's JSON parser refuses, a rule holding NaN) fails only itself: every
other user's alert is still emailed, and the bad record is given up or reported with its error.
The corruption is written straight into the database, as another writer would leave it."""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import pytest
from pymongo import AsyncMongoClient

from tests.alerts.builders import alert, part, rule
from tests.alerts.conftest import Outbox, ProductDatabase
from tests.fixtures.times import T0
from tickd.handlers.alert_scanner.delivery import EmailPolicy
from tickd.handlers.alert_scanner.scan import ScanLimits, ScanResult, scan
from tickd.handlers.product_store import Notification, ProductStore
from tickd.scheduler.codec import Doc
from tickd.scheduler.ports.clock import FakeClock

# Past Python's default limit on the digits of an int read from text (4300).
HUGE_INT = "1" * 5000
# Deeper than Python's JSON parser recurses, within what SQLite 3.40's reads.
DEEP_LIST = "[" * 1500 + "]" * 1500


def waiting(notification_id: str, user: str) -> Notification:
    return Notification(
        id=notification_id,
        user_id=user,
        email=f"{user}@example.com",
        alert_id=f"a-{user}",
        rule_id="r1",
        part_id=f"p-{user}",
        part_name=f"P-{user.upper()}",
        type="price_change",
        operator="changed",
        threshold=None,
        previous_value=1.0,
        current_value=2.0,
        message=f"P-{user.upper()}: price 1 -> 2",
        reason="changed",
        created_at=T0,
        notify_email=True,
    )


def price_watch(user: str, **rule_fields: Any) -> Doc:
    """An alert on any change of the user's part's price, last seen at 1.0."""
    watch = rule("r1", "price_change", "changed", None, cursor=1.0, **rule_fields)
    return alert(f"a-{user}", watch, part_id=f"p-{user}", user=user)


async def run(products: ProductStore, outbox: Outbox, clock: FakeClock) -> ScanResult:
    return await scan(products, outbox.mailer, clock, ScanLimits(email=EmailPolicy()))


def recipients(outbox: Outbox) -> list[str]:
    return [str(message["To"]) for message in outbox.messages()]


# -- writing straight into the database --------------------------------------------------------


@contextmanager
def sqlite_file(product_db: ProductDatabase) -> Iterator[sqlite3.Connection]:
    db = sqlite3.connect(urlsplit(product_db.url).path)
    try:
        with db:
            yield db
    finally:
        db.close()


def sqlite_field(product_db: ProductDatabase, table: str, doc_id: str, name: str, raw: str) -> None:
    """Sets `name` in the stored JSON to the raw JSON text `raw` (which Python may not read)."""
    with sqlite_file(product_db) as db:
        (text,) = db.execute(f"SELECT doc FROM {table} WHERE id = ?", (doc_id,)).fetchone()
        doc = json.loads(text)
        doc[name] = "@raw@"
        text = json.dumps(doc).replace('"@raw@"', raw)
        db.execute(f"UPDATE {table} SET doc = ? WHERE id = ?", (text, doc_id))


def sqlite_doc(product_db: ProductDatabase, table: str, doc_id: str) -> str:
    with sqlite_file(product_db) as db:
        (text,) = db.execute(f"SELECT doc FROM {table} WHERE id = ?", (doc_id,)).fetchone()
    return str(text)


async def mongo_set(product_db: ProductDatabase, collection: str, doc_id: str, fields: Doc) -> None:
    client: AsyncMongoClient[Doc] = AsyncMongoClient(product_db.url)
    try:
        await client.get_default_database()[collection].update_one(
            {"_id": doc_id}, {"$set": fields}
        )
    finally:
        await client.close()


async def mongo_doc(product_db: ProductDatabase, collection: str, doc_id: str) -> Doc:
    client: AsyncMongoClient[Doc] = AsyncMongoClient(product_db.url)
    try:
        found = await client.get_default_database()[collection].find_one({"_id": doc_id})
    finally:
        await client.close()
    assert found is not None
    return found


def is_sqlite(product_db: ProductDatabase) -> bool:
    return product_db.url.startswith("sqlite:")


# -- a notification that cannot be read ---------------------------------------------------------

UNREADABLE_FIELDS = {
    "created-at-not-a-time": ("createdAt", '"yesterday"'),
    "attempts-not-a-number": ("emailAttempts", '"three"'),
    "huge-int": ("threshold", HUGE_INT),
    "nested-too-deep": ("currentValue", DEEP_LIST),
}


@pytest.mark.parametrize("bad", list(UNREADABLE_FIELDS))
async def test_an_unreadable_notification_is_given_up_and_every_other_one_is_emailed(
    products: ProductStore,
    product_db: ProductDatabase,
    outbox: Outbox,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
    bad: str,
) -> None:
    name, raw = UNREADABLE_FIELDS[bad]
    await products.insert_notifications([waiting("n-ada", "ada"), waiting("n-grace", "grace")])
    if is_sqlite(product_db):
        sqlite_field(product_db, "notifications", "n-ada", name, raw)
    elif bad in ("huge-int", "nested-too-deep"):
        pytest.skip("BSON holds neither: this one is the SQLite store's JSON")
    else:
        await mongo_set(product_db, "notifications", "n-ada", {name: json.loads(raw)})

    first = await run(products, outbox, clock)
    assert recipients(outbox) == ["grace@example.com"]
    assert (first.emails_sent, first.emails_given_up) == (1, 1)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "n-ada" in warnings[0]

    if is_sqlite(product_db):
        stored = sqlite_doc(product_db, "notifications", "n-ada")
        assert "cannot be read" in stored and '"emailFailedAt"' in stored
    else:
        doc = await mongo_doc(product_db, "notifications", "n-ada")
        assert "cannot be read" in doc["emailError"] and doc["emailFailedAt"] is not None

    clock.advance(3600)
    again = await run(products, outbox, clock)
    assert (again.emails_sent, again.emails_given_up) == (0, 0)
    assert [n.id for n in await products.notifications()] == ["n-grace"]


@pytest.mark.parametrize("text", ["{not json", "[" * 5000 + "]" * 5000], ids=["not-json", "deep"])
async def test_a_notification_sqlite_cannot_parse_either_is_given_up_and_kept(
    products: ProductStore,
    product_db: ProductDatabase,
    outbox: Outbox,
    clock: FakeClock,
    text: str,
) -> None:
    """Text no JSON parser reads: kept whole beside its error, and no longer pending."""
    if not is_sqlite(product_db):
        pytest.skip("the SQLite store's JSON text")
    await products.insert_notifications([waiting("n-ada", "ada"), waiting("n-grace", "grace")])
    with sqlite_file(product_db) as db:
        db.execute("UPDATE notifications SET doc = ? WHERE id = 'n-ada'", (text,))
    first = await run(products, outbox, clock)
    assert (recipients(outbox), first.emails_given_up) == (["grace@example.com"], 1)
    stored = json.loads(sqlite_doc(product_db, "notifications", "n-ada"))
    assert stored["storedText"] == text and "cannot be read" in stored["emailError"]
    clock.advance(3600)
    assert (await run(products, outbox, clock)).emails_given_up == 0


# -- SQLite rows Python's JSON parser refuses ---------------------------------------------------


async def seeded(products: ProductStore) -> None:
    """Ada's and Grace's parts went from 1.0 to 2.0, each watched by its user."""
    await products.upsert_parts([part("p-ada", price=2.0), part("p-grace", price=2.0)])
    await products.upsert_alerts([price_watch("ada"), price_watch("grace")])


@pytest.mark.parametrize("raw", [HUGE_INT, DEEP_LIST], ids=["huge-int", "nested-too-deep"])
async def test_an_alert_that_cannot_be_loaded_is_a_scan_error_of_its_own(
    products: ProductStore,
    product_db: ProductDatabase,
    outbox: Outbox,
    clock: FakeClock,
    raw: str,
) -> None:
    if not is_sqlite(product_db):
        pytest.skip("the SQLite store's JSON text")
    await seeded(products)
    sqlite_field(product_db, "alerts", "a-ada", "note", raw)

    first = await run(products, outbox, clock)
    assert recipients(outbox) == ["grace@example.com"]
    assert first.errors == 1 and "a-ada" in first.error_samples[0]
    assert "cannot be read" in first.error_samples[0]
    # Read again later, not at the head of every scan.
    assert (await run(products, outbox, clock)).alerts_read == 0
    assert sqlite_doc(product_db, "alerts", "a-ada").count(raw) == 1


@pytest.mark.parametrize("raw", [HUGE_INT, DEEP_LIST], ids=["huge-int", "nested-too-deep"])
async def test_a_part_that_cannot_be_loaded_fails_only_its_own_alert(
    products: ProductStore,
    product_db: ProductDatabase,
    outbox: Outbox,
    clock: FakeClock,
    raw: str,
) -> None:
    if not is_sqlite(product_db):
        pytest.skip("the SQLite store's JSON text")
    await seeded(products)
    sqlite_field(product_db, "parts", "p-ada", "datasheet", raw)

    result = await run(products, outbox, clock)
    assert recipients(outbox) == ["grace@example.com"]
    assert result.errors == 1 and result.triggered == 1
    stored = await products.get_alert("a-ada")
    assert stored is not None and stored.doc["rules"][0].get("lastError")


# -- a rule holding NaN -------------------------------------------------------------------------


def skip_on_ferretdb(product_db: ProductDatabase) -> None:
    if not product_db.atomic_updates:
        pytest.skip("FerretDB 1.24 stores no NaN")


async def test_a_rule_holding_nan_is_written_like_any_other(
    products: ProductStore, product_db: ProductDatabase, outbox: Outbox, clock: FakeClock
) -> None:
    skip_on_ferretdb(product_db)
    await seeded(products)
    await products.upsert_alerts([price_watch("ada", weight=float("nan"))])

    first = await run(products, outbox, clock)
    assert (first.conflicts, first.triggered) == (0, 2)
    assert sorted(recipients(outbox)) == ["ada@example.com", "grace@example.com"]
    # Its write went in: the alert is not read again before its cooldown.
    assert (await run(products, outbox, clock)).alerts_read == 0
