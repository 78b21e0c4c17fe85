"""One scan against every product store: what it reads, checks, writes, notifies and sends."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tests.alerts.builders import alert, part, price_rule, rule
from tests.alerts.conftest import Outbox
from tests.fixtures.times import T0
from tickd.handlers.alert_scanner.delivery import EmailPolicy
from tickd.handlers.alert_scanner.normalize import timestamp
from tickd.handlers.alert_scanner.scan import ScanLimits, ScanResult, scan
from tickd.handlers.product_store import Doc, ProductStore
from tickd.scheduler.ports.clock import FakeClock


async def run(
    products: ProductStore, outbox: Outbox, clock: FakeClock, **limits: Any
) -> ScanResult:
    return await scan(products, outbox.mailer, clock, ScanLimits(**limits))


async def stored_rule(products: ProductStore, alert_id: str = "alert-1", index: int = 0) -> Doc:
    found = await products.get_alert(alert_id)
    assert found is not None
    rule_doc: Doc = found.doc["rules"][index]
    return rule_doc


async def test_a_rule_that_fires_is_notified_written_back_and_emailed(
    products: ProductStore, outbox: Outbox, clock: FakeClock
) -> None:
    await products.upsert_parts([part(price=" 12.50 ", name="LM317T")])
    await products.upsert_alerts([alert("alert-1", price_rule(baseline=10.0))])

    result = await run(products, outbox, clock)

    assert (result.alerts_read, result.rules_due, result.evaluated, result.triggered) == (
        1,
        1,
        1,
        1,
    )
    assert (result.notifications, result.emails_sent, result.errors) == (1, 1, 0)
    (n,) = await products.notifications()
    assert (n.user_id, n.alert_id, n.rule_id, n.part_id, n.part_name) == (
        "user-1",
        "alert-1",
        "r1",
        "part-1",
        "LM317T",
    )
    assert (n.type, n.operator, n.previous_value, n.current_value) == (
        "price_change",
        "gt",
        10.0,
        12.5,
    )
    assert n.message == "LM317T: price 10 -> 12.5"
    assert n.reason == "+25% against the baseline 10.00, more than +10%"
    assert n.created_at == T0 and n.emailed_at == T0 and not n.read
    state = await stored_rule(products)
    assert state["cursor"] == 12.5 and state["baseline"] == 12.5 and state["lastError"] is None
    assert timestamp(state["lastCheckedAt"]) == T0 == timestamp(state["lastTriggeredAt"])
    assert outbox.recipients() == ["user-1@example.com"]


async def test_active_written_as_a_word_or_a_number_is_active(
    products: ProductStore, outbox: Outbox, clock: FakeClock
) -> None:
    await products.upsert_parts([part(price=12.5)])
    await products.upsert_alerts(
        [
            alert(
                "alert-1",
                price_rule("on", active=" YES "),
                price_rule("one", active=1),
                price_rule("off", active="no"),
                active="True",
            )
        ]
    )
    result = await run(products, outbox, clock)
    assert (result.alerts_read, result.rules_due, result.triggered) == (1, 2, 2)
    checked = [await stored_rule(products, "alert-1", i) for i in range(3)]
    assert [r["lastCheckedAt"] is not None for r in checked] == [True, True, False]


async def test_a_quiet_rule_is_checked_and_its_cursor_moves(
    products: ProductStore, outbox: Outbox, clock: FakeClock
) -> None:
    await products.upsert_parts([part(price=10.5)])
    await products.upsert_alerts([alert("alert-1", price_rule(baseline=10.0))])
    result = await run(products, outbox, clock)
    assert (result.evaluated, result.triggered, result.notifications) == (1, 0, 0)
    state = await stored_rule(products)
    assert state["cursor"] == 10.5 and state["baseline"] == 10.0
    assert timestamp(state["lastCheckedAt"]) == T0 and state["lastTriggeredAt"] is None
    assert await products.notifications() == [] and outbox.messages() == []


async def test_a_bad_rule_or_value_is_recorded_on_its_rule_and_the_scan_goes_on(
    products: ProductStore, outbox: Outbox, clock: FakeClock
) -> None:
    await products.upsert_parts([part(price="4,20"), part("part-2", price=20)])
    await products.upsert_alerts(
        [
            alert(
                "alert-1",
                price_rule("bad-value"),
                rule("bad-pair", "compliance", "gt", "RoHS=NO"),
                rule("bad-type", "price_drop", "gt", 1),
                rule("bad-cooldown", "lifecycle", "changed", None, cooldownMinutes="soon"),
            ),
            alert("alert-2", price_rule(), part_id="part-missing"),
            alert("alert-3", price_rule(), part_id=None),
            alert("alert-4", price_rule(), part_id="part-2"),
        ]
    )
    result = await run(products, outbox, clock)
    assert (result.evaluated, result.errors, result.triggered) == (7, 6, 1)
    errors = [(await stored_rule(products, "alert-1", i))["lastError"] for i in range(4)]
    assert errors == [
        "price: '4,20' is not a number",
        "operator gt is not defined for compliance rules",
        "type: 'price_drop' is not a rule type",
        "cooldownMinutes: 'soon' is not a number",
    ]
    assert (await stored_rule(products, "alert-2"))["lastError"] == "part 'part-missing' not found"
    assert (await stored_rule(products, "alert-3"))[
        "lastError"
    ] == "alert partId: None is not an id"
    bad = await stored_rule(products, "alert-1")
    assert bad["cursor"] == 10.0 and timestamp(bad["lastCheckedAt"]) == T0  # cursor kept
    assert len(result.error_samples) == 5
    assert [n.alert_id for n in await products.notifications()] == ["alert-4"]


async def test_an_alert_without_a_user_is_an_error_not_an_anonymous_notification(
    products: ProductStore, outbox: Outbox, clock: FakeClock
) -> None:
    await products.upsert_parts([part(price=20)])
    await products.upsert_alerts([alert("alert-1", price_rule(), userId=None)])
    result = await run(products, outbox, clock)
    assert (result.errors, result.notifications) == (1, 0)
    assert (await stored_rule(products))["cursor"] == 10.0  # fires once the user is fixed


async def test_only_active_rules_past_their_cooldown_are_checked(
    products: ProductStore, outbox: Outbox, clock: FakeClock
) -> None:
    checked_at = T0 - timedelta(minutes=30)
    await products.upsert_parts([part()])
    await products.upsert_alerts(
        [
            alert(
                "alert-1",
                price_rule("never-checked"),
                price_rule("cooling", lastCheckedAt=checked_at, cooldownMinutes=60),
                price_rule("cooled", lastCheckedAt=checked_at, cooldownMinutes="30"),
                price_rule("triggered-recently", lastTriggeredAt=checked_at, cooldownMinutes=60),
                price_rule("inactive", active=False),
                price_rule("iso-times", lastCheckedAt="2026-03-02T08:00:00Z", cooldownMinutes=60),
            ),
            alert("alert-off", price_rule(), active=False),
        ]
    )
    result = await run(products, outbox, clock)
    assert (result.alerts_read, result.rules_due) == (1, 3)
    rules = [await stored_rule(products, "alert-1", i) for i in range(6)]
    checked = [r["id"] for r in rules if timestamp(r["lastCheckedAt"]) == T0]
    assert checked == ["never-checked", "cooled", "iso-times"]


async def test_scans_move_through_every_alert_longest_waiting_first(
    products: ProductStore, outbox: Outbox, clock: FakeClock
) -> None:
    await products.upsert_parts([part()])
    await products.upsert_alerts([alert(f"alert-{i}") for i in range(5)])
    read = []
    for _ in range(3):
        result = await run(products, outbox, clock, alerts_per_scan=2)
        read.append(result.alerts_read)
        clock.advance(1)
    assert read == [2, 2, 1]
    # Nothing is due again before its cooldown; then the first ones checked come first.
    assert (await run(products, outbox, clock, alerts_per_scan=2)).alerts_read == 0
    clock.set(T0 + timedelta(minutes=60))
    first = await products.due_alerts(clock.now(), 5)
    assert [a.id for a in first] == ["alert-0", "alert-1"]


async def test_rules_beyond_the_bound_wait_for_the_next_scan(
    products: ProductStore, outbox: Outbox, clock: FakeClock
) -> None:
    await products.upsert_parts([part()])
    await products.upsert_alerts([alert("a", *[price_rule(f"r{i}") for i in range(5)])])
    first = await run(products, outbox, clock, max_rules=3)
    assert (first.rules_due, first.evaluated, first.deferred) == (5, 3, 2)
    second = await run(products, outbox, clock, max_rules=3)
    assert (second.rules_due, second.evaluated, second.deferred) == (2, 2, 0)
    assert (await run(products, outbox, clock, max_rules=3)).alerts_read == 0


async def test_an_alert_read_with_nothing_due_is_not_read_again_and_again(
    products: ProductStore, outbox: Outbox, clock: FakeClock
) -> None:
    await products.upsert_parts([part()])
    # nextCheckAt says due, but the rule's cooldown (grown since) says an hour from now.
    recent = price_rule(lastCheckedAt=T0, cooldownMinutes=60)
    await products.upsert_alerts([alert("alert-1", recent, nextCheckAt=T0 - timedelta(hours=1))])
    assert (await run(products, outbox, clock)).alerts_read == 1
    assert (await run(products, outbox, clock)).alerts_read == 0
    stored = await products.get_alert("alert-1")
    assert stored is not None and timestamp(stored.doc["nextCheckAt"]) == T0 + timedelta(hours=1)


async def test_one_email_per_user_listing_all_their_triggered_rules(
    products: ProductStore, outbox: Outbox, clock: FakeClock
) -> None:
    await products.upsert_parts(
        [part("p1", price=20, name="LM317T"), part("p2", price=20, name="NE555P")]
    )
    await products.upsert_alerts(
        [
            alert("a1", price_rule("r1"), price_rule("r2"), part_id="p1", user="ada"),
            alert("a2", price_rule("r1"), part_id="p2", user="ada"),
            alert("a3", price_rule("r1"), part_id="p2", user="grace"),
            alert("a4", price_rule("r1", notifyEmail=False), part_id="p2", user="linus"),
        ]
    )
    result = await run(products, outbox, clock)
    assert (result.triggered, result.notifications, result.emails_sent) == (5, 5, 2)
    messages = {str(m["To"]): m for m in outbox.messages()}
    assert set(messages) == {"ada@example.com", "grace@example.com"}
    ada = messages["ada@example.com"]
    assert ada["Subject"] == "LM317T price rose 100% to 20.00, and 2 more"
    text = ada.get_body(("plain",))
    assert text is not None and text.get_content().count("* ") == 3
    linus = await products.notifications(user_id="linus")
    assert len(linus) == 1 and linus[0].emailed_at is None and not linus[0].notify_email


async def test_an_alert_without_a_usable_address_is_notified_but_not_emailed(
    products: ProductStore, outbox: Outbox, clock: FakeClock
) -> None:
    await products.upsert_parts([part(price=20)])
    await products.upsert_alerts([alert("alert-1", email="not an address")])
    result = await run(products, outbox, clock)
    assert (result.notifications, result.emails_sent, result.emails_failed) == (1, 0, 1)
    (n,) = await products.notifications()
    assert n.email is None and n.email_failed_at == T0
    assert n.email_error == "recipient: '' is not an email address"


async def test_the_from_address_is_the_scans(
    products: ProductStore, outbox: Outbox, clock: FakeClock
) -> None:
    await products.upsert_parts([part(price=20)])
    await products.upsert_alerts([alert()])
    email = EmailPolicy(from_address="alerts@tickd.example")
    await run(products, outbox, clock, email=email)
    (message,) = outbox.messages()
    assert message["From"] == "tickd alerts <alerts@tickd.example>"
    assert str(message["Message-ID"]).endswith("@tickd.example>")
