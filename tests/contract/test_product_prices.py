"""The catalogue walk's part of the ProductStore contract, against every backend (SQLite and
MongoDB, FerretDB here): the order parts are priced in, what a price check records, the price
history, and the vendors' daily quotas, shared by several instances at once."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from bson import ObjectId
from pymongo import AsyncMongoClient

from tests.fixtures.products import ProductDatabase
from tests.fixtures.times import T0
from tickd.handlers.product_store import PriceCheck, ProductStore, open_product_store
from tickd.handlers.product_store.mongodb import MongoProductStore
from tickd.scheduler.codec import Doc, as_datetime

DAY = T0.date()
HOUR = timedelta(hours=1)


def part(part_id: str, checked_at: datetime | None = None, **values: Any) -> Doc:
    doc: Doc = {"_id": part_id, "mpn": part_id.upper(), "price": 10.0, "priceCurrency": "EUR"}
    if checked_at is not None:
        doc["priceCheckedAt"] = checked_at
    return doc | values


def priced(part_id: str, at: datetime, price: float, currency: str = "USD") -> PriceCheck:
    return PriceCheck(part_id=part_id, checked_at=at, source="octo", price=price, currency=currency)


def failed(part_id: str, at: datetime, error: str = "503 Service Unavailable") -> PriceCheck:
    return PriceCheck(part_id=part_id, checked_at=at, source="octo", error=error)


def ids(docs: list[Doc]) -> list[str]:
    return [str(doc["_id"]) for doc in docs]


def time_of(value: Any) -> datetime:
    """A stored time as a datetime (SQLite keeps ISO strings, MongoDB BSON dates)."""
    return as_datetime(value, "time")


async def stored_part(products: ProductStore, part_id: str) -> Doc:
    found = await products.parts([part_id])
    assert set(found) == {part_id}
    return found[part_id]


# -- the walk's order ---------------------------------------------------------------------------


async def test_parts_never_priced_come_first_then_the_longest_ago_then_by_id(
    products: ProductStore,
) -> None:
    await products.upsert_parts(
        [
            part("recent", T0 - HOUR),
            part("old", T0 - timedelta(days=3)),
            part("tie-b", T0 - timedelta(days=4)),
            part("never-b"),
            part("oldest", T0 - timedelta(days=5)),
            part("tie-a", T0 - timedelta(days=4)),
            part("never-a", priceCheckedAt=None),
            part("at-the-bound", T0 - timedelta(days=1)),
        ]
    )
    found = await products.parts_to_price(checked_before=T0 - timedelta(days=1), limit=100)
    # Priced at or after `checked_before` is not due again.
    assert ids(found) == ["never-a", "never-b", "oldest", "tie-a", "tie-b", "old"]
    assert found[0]["mpn"] == "NEVER-A"  # documents as stored


async def test_the_limit_takes_the_first_parts_of_the_order(products: ProductStore) -> None:
    await products.upsert_parts(
        [part("b", T0 - timedelta(days=2)), part("a", T0 - timedelta(days=1)), part("never")]
    )
    assert ids(await products.parts_to_price(checked_before=T0, limit=2)) == ["never", "b"]
    assert ids(await products.parts_to_price(checked_before=T0, limit=1)) == ["never"]
    assert await products.parts_to_price(checked_before=T0, limit=0) == []


async def test_a_walk_that_stops_resumes_where_it_left_off(products: ProductStore) -> None:
    await products.upsert_parts([part(f"p{i}") for i in range(5)])
    first_page = await products.parts_to_price(checked_before=T0, limit=2)
    assert ids(first_page) == ["p0", "p1"]
    await products.record_price_checks([priced("p0", T0, 1.0), failed("p1", T0)])

    # The same run goes on with the parts it has not asked, failed ones included.
    assert ids(await products.parts_to_price(checked_before=T0, limit=10)) == ["p2", "p3", "p4"]
    # A later run takes the parts never priced first, then those it priced.
    later = await products.parts_to_price(checked_before=T0 + HOUR, limit=10)
    assert ids(later) == ["p2", "p3", "p4", "p0", "p1"]


# -- recording checks ---------------------------------------------------------------------------


async def test_a_price_is_recorded_on_the_part(products: ProductStore) -> None:
    await products.upsert_parts([part("p1", T0 - timedelta(days=2), lifecycle="Active")])
    await products.record_price_checks([priced("p1", T0, 12.5, "USD")])

    doc = await stored_part(products, "p1")
    assert (doc["price"], doc["priceCurrency"]) == (12.5, "USD")
    assert time_of(doc["priceCheckedAt"]) == T0
    assert "priceError" not in doc
    assert (doc["lifecycle"], doc["mpn"]) == ("Active", "P1")  # the rest is left as it was


async def test_an_error_keeps_the_price_and_a_later_success_clears_it(
    products: ProductStore,
) -> None:
    await products.upsert_parts([part("p1")])
    await products.record_price_checks([priced("p1", T0, 12.5)])
    await products.record_price_checks([failed("p1", T0 + HOUR, "429 Too Many Requests")])

    doc = await stored_part(products, "p1")
    assert (doc["price"], doc["priceCurrency"]) == (12.5, "USD")
    assert time_of(doc["priceCheckedAt"]) == T0 + HOUR
    assert doc["priceError"]["message"] == "429 Too Many Requests"
    assert time_of(doc["priceError"]["at"]) == T0 + HOUR
    assert len(await products.price_history("p1")) == 1  # an error adds no entry

    await products.record_price_checks([priced("p1", T0 + 2 * HOUR, 13.0, "EUR")])
    doc = await stored_part(products, "p1")
    assert (doc["price"], doc["priceCurrency"]) == (13.0, "EUR")
    assert time_of(doc["priceCheckedAt"]) == T0 + 2 * HOUR
    assert "priceError" not in doc


async def test_checks_of_one_part_in_one_batch_apply_in_order(products: ProductStore) -> None:
    await products.upsert_parts([part("p1"), part("p2")])
    await products.record_price_checks(
        [
            priced("p1", T0, 11.0),
            failed("p1", T0 + HOUR),
            failed("p2", T0),
            priced("p2", T0 + HOUR, 21.0),
        ]
    )
    p1, p2 = await stored_part(products, "p1"), await stored_part(products, "p2")
    assert (p1["price"], p1["priceError"]["message"]) == (11.0, "503 Service Unavailable")
    assert time_of(p1["priceCheckedAt"]) == T0 + HOUR
    assert (p2["price"], "priceError" in p2) == (21.0, False)
    assert time_of(p2["priceCheckedAt"]) == T0 + HOUR


async def test_a_part_that_no_longer_exists_is_skipped(products: ProductStore) -> None:
    await products.upsert_parts([part("p1"), part("p2")])
    recorded = await products.record_price_checks(
        [priced("gone", T0, 5.0), failed("gone-too", T0), priced("p1", T0, 12.5), failed("p2", T0)]
    )
    assert recorded == {"p1", "p2"}  # the caller learns which answers found no part
    assert set(await products.parts(["gone", "gone-too", "p1"])) == {"p1"}
    assert await products.price_history("gone") == []
    assert (await stored_part(products, "p1"))["price"] == 12.5
    assert ids(await products.parts_to_price(checked_before=T0 + HOUR, limit=10)) == ["p1", "p2"]


async def test_an_empty_batch_records_nothing(products: ProductStore) -> None:
    await products.upsert_parts([part("p1")])
    assert await products.record_price_checks([]) == set()
    assert "priceCheckedAt" not in await stored_part(products, "p1")


# -- the price history --------------------------------------------------------------------------


async def test_the_history_is_newest_first(products: ProductStore) -> None:
    await products.upsert_parts([part("p1"), part("p2")])
    await products.record_price_checks([priced("p1", T0 + HOUR, 11.0), priced("p2", T0, 99.0)])
    await products.record_price_checks([priced("p1", T0, 10.0, "EUR")])
    await products.record_price_checks([priced("p1", T0 + 2 * HOUR, 12.0)])

    history = await products.price_history("p1")
    assert [(e["price"], time_of(e["checkedAt"])) for e in history] == [
        (12.0, T0 + 2 * HOUR),
        (11.0, T0 + HOUR),
        (10.0, T0),
    ]
    oldest = history[-1]
    assert set(oldest) == {"_id", "partId", "price", "currency", "checkedAt", "source"}
    assert (oldest["partId"], oldest["currency"], oldest["source"]) == ("p1", "EUR", "octo")
    assert [e["price"] for e in await products.price_history("p1", limit=2)] == [12.0, 11.0]
    assert [e["price"] for e in await products.price_history("p2")] == [99.0]
    assert await products.price_history("p3") == []


async def test_a_check_recorded_twice_adds_one_entry(products: ProductStore) -> None:
    await products.upsert_parts([part("p1")])
    batch = [priced("p1", T0, 12.5), priced("p1", T0, 12.5)]  # twice in one batch
    await products.record_price_checks(batch)
    await products.record_price_checks(batch)  # and the batch replayed
    history = await products.price_history("p1")
    assert [(e["price"], time_of(e["checkedAt"])) for e in history] == [(12.5, T0)]


# -- quotas -------------------------------------------------------------------------------------


async def test_the_quota_is_granted_up_to_the_limit_then_nothing(products: ProductStore) -> None:
    assert await products.quota_used("octo", DAY) == 0
    grants = [await products.reserve_quota("octo", DAY, limit=10, want=4) for _ in range(4)]
    assert grants == [4, 4, 2, 0]
    assert await products.quota_used("octo", DAY) == 10
    assert await products.reserve_quota("octo", DAY, limit=10, want=1) == 0


async def test_nothing_is_granted_past_a_lowered_limit(products: ProductStore) -> None:
    assert await products.reserve_quota("octo", DAY, limit=10, want=8) == 8
    assert await products.reserve_quota("octo", DAY, limit=5, want=3) == 0
    assert await products.reserve_quota("octo", DAY, limit=10, want=0) == 0
    assert await products.quota_used("octo", DAY) == 8


async def test_each_key_and_each_day_has_its_own_quota(products: ProductStore) -> None:
    tomorrow = DAY + timedelta(days=1)
    assert await products.reserve_quota("octo", DAY, limit=3, want=5) == 3
    assert await products.reserve_quota("octo", DAY, limit=3, want=5) == 0
    assert await products.reserve_quota("mouser", DAY, limit=3, want=2) == 2
    assert await products.reserve_quota("octo", tomorrow, limit=3, want=1) == 1
    used = [
        await products.quota_used(key, day)
        for key, day in [("octo", DAY), ("mouser", DAY), ("octo", tomorrow), ("mouser", tomorrow)]
    ]
    assert used == [3, 2, 1, 0]


async def test_instances_reserving_at_once_never_take_more_than_the_limit(
    product_db: ProductDatabase,
) -> None:
    """Four handles (four instances), twenty reservations each, all at once: the day's limit is
    granted in all, exactly, and never more (on FerretDB too, whose updates are not atomic)."""
    handles = [await product_db.open() for _ in range(4)]
    calls = [
        handle.reserve_quota("octo", DAY, limit=50, want=3) for handle in handles for _ in range(20)
    ]
    grants = await asyncio.gather(*calls)
    assert all(0 <= granted <= 3 for granted in grants)
    assert sum(grants) == 50
    assert [await handle.quota_used("octo", DAY) for handle in handles] == [50] * 4
    assert await handles[0].reserve_quota("octo", DAY, limit=50, want=3) == 0


async def test_reservations_at_once_below_the_limit_are_all_counted(
    product_db: ProductDatabase,
) -> None:
    handles = [await product_db.open() for _ in range(3)]
    grants = await asyncio.gather(
        *(handle.reserve_quota("octo", DAY, limit=100, want=3) for handle in handles * 5)
    )
    assert 0 < sum(grants) <= 45
    assert await handles[0].quota_used("octo", DAY) == sum(grants)


# -- one backend only ---------------------------------------------------------------------------


async def test_a_sqlite_file_from_before_the_walk_is_opened_and_walked(tmp_path: Path) -> None:
    path = tmp_path / "tickd.db"
    with sqlite3.connect(path) as db:  # the parts table as older versions made it
        db.execute("CREATE TABLE parts (id TEXT PRIMARY KEY, doc TEXT NOT NULL)")
        db.execute("""INSERT INTO parts VALUES ('old', '{"_id": "old"}')""")
    db.close()
    products = open_product_store(f"sqlite:///{path}")
    await products.open()
    try:
        await products.upsert_parts([part("new", T0 - HOUR)])
        assert ids(await products.parts_to_price(checked_before=T0, limit=5)) == ["old", "new"]
        await products.record_price_checks([priced("old", T0, 3.0)])
        assert [e["price"] for e in await products.price_history("old")] == [3.0]
        assert await products.reserve_quota("octo", DAY, limit=2, want=5) == 2
    finally:
        await products.close()


async def test_parts_with_object_ids_are_priced(product_db: ProductDatabase) -> None:
    if not product_db.url.startswith("mongodb"):
        pytest.skip("ObjectIds are MongoDB's")
    products = await product_db.open()
    part_id = ObjectId()
    client: AsyncMongoClient[Doc] = AsyncMongoClient(product_db.url)
    try:
        await client.get_default_database()["parts"].insert_one({**part("x"), "_id": part_id})
        (found,) = await products.parts_to_price(checked_before=T0, limit=5)
        assert found["_id"] == part_id
        await products.record_price_checks([priced(str(part_id), T0, 7.0)])
        assert await client.get_default_database()["parts"].count_documents({}) == 1
    finally:
        await client.close()
    assert (await stored_part(products, str(part_id)))["price"] == 7.0
    assert [e["partId"] for e in await products.price_history(str(part_id))] == [str(part_id)]


async def test_mongodb_forgets_a_keys_slots_a_week_old(product_db: ProductDatabase) -> None:
    if not product_db.url.startswith("mongodb"):
        pytest.skip("slots are MongoDB's")
    products = await product_db.open()
    week_ago, older = DAY - timedelta(days=7), DAY - timedelta(days=8)
    for day in (older, week_ago):
        await products.reserve_quota("octo", day, limit=5, want=2)
    await products.reserve_quota("mouser", older, limit=5, want=2)
    await products.reserve_quota("octo", DAY, limit=5, want=1)
    assert await products.quota_used("octo", older) == 0
    assert await products.quota_used("octo", week_ago) == 2
    assert await products.quota_used("mouser", older) == 2  # another key's are its own


async def test_a_store_that_remembered_the_quota_spent_looks_again_before_saying_so(
    product_db: ProductDatabase,
) -> None:
    # Ops may delete a day's slots (a vendor that reset its count): the store must not go on
    # refusing from what it remembered.
    if not product_db.url.startswith("mongodb"):
        pytest.skip("slots are MongoDB's")
    products = await product_db.open()
    assert await products.reserve_quota("octo", DAY, limit=2, want=2) == 2
    assert await products.reserve_quota("octo", DAY, limit=2, want=1) == 0
    assert isinstance(products, MongoProductStore)
    await products.quota_slots.delete_many({"key": "octo"})
    assert await products.reserve_quota("octo", DAY, limit=2, want=2) == 2


# -- leases ---------------------------------------------------------------------------------------


async def test_a_lease_is_held_until_it_ends_or_is_released(products: ProductStore) -> None:
    name, later = "walk|octo", T0 + HOUR
    assert await products.take_lease(name, owner="a", until=later, now=T0)
    assert not await products.take_lease(name, owner="b", until=later, now=T0 + HOUR / 2)
    await products.release_lease(name, owner="b")  # not b's to give back
    assert not await products.take_lease(name, owner="b", until=later, now=T0 + HOUR / 2)
    assert await products.take_lease(name, owner="a", until=later + HOUR, now=T0)  # extended
    assert not await products.take_lease(name, owner="b", until=later, now=later + HOUR / 2)
    # Ended (its holder died): the next taker gets it.
    assert await products.take_lease(name, owner="b", until=later + 3 * HOUR, now=later + 2 * HOUR)
    await products.release_lease(name, owner="b")
    assert await products.take_lease(name, owner="c", until=later, now=T0)
    assert await products.take_lease("walk|other", owner="d", until=later, now=T0)  # its own


async def test_of_takers_at_once_one_wins(product_db: ProductDatabase) -> None:
    handles = [await product_db.open() for _ in range(4)]
    won = await asyncio.gather(
        *(
            handle.take_lease("walk|octo", owner=f"walker-{i}-{j}", until=T0 + HOUR, now=T0)
            for i, handle in enumerate(handles)
            for j in range(5)
        )
    )
    assert sum(won) == 1
