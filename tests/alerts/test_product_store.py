"""The ProductStore contract, against every backend (SQLite and MongoDB)."""

from __future__ import annotations

import asyncio
import sqlite3
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from bson import ObjectId
from pymongo import AsyncMongoClient

from tests.alerts.builders import alert, part, price_rule, rule
from tests.alerts.conftest import ProductDatabase
from tests.conftest import make_job
from tests.fixtures.times import T0
from tickd.handlers.alert_scanner.normalize import timestamp
from tickd.handlers.product_store import (
    Notification,
    ProductStore,
    Reschedule,
    RuleUpdate,
    open_product_store,
)
from tickd.scheduler.codec import Doc
from tickd.scheduler.store import open_store

NOTIFICATION = Notification(
    id="n1",
    user_id="user-1",
    email="user-1@example.com",
    alert_id="alert-1",
    rule_id="r1",
    part_id="part-1",
    part_name="PART-1",
    type="price_change",
    operator="gt",
    threshold=10,
    previous_value=10.0,
    current_value=12.0,
    message="PART-1: price 10 -> 12",
    reason="+20.00% against the baseline 10, more than +10%",
    created_at=T0,
    notify_email=True,
)


def notification(notification_id: str = "n1", **fields: Any) -> Notification:
    return replace(NOTIFICATION, id=notification_id, **fields)


def update_of(
    read: Doc, index: int = 0, *, scan_id: str = "scan-a", **changes: object
) -> RuleUpdate:
    return RuleUpdate(
        alert_id=str(read["_id"]),
        index=index,
        rule_as_read=read["rules"][index],
        changes={"lastCheckedAt": T0, **changes},
        scan_id=scan_id,
        next_check_at=T0 + timedelta(hours=1),
    )


def test_the_url_picks_the_backend() -> None:
    assert type(open_product_store("sqlite:///var/x.db")).__name__ == "SQLiteProductStore"
    assert type(open_product_store("mongodb://h/db")).__name__ == "MongoProductStore"
    with pytest.raises(ValueError, match=r"resource_urls\.products"):
        open_product_store("redis://h")


# -- due alerts ---------------------------------------------------------------------------------


async def test_due_alerts_are_active_with_an_active_rule_and_not_scheduled_later(
    products: ProductStore,
) -> None:
    await products.upsert_alerts(
        [
            alert("due-unscheduled"),
            alert("due-past", nextCheckAt=T0 - timedelta(minutes=5)),
            alert("due-now", nextCheckAt=T0),
            alert("later", nextCheckAt=T0 + timedelta(seconds=1)),
            alert("inactive", active=False),
            alert("no-active-rule", price_rule(active=False)),
            alert("active-missing", active=None),
        ]
    )
    due = await products.due_alerts(T0, 10)
    assert [a.id for a in due] == ["due-unscheduled", "due-past", "due-now"]


# `active` as the TypeScript backend and the web UI write it, beside the boolean.
ACTIVE_FORMS: list[Any] = [True, 1, 1.0, "true", "TRUE", " Yes ", "y", "On", "1", "true\n"]
INACTIVE_FORMS: list[Any] = [
    False, 0, 0.0, 2, "false", "No", "0", "off", "", "maybe", "truest",
    # "yes" with a long s, which a Unicode case fold would read as "yes"; a vertical tab.
    "ye\u017f", "\vtrue", {"a": 1},
]  # fmt: skip


async def test_an_alerts_active_is_read_in_every_form_the_product_writes(
    products: ProductStore,
) -> None:
    forms = ACTIVE_FORMS + INACTIVE_FORMS
    await products.upsert_alerts([alert(f"a{i:02}", active=form) for i, form in enumerate(forms)])
    due = await products.due_alerts(T0, 100)
    assert [a.id for a in due] == [f"a{i:02}" for i in range(len(ACTIVE_FORMS))]


async def test_a_rules_active_is_read_in_every_form_the_product_writes(
    products: ProductStore,
) -> None:
    forms = ACTIVE_FORMS + INACTIVE_FORMS
    await products.upsert_alerts(
        [alert(f"a{i:02}", price_rule(active=form)) for i, form in enumerate(forms)]
        + [alert("one-of-two", price_rule("r1", active="no"), price_rule("r2", active="YES"))]
    )
    due = await products.due_alerts(T0, 100)
    expected = [f"a{i:02}" for i in range(len(ACTIVE_FORMS))] + ["one-of-two"]
    assert [a.id for a in due] == expected


