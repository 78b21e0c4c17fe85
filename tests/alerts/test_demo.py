"""The demo data of `make run`: a first scan fires notifications and writes one .eml per user;
seeding again (a restart) changes nothing and fires nothing."""

from __future__ import annotations

from pathlib import Path

from tests.alerts.conftest import Outbox
from tests.fixtures.times import T0
from tickd.handlers.alert_scanner.delivery import EmailPolicy
from tickd.handlers.alert_scanner.scan import ScanLimits, scan
from tickd.handlers.alert_scanner.settings import EmailSettings
from tickd.handlers.product_store import ProductStore
from tickd.scheduler.config.settings import Settings, load_settings
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

SHIPPED_CONFIG = Path(__file__).resolve().parents[2] / "config" / "tickd.toml"


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


async def test_the_demo_emails_link_each_part_and_show_prices_in_their_currency(
    products: ProductStore, outbox: Outbox, clock: FakeClock
) -> None:
    """As `make run` sends them: on the shipped configuration's email settings."""
    shipped = load_settings(SHIPPED_CONFIG, environ={}).handler_settings["alert_scanner"]
    email = EmailPolicy(settings=EmailSettings.parse(shipped))
    await seed_demo_products(products)

    await scan(products, outbox.mailer, clock, ScanLimits(email=email))

    [ada] = [m for m in outbox.messages() if m["To"] == "ada@example.com"]
    text = ada.get_body(("plain",)).get_content()  # type: ignore[union-attr]
    page = ada.get_body(("html",)).get_content()  # type: ignore[union-attr]
    assert "LM317T price rose 15% to $0.71" in text
    assert "before: $0.62" in text
    for part in ("part-lm317t", "part-ne555p"):
        assert f'/parts/{part}"' in page, part
