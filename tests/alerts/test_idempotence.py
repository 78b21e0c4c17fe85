"""Idempotent by construction: a scan run twice, on stale data, two at once, or again after a crash
at any step fires nothing twice and sends no email twice. Counted in notifications and emails.

Crashes are injected by wrapping a real store or the real outbox mailer and raising at one step;
nothing here stands in for a database or a mail server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from email.message import EmailMessage
from typing import Any, cast

import pytest

from tests.alerts.builders import alert, part, price_rule, rule
from tests.alerts.conftest import Outbox, ProductDatabase
from tickd.handlers.alert_scanner.delivery import EmailPolicy
from tickd.handlers.alert_scanner.scan import ScanLimits, ScanResult, scan
from tickd.handlers.product_store import Doc, ProductStore
from tickd.scheduler.ports.backends import Mailer
from tickd.scheduler.ports.clock import FakeClock

USERS = ("ada", "grace", "linus")


class Crash(Exception):
    """The process dying at this point."""


class Intercepted:
    """A real product store, with one method replaced (to crash or to pause there)."""

    def __init__(self, store: ProductStore, **replaced: Callable[..., Any]) -> None:
        self._store = store
        self._replaced = replaced

    def __getattr__(self, name: str) -> Any:
        return self._replaced.get(name) or getattr(self._store, name)

    @staticmethod
    def of(store: ProductStore, **replaced: Callable[..., Any]) -> ProductStore:
        return cast(ProductStore, Intercepted(store, **replaced))


class CrashingMailer:
    """The real outbox, except that the process dies on send number `crash_on`."""

    def __init__(self, inner: Mailer, crash_on: int) -> None:
        self.inner, self.crash_on, self.sends = inner, crash_on, 0

    async def send(self, message: EmailMessage) -> None:
        self.sends += 1
        if self.sends == self.crash_on:
            raise Crash("died while sending")
        await self.inner.send(message)

    async def close(self) -> None:
        await self.inner.close()


def firing_alerts() -> list[Doc]:
    """Every user has two alerts that fire, five rules in all, of four types."""
    return [
        alert("ada-1", price_rule("r1"), rule("r2", "risk", "gt", 70, cursor=40), user="ada"),
        alert("ada-2", rule("r1", "lifecycle", "changed", None, cursor="Active"), user="ada"),
        alert("grace-1", price_rule("r1"), user="grace"),
        alert("linus-1", rule("r1", "new_alternate", "changed", None, cursor=[]), user="linus"),
    ]


RULES_THAT_FIRE = 5


async def seeded(products: ProductStore, *, cooldown: float = 60) -> None:
    await products.upsert_parts([part(price=20, riskScore=80, lifecycle="EOL")])
    alerts = firing_alerts()
    for doc in alerts:
        for r in doc["rules"]:
            r["cooldownMinutes"] = cooldown
    await products.upsert_alerts(alerts)


async def run(products: ProductStore, mailer: Mailer, clock: FakeClock, **email: Any) -> ScanResult:
    return await scan(products, mailer, clock, ScanLimits(email=EmailPolicy(**email)))


async def assert_notified_once(products: ProductStore, outbox: Outbox) -> None:
    notifications = await products.notifications()
    assert len(notifications) == RULES_THAT_FIRE
    assert all(n.emailed_at is not None for n in notifications)
    assert outbox.recipients() == [f"{user}@example.com" for user in USERS]


def assert_count(database: ProductDatabase, count: int, exact: int, on_ferretdb: range) -> None:
    """Exact where conditional updates are atomic. On FerretDB a rule both scans wrote counts as
    triggered for both (its notification and its email still happen once, asserted apart)."""
    assert count == exact if database.atomic_updates else count in on_ferretdb


TWICE_AT_MOST = range(RULES_THAT_FIRE, 2 * RULES_THAT_FIRE + 1)


async def test_a_scan_run_twice_fires_nothing_twice(
    products: ProductStore, outbox: Outbox, clock: FakeClock
) -> None:
    await seeded(products, cooldown=0)  # due again at every scan
    first = await run(products, outbox.mailer, clock)
    again = await run(products, outbox.mailer, clock)
    clock.advance(3600)
    later = await run(products, outbox.mailer, clock)
    assert first.triggered == RULES_THAT_FIRE
    assert (again.evaluated, again.triggered, again.notifications, again.emails_sent) == (
        RULES_THAT_FIRE,
        0,
        0,
        0,
    )
    assert (later.evaluated, later.triggered) == (RULES_THAT_FIRE, 0)
    await assert_notified_once(products, outbox)


async def test_a_scan_on_stale_data_fires_nothing_twice(
    products: ProductStore, outbox: Outbox, clock: FakeClock
) -> None:
    """The rules as they were before the first scan come back (a stale replica, a restore):
    the same reads make the same notifications, which exist already, and are emailed already."""
    await seeded(products)
    await run(products, outbox.mailer, clock)
    await seeded(products)
    clock.advance(1)
    stale = await run(products, outbox.mailer, clock)
    assert (stale.triggered, stale.notifications, stale.emails_sent) == (RULES_THAT_FIRE, 0, 0)
    await assert_notified_once(products, outbox)


async def test_two_scans_at_once_fire_each_rule_once(
    product_db: ProductDatabase, outbox: Outbox, clock: FakeClock
) -> None:
    first, second = await product_db.open(), await product_db.open()
    await seeded(first)
    results = await asyncio.gather(
        run(first, outbox.mailer, clock), run(second, outbox.mailer, clock)
    )
    assert_count(product_db, sum(r.triggered for r in results), RULES_THAT_FIRE, TWICE_AT_MOST)
    assert sum(r.notifications for r in results) == RULES_THAT_FIRE
    assert sum(r.emails_sent for r in results) == len(USERS)
    await assert_notified_once(first, outbox)


async def test_two_scans_that_read_the_same_rules_write_them_once(
    product_db: ProductDatabase, outbox: Outbox, clock: FakeClock
) -> None:
    """Both scans read every rule before either writes (the lock failed open): the conditional
    writes let one of them through per rule, and the notifications' ids are the same."""
    first, second = await product_db.open(), await product_db.open()
    await seeded(first)
    both_read = asyncio.Barrier(2)

    def reading_together(store: ProductStore) -> ProductStore:
        async def due_alerts(*args: Any) -> Any:
            found = await store.due_alerts(*args)
            await both_read.wait()
            return found

        return Intercepted.of(store, due_alerts=due_alerts)

    results = await asyncio.gather(
        run(reading_together(first), outbox.mailer, clock),
        run(reading_together(second), outbox.mailer, clock),
    )
    assert [r.evaluated for r in results] == [RULES_THAT_FIRE, RULES_THAT_FIRE]
    triggered, conflicts = sum(r.triggered for r in results), sum(r.conflicts for r in results)
    assert_count(product_db, triggered, RULES_THAT_FIRE, TWICE_AT_MOST)
    assert_count(product_db, conflicts, RULES_THAT_FIRE, range(RULES_THAT_FIRE + 1))
    assert sum(r.notifications for r in results) == RULES_THAT_FIRE
    await assert_notified_once(first, outbox)