async def test_due_alerts_come_longest_waiting_first_and_limited(products: ProductStore) -> None:
    await products.upsert_alerts(
        [alert(f"a{i}", nextCheckAt=T0 - timedelta(minutes=i)) for i in range(5)]
        + [alert("b-never"), alert("a-never")]
    )
    assert [a.id for a in await products.due_alerts(T0, 4)] == ["a-never", "b-never", "a4", "a3"]
    assert await products.due_alerts(T0, 0) == []


async def test_alerts_are_handed_over_as_stored(products: ProductStore) -> None:
    stored = alert("a1", price_rule(cursor=" 10 "), extra={"nested": [1, "x"]})
    await products.upsert_alerts([stored])
    (found,) = await products.due_alerts(T0, 1)
    assert found.id == "a1"
    assert found.doc["rules"] == stored["rules"]
    assert found.doc["extra"] == {"nested": [1, "x"]}


# -- parts --------------------------------------------------------------------------------------


async def test_parts_are_looked_up_by_id(products: ProductStore) -> None:
    await products.upsert_parts([part("p1", price=" 4.20 "), part("p2")])
    await products.upsert_parts([part("p2", price=5)])
    found = await products.parts(["p1", "p2", "missing"])
    assert set(found) == {"p1", "p2"}
    assert found["p1"]["price"] == " 4.20 "
    assert found["p2"]["price"] == 5
    assert await products.parts([]) == {}


# -- conditional rule writes --------------------------------------------------------------------


async def test_a_rule_update_applies_to_the_rule_as_read(products: ProductStore) -> None:
    await products.upsert_alerts([alert("a1", price_rule("r1"), price_rule("r2"))])
    read = (await products.due_alerts(T0, 1))[0].doc
    applied = await products.update_rules([update_of(read, 1, cursor=11.0, lastError=None)])
    assert applied == {("a1", 1)}
    stored = await products.get_alert("a1")
    assert stored is not None
    r1, r2 = stored.doc["rules"]
    assert r1 == read["rules"][0]
    assert r2["cursor"] == 11.0 and r2["lastScanId"] == "scan-a" and r2["lastError"] is None
    assert _time(r2["lastCheckedAt"]) == T0
    assert _time(stored.doc["nextCheckAt"]) == T0 + timedelta(hours=1)
    assert r2["threshold"] == 10  # the rest of the rule is left as it was


async def test_of_two_updates_of_one_read_only_the_first_applies(products: ProductStore) -> None:
    await products.upsert_alerts([alert("a1")])
    read = (await products.due_alerts(T0, 1))[0].doc
    first = await products.update_rules([update_of(read, scan_id="scan-a", cursor=1.0)])
    second = await products.update_rules([update_of(read, scan_id="scan-b", cursor=2.0)])
    assert (first, second) == ({("a1", 0)}, set())
    stored = await products.get_alert("a1")
    assert stored is not None and stored.doc["rules"][0]["cursor"] == 1.0


async def test_in_one_batch_two_updates_of_one_read_apply_once(products: ProductStore) -> None:
    await products.upsert_alerts([alert("a1")])
    read = (await products.due_alerts(T0, 1))[0].doc
    applied = await products.update_rules(
        [
            update_of(read, scan_id="scan-a", cursor=1.0),
            update_of(read, scan_id="scan-b", cursor=2.0),
        ]
    )
    assert applied == {("a1", 0)}


async def test_an_update_is_refused_once_the_product_changed_the_rule(
    products: ProductStore,
) -> None:
    await products.upsert_alerts([alert("a1", price_rule("r1"), price_rule("r2"))])
    read = (await products.due_alerts(T0, 1))[0].doc
    # The user edits the threshold, and removes the first rule (the second one moves up).
    edited = alert("a1", price_rule("r1", threshold=20), price_rule("r2"))
    await products.upsert_alerts([edited])
    assert await products.update_rules([update_of(read, 0)]) == set()
    await products.upsert_alerts([alert("a1", price_rule("r2"))])
    assert await products.update_rules([update_of(read, 1)]) == set()
    stored = await products.get_alert("a1")
    assert stored is not None and "lastScanId" not in stored.doc["rules"][0]


