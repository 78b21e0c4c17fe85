"""A run of the alert scanner keeps up: it scans back to back while more is due (within its
bounds: `scans_per_run` and the first half of its deadline), sends the emails once at the end,
and its system job first runs minutes after boot. Against every product store."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Any

from tests.alerts.builders import alert, part, price_rule
from tests.alerts.conftest import Outbox
from tests.fixtures.times import T0
from tickd.handlers.alert_scanner import alert_scanner
from tickd.handlers.alert_scanner.scan import ScanLimits, scan_until_done
from tickd.handlers.product_store import PRODUCTS, Alert, Doc, ProductStore
from tickd.scheduler.config.settings import Settings
from tickd.scheduler.jobspec import JobRules
from tickd.scheduler.plugin.registry import HandlerRegistry
from tickd.scheduler.plugin.testing import handler_context
from tickd.scheduler.ports.clock import FakeClock
from tickd.seed.system import system_jobs


async def run_handler(
    products: ProductStore, outbox: Outbox, timeout_seconds: float = 600, **params: Any
) -> dict[str, Any]:
    async with handler_context(
        params=params,
        scheduled_at=T0,
        timeout_seconds=timeout_seconds,
        outbox=str(outbox.folder),
        resources={PRODUCTS: products},
    ) as ctx:
        outcome = alert_scanner(ctx)
        assert not isinstance(outcome, dict) and outcome is not None
        result = await outcome
    assert result is not None
    return result


async def unchecked(products: ProductStore, ids: Collection[str]) -> list[str]:
    """The alerts among `ids` whose rule was never checked."""
    found = [await products.get_alert(alert_id) for alert_id in ids]
    return [a.id for a in found if a is not None and a.doc["rules"][0]["lastCheckedAt"] is None]


async def test_the_system_job_first_runs_minutes_after_boot() -> None:
    registry = HandlerRegistry()
    registry.register("alert_scanner", alert_scanner)
    (job,) = system_jobs(JobRules(registry, Settings()), T0)
    assert job.next_run_at is not None
    assert job.next_run_at - T0 <= timedelta(minutes=5)


async def test_a_run_works_off_a_backlog_bigger_than_one_scan(
    products: ProductStore, outbox: Outbox
) -> None:
    ids = [f"alert-{i}" for i in range(5)]
    await products.upsert_parts([part(price=10.5)])
    await products.upsert_alerts([alert(alert_id) for alert_id in ids])

    result = await run_handler(products, outbox, alerts_per_scan=2)

    assert (result["scans"], result["alerts_read"], result["evaluated"]) == (3, 5, 5)
    assert result["more_due"] is False
    assert await unchecked(products, ids) == []


async def test_a_run_stops_at_scans_per_run_and_says_more_is_due(
    products: ProductStore, outbox: Outbox
) -> None:
    ids = [f"alert-{i}" for i in range(5)]
    await products.upsert_parts([part(price=10.5)])
    await products.upsert_alerts([alert(alert_id) for alert_id in ids])

    first = await run_handler(products, outbox, alerts_per_scan=2, scans_per_run=2)
    assert (first["scans"], first["alerts_read"], first["more_due"]) == (2, 4, True)
    assert await unchecked(products, ids) == ["alert-4"]

    second = await run_handler(products, outbox, alerts_per_scan=2, scans_per_run=2)
    assert (second["scans"], second["alerts_read"], second["more_due"]) == (1, 1, False)


async def test_a_run_with_nothing_due_makes_one_empty_scan(
    products: ProductStore, outbox: Outbox
) -> None:
    result = await run_handler(products, outbox)
    assert (result["scans"], result["alerts_read"], result["more_due"]) == (1, 0, False)


class SlowStore:
    """A product store whose due query takes `seconds` of the fake clock."""

    def __init__(self, inner: ProductStore, clock: FakeClock, seconds: float) -> None:
        self.inner, self.clock, self.seconds = inner, clock, seconds

    async def due_alerts(self, now: datetime, limit: int) -> list[Alert]:
        self.clock.advance(self.seconds)
        return await self.inner.due_alerts(now, limit)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_no_scan_starts_that_could_not_end_by_the_runs_scanning_deadline(
    products: ProductStore, outbox: Outbox
) -> None:
    await products.upsert_parts([part(price=10.5)])
    await products.upsert_alerts([alert(f"alert-{i}") for i in range(10)])
    clock = FakeClock(T0)
    slow: Any = SlowStore(products, clock, seconds=10)

    # Scans of 10 s until T0 + 25 s: the third would start at 20 s and could end at 30 s.
    result = await scan_until_done(
        slow, outbox.mailer, clock, ScanLimits(alerts_per_scan=2), until=T0 + timedelta(seconds=25)
    )
    assert (result.scans, result.alerts_read, result.more_due) == (2, 4, True)


async def test_a_run_sends_one_email_per_user_for_all_its_scans(
    products: ProductStore, outbox: Outbox
) -> None:
    await products.upsert_parts([part("p1", price=12.5), part("p2", price=13.0)])
    rules: list[Doc] = [price_rule(baseline=10.0, notifyEmail=True)]
    await products.upsert_alerts(
        [
            alert("a1", *rules, part_id="p1", user="ada"),
            alert("a2", *rules, part_id="p2", user="ada"),
        ]
    )

    result = await run_handler(products, outbox, alerts_per_scan=1)

    assert (result["scans"], result["triggered"], result["emails_sent"]) == (3, 2, 1)
    (message,) = outbox.messages()
    assert message["To"] == "ada@example.com"
    body = message.get_body(("plain",))
    assert body is not None and "P1" in body.get_content() and "P2" in body.get_content()