@pytest.mark.parametrize("concurrency", [1, 10])
async def test_a_crash_while_sending_then_a_rerun_sends_only_the_rest(
    products: ProductStore, outbox: Outbox, clock: FakeClock, concurrency: int
) -> None:
    """The second send dies. Sends already in flight finish and are recorded (one at a time:
    the first; ten at a time: the first and the third), none starts after; the rerun sends
    what is left, and nobody gets an email twice."""
    await seeded(products)
    with pytest.raises(Crash):
        await run(
            products, CrashingMailer(outbox.mailer, crash_on=2), clock, concurrency=concurrency
        )
    assert len(outbox.messages()) == 1
    emailed = {n.user_id for n in await products.notifications() if n.emailed_at is not None}
    assert len(emailed) == 1
    rerun = await run(products, outbox.mailer, clock)
    assert (rerun.evaluated, rerun.emails_sent) == (0, len(USERS) - 1)
    await assert_notified_once(products, outbox)


async def test_a_crash_between_notifying_and_writing_the_rules_loses_nothing(
    products: ProductStore, outbox: Outbox, clock: FakeClock
) -> None:
    await seeded(products)

    async def dies(*args: Any) -> Any:
        raise Crash("died before writing the rules")

    with pytest.raises(Crash):
        await run(Intercepted.of(products, update_rules=dies), outbox.mailer, clock)
    assert len(await products.notifications()) == RULES_THAT_FIRE
    assert outbox.messages() == []
    rerun = await run(products, outbox.mailer, clock)
    assert (rerun.triggered, rerun.notifications, rerun.emails_sent) == (
        RULES_THAT_FIRE,
        0,
        len(USERS),
    )
    await assert_notified_once(products, outbox)
    assert (await run(products, outbox.mailer, clock)).evaluated == 0


async def test_emails_claimed_by_a_scan_that_died_wait_for_its_claim_to_expire(
    products: ProductStore, outbox: Outbox, clock: FakeClock
) -> None:
    await seeded(products)

    async def never_released(token: str) -> None:
        return None  # the process died: nothing gives the claims back

    dying = Intercepted.of(products, release_email_claims=never_released)
    with pytest.raises(Crash):
        await run(dying, CrashingMailer(outbox.mailer, crash_on=1), clock)
    clock.advance(60)
    assert (await run(products, outbox.mailer, clock)).emails_sent == 0
    clock.advance(EmailPolicy().claim_seconds)
    assert (await run(products, outbox.mailer, clock)).emails_sent == len(USERS)
    await assert_notified_once(products, outbox)


async def test_a_crash_of_one_batch_of_lookups_fails_the_scan_without_writing(
    products: ProductStore, outbox: Outbox, clock: FakeClock
) -> None:
    await seeded(products)

    async def unreachable(*args: Any) -> Any:
        raise Crash("the store went away")

    with pytest.raises(Crash):
        await run(Intercepted.of(products, parts=unreachable), outbox.mailer, clock)
    assert await products.notifications() == []
    assert (await run(products, outbox.mailer, clock)).triggered == RULES_THAT_FIRE


async def test_a_retried_scan_after_the_cooldown_still_fires_nothing_twice(
    products: ProductStore, outbox: Outbox, clock: FakeClock
) -> None:
    await seeded(products)
    await run(products, outbox.mailer, clock)
    clock.advance(timedelta(hours=2).total_seconds())
    retried = await run(products, outbox.mailer, clock)
    assert (retried.evaluated, retried.triggered) == (RULES_THAT_FIRE, 0)
    await assert_notified_once(products, outbox)