async def test_an_alerts_updates_apply_together_or_not_at_all(products: ProductStore) -> None:
    await products.upsert_alerts([alert("a1", price_rule("r1"), price_rule("r2")), alert("a2")])
    a1, a2 = (alert.doc for alert in await products.due_alerts(T0, 2))
    stale = {**a1, "rules": [a1["rules"][0], {**a1["rules"][1], "cursor": 99.0}]}
    applied = await products.update_rules([update_of(a1, 0), update_of(stale, 1), update_of(a2, 0)])
    assert applied == {("a2", 0)}
    stored = await products.get_alert("a1")
    assert stored is not None and all("lastScanId" not in r for r in stored.doc["rules"])


async def test_a_reschedule_applies_only_to_the_next_check_as_read(products: ProductStore) -> None:
    await products.upsert_alerts([alert("a1", nextCheckAt=T0)])
    read = (await products.due_alerts(T0, 1))[0].doc
    later = T0 + timedelta(hours=2)
    move = Reschedule(alert_id="a1", next_check_at_as_read=read["nextCheckAt"], next_check_at=later)
    assert await products.update_rules([], [move]) == set()
    assert await products.due_alerts(T0 + timedelta(hours=1), 1) == []
    await products.update_rules([], [replace(move, next_check_at=T0)])  # stale: not applied
    assert await products.due_alerts(T0 + timedelta(hours=1), 1) == []
    assert [a.id for a in await products.due_alerts(later, 1)] == ["a1"]


async def test_two_handles_cannot_both_apply_one_read(product_db: ProductDatabase) -> None:
    first, second = await product_db.open(), await product_db.open()
    await first.upsert_alerts([alert("a1")])
    read = (await first.due_alerts(T0, 1))[0].doc
    results = [
        await first.update_rules([update_of(read, scan_id="scan-a")]),
        await second.update_rules([update_of(read, scan_id="scan-b")]),
    ]
    assert sorted(map(len, results)) == [0, 1]


# -- notifications ------------------------------------------------------------------------------


async def test_a_notification_id_is_inserted_once(products: ProductStore) -> None:
    assert await products.insert_notifications([notification("n1"), notification("n2")]) == 2
    assert await products.insert_notifications([notification("n1", message="again")]) == 0
    assert await products.insert_notifications([]) == 0
    stored = await products.notifications()
    assert [n.id for n in stored] == ["n1", "n2"]
    assert stored[0] == notification("n1")


async def test_notifications_of_one_user(products: ProductStore) -> None:
    await products.insert_notifications(
        [notification("n1"), notification("n2", user_id="user-2"), notification("n3")]
    )
    assert [n.id for n in await products.notifications(user_id="user-1")] == ["n1", "n3"]
    assert len(await products.notifications(limit=2)) == 2


async def test_claims_are_exclusive_oldest_first_and_bounded(products: ProductStore) -> None:
    await products.insert_notifications(
        [
            notification("n-late", created_at=T0 + timedelta(seconds=2)),
            notification("n-early"),
            notification("n-quiet", notify_email=False),
        ]
    )
    until = T0 + timedelta(minutes=10)
    first = (await products.claim_unemailed(now=T0, until=until, token="a", limit=1)).notifications
    rest = (await products.claim_unemailed(now=T0, until=until, token="b", limit=10)).notifications
    none = (await products.claim_unemailed(now=T0, until=until, token="c", limit=10)).notifications
    assert ([n.id for n in first], [n.id for n in rest], none) == (["n-early"], ["n-late"], [])


async def test_an_expired_or_released_claim_can_be_taken_again(products: ProductStore) -> None:
    await products.insert_notifications([notification("n1"), notification("n2")])
    until = T0 + timedelta(minutes=10)
    await products.claim_unemailed(now=T0, until=until, token="dead", limit=1)
    await products.claim_unemailed(now=T0, until=until, token="alive", limit=1)
    await products.release_email_claims("alive")
    again = (
        await products.claim_unemailed(now=T0, until=until, token="next", limit=10)
    ).notifications
    assert [n.id for n in again] == ["n2"]
    after_expiry = until + timedelta(seconds=1)
    taken = (
        await products.claim_unemailed(now=after_expiry, until=after_expiry, token="x", limit=10)
    ).notifications
    assert [n.id for n in taken] == ["n1", "n2"]


async def test_an_emailed_notification_is_never_claimed_again(products: ProductStore) -> None:
    await products.insert_notifications([notification("n1")])
    claimed = (await products.claim_unemailed(now=T0, until=T0, token="a", limit=10)).notifications
    await products.mark_emailed([n.id for n in claimed], T0 + timedelta(seconds=3))
    later = T0 + timedelta(days=1)
    assert (
        await products.claim_unemailed(now=later, until=later, token="b", limit=10)
    ).notifications == []
    (stored,) = await products.notifications()
    assert stored.emailed_at == T0 + timedelta(seconds=3)


