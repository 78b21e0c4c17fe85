"""The demo data of `make run`: a first scan fires notifications and writes one .eml per user;
seeding again (a restart) changes nothing and fires nothing."""

from __future__ import annotations

from tests.alerts.conftest import Outbox
from tests.fixtures.times import T0
from tickd.handlers.alert_scanner.scan import scan
from tickd.handlers.product_store import ProductStore
from tickd.scheduler.config.settings import Settings
from tickd.scheduler.jobspec import JobRules
from tickd.scheduler.model import IntervalSchedule
from tickd.scheduler.plugin.registry import HandlerRegistry
from tickd.scheduler.ports.clock import FakeClock
from tickd.seed.demo_products import (
    DEMO_SCAN_EVERY_SECONDS,
    demo_alerts,
    demo_scan_job,
    seed_demo_products,
)


async def test_the_first_demo_scan_fires_and_emails(
    products: ProductStore, outbox: Outbox, clock: FakeClock
) -> None:
    assert await seed_demo_products(products) == len(demo_alerts())
    result = await scan(products, outbox.mailer, clock)
    assert (result.alerts_read, result.rules_due, result.triggered, result.errors) == (5, 13, 9, 1)
    assert result.error_samples == ["operator gt is not defined for compliance rules"]
    assert outbox.recipients() == ["ada@example.com", "grace@example.com", "linus@example.com"]
    assert {n.user_id for n in await products.notifications()} == {
        "user-ada",
        "user-grace",
        "user-linus",
    }


async def test_a_restart_seeds_nothing_new_and_fires_nothing_again(
    products: ProductStore, outbox: Outbox, clock: FakeClock
) -> None:
    await seed_demo_products(products)
    await scan(products, outbox.mailer, clock)
    assert await seed_demo_products(products) == 0
    clock.advance(DEMO_SCAN_EVERY_SECONDS)
    again = await scan(products, outbox.mailer, clock)
    assert (again.evaluated, again.triggered, again.emails_sent) == (13, 0, 0)
    assert len(outbox.messages()) == 3


def test_the_demo_scan_job_runs_the_scanner_every_fifteen_seconds() -> None:
    registry = HandlerRegistry()
    registry.load_entry_points()
    job = demo_scan_job(JobRules(registry, Settings()), T0)
    assert (job.name, job.handler, job.system) == ("demo-alert-scan", "alert_scanner", False)
    assert job.schedule == IntervalSchedule(every_seconds=15)
    assert job.params == {"from_address": "alerts@tickd.example"}
    assert job.next_run_at is not None and (job.next_run_at - T0).total_seconds() == 15