async def test_email_failures_are_counted_and_giving_up_is_final(products: ProductStore) -> None:
    await products.insert_notifications([notification("n1"), notification("n2")])
    await products.claim_unemailed(now=T0, until=T0 + timedelta(hours=1), token="a", limit=10)
    await products.record_email_failure(["n1", "n2"], error="451 later", at=T0, give_up=False)
    await products.record_email_failure(["n2"], error="550 no such user", at=T0, give_up=True)
    n1, n2 = await products.notifications()
    assert (n1.email_attempts, n1.email_error, n1.email_failed_at) == (1, "451 later", None)
    assert (n2.email_attempts, n2.email_error, n2.email_failed_at) == (2, "550 no such user", T0)
    again = (await products.claim_unemailed(now=T0, until=T0, token="b", limit=10)).notifications
    assert [n.id for n in again] == ["n1"]  # the failure dropped the claim; n2 is given up


async def test_a_notification_keeps_its_currency_and_time_zone(products: ProductStore) -> None:
    priced = notification("n1", currency="EUR", time_zone="Europe/Berlin")
    await products.insert_notifications([priced, notification("n2")])
    assert await products.notifications() == [priced, notification("n2")]


# -- unsubscribe --------------------------------------------------------------------------------


def email_flags(stored: Any) -> list[Any]:
    assert stored is not None
    return [rule.get("notifyEmail") for rule in stored.doc["rules"]]


async def test_turning_email_off_for_one_alert_sets_its_rules_and_pending_notifications(
    products: ProductStore,
) -> None:
    await products.upsert_alerts(
        [
            alert("a1", price_rule("r1"), rule("r2", notifyEmail=False), rule("r3")),
            alert("a2", price_rule("r1")),
        ]
    )
    await products.insert_notifications(
        [notification("n1", alert_id="a1"), notification("n2", alert_id="a2")]
    )
    assert await products.turn_off_email("user-1", "a1") == 1
    assert email_flags(await products.get_alert("a1")) == [False, False, False]
    assert email_flags(await products.get_alert("a2")) == [True]
    claimed = (await products.claim_unemailed(now=T0, until=T0, token="t", limit=10)).notifications
    assert [n.id for n in claimed] == ["n2"]  # what waited for a1 is not sent either
    assert await products.turn_off_email("user-1", "a1") == 0  # idempotent
    assert email_flags(await products.get_alert("a1")) == [False, False, False]


async def test_turning_email_off_for_all_alerts_of_a_user_leaves_other_users_alone(
    products: ProductStore,
) -> None:
    await products.upsert_alerts(
        [alert("a1"), alert("a2"), alert("b1", user="user-2"), alert("b2", user="user-2")]
    )
    assert await products.turn_off_email("user-1", None) == 2
    assert email_flags(await products.get_alert("a1")) == [False]
    assert email_flags(await products.get_alert("a2")) == [False]
    assert email_flags(await products.get_alert("b1")) == [True]
    # An alert of another user is not turned off, even when named; nor is a missing one.
    assert await products.turn_off_email("user-1", "b2") == 0
    assert await products.turn_off_email("user-1", "missing") == 0
    assert email_flags(await products.get_alert("b2")) == [True]


# -- hard bounces -------------------------------------------------------------------------------


async def test_bounces_are_counted_per_address_with_the_domain_in_any_case(
    products: ProductStore,
) -> None:
    assert await products.record_bounce("ada@Example.COM", error="550 first", at=T0) == 1
    later = T0 + timedelta(hours=1)
    assert await products.record_bounce("ada@example.com", error="550 again", at=later) == 2
    assert await products.record_bounce("bob@example.com", error="550 bob", at=T0) == 1
    (ada,) = await products.bounces(["ada@EXAMPLE.com", "nobody@example.com"])
    assert (ada.address, ada.count, ada.first_at, ada.last_at) == (
        "ada@example.com",
        2,
        T0,
        later,
    )
    assert ada.last_error == "550 again"
    assert [b.address for b in await products.bounces()] == ["ada@example.com", "bob@example.com"]
    assert len(await products.bounces(limit=1)) == 1
    # The local part is not folded: Ada@ is another mailbox for the protocol.
    assert await products.bounces(["Ada@example.com"]) == []


async def test_a_cleared_bounce_starts_counting_again(products: ProductStore) -> None:
    await products.record_bounce("ada@example.com", error="550", at=T0)
    await products.record_bounce("ada@example.com", error="550", at=T0)
    assert await products.clear_bounce("ada@EXAMPLE.com") is True
    assert await products.clear_bounce("ada@example.com") is False
    assert await products.bounces() == []
    assert await products.record_bounce("ada@example.com", error="550", at=T0) == 1


# -- seeding ------------------------------------------------------------------------------------


async def test_inserting_missing_alerts_keeps_existing_ones(products: ProductStore) -> None:
    await products.upsert_alerts([alert("a1", price_rule(cursor=99.0))])
    assert await products.insert_missing_alerts([alert("a1"), alert("a2")]) == 1
    stored = await products.get_alert("a1")
    assert stored is not None and stored.doc["rules"][0]["cursor"] == 99.0
    assert await products.get_alert("nope") is None


# -- MongoDB only -------------------------------------------------------------------------------


async def test_object_ids_of_the_product_are_matched(product_db: ProductDatabase) -> None:
    if not product_db.url.startswith("mongodb"):
        pytest.skip("ObjectIds are MongoDB's")
    products = await product_db.open()
    alert_id, part_id = ObjectId(), ObjectId()
    client: AsyncMongoClient[Doc] = AsyncMongoClient(product_db.url)
    try:
        db = client.get_default_database()
        await db["alerts"].insert_one({**alert("a", rule()), "_id": alert_id, "partId": part_id})
        await db["parts"].insert_one({**part(), "_id": part_id})
    finally:
        await client.close()
    (found,) = await products.due_alerts(T0, 1)
    assert found.id == str(alert_id)
    assert set(await products.parts([str(part_id)])) == {str(part_id)}
    assert await products.update_rules([update_of({**found.doc, "_id": found.id})]) == {
        (str(alert_id), 0)
    }


def _time(value: object) -> datetime | None:
    """A stored time as a datetime (SQLite keeps ISO strings)."""
    return timestamp(value)


async def test_simultaneous_claims_never_share_a_notification(product_db: ProductDatabase) -> None:
    """Two handles (two processes) claim the same notifications at the same moment, many times:
    every notification goes to exactly one of them (on FerretDB too, whose updates are not
    atomic: a claim is an insert)."""
    first, second = await product_db.open(), await product_db.open()
    until = T0 + timedelta(minutes=10)
    for round_ in range(10):
        ids = [f"n{round_}-{i}" for i in range(5)]
        await first.insert_notifications([notification(i) for i in ids])
        claims = await asyncio.gather(
            first.claim_unemailed(now=T0, until=until, token=f"a{round_}", limit=10),
            second.claim_unemailed(now=T0, until=until, token=f"b{round_}", limit=10),
        )
        claimed = [n.id for batch in claims for n in batch.notifications]
        assert sorted(claimed) == ids
        await first.mark_emailed(ids, T0)


async def test_on_sqlite_the_product_tables_live_beside_the_jobs(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/tickd.db"
    jobs, products = open_store(url), open_product_store(url)
    await jobs.open()
    await products.open()
    try:
        job = make_job("alert_scanner", "alert_scanner")
        await asyncio.gather(jobs.insert_job(job), products.upsert_alerts([alert("a1")]))
        assert await jobs.get_job_by_name("alert_scanner") is not None
        assert [a.id for a in await products.due_alerts(T0, 5)] == ["a1"]
    finally:
        await products.close()
        await jobs.close()


async def test_on_sqlite_alerts_stored_before_active_was_normalised_become_due(
    tmp_path: Path,
) -> None:
    """A file written when only a boolean `active` counted: its `scannable` is scored again when
    the store opens."""
    url = f"sqlite:///{tmp_path}/tickd.db"
    products = open_product_store(url)
    await products.open()
    await products.upsert_alerts(
        [alert("words", price_rule(active="yes"), active="true"), alert("off", active="false")]
    )
    await products.close()
    with sqlite3.connect(tmp_path / "tickd.db") as db:
        db.execute("UPDATE alerts SET scannable = 0")
    db.close()

    reopened = open_product_store(url)
    await reopened.open()
    try:
        assert [a.id for a in await reopened.due_alerts(T0, 5)] == ["words"]
    finally:
        await reopened.close()
