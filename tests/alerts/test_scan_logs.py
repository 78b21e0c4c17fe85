"""What a scan logs: a broken rule once (it carries its error in the store until a check
succeeds), a scan that changed nothing at DEBUG only, and its counts as fields of the line."""

from __future__ import annotations

import json
import logging

import pytest

from tests.alerts.builders import alert, part, price_rule, rule
from tests.alerts.conftest import Outbox
from tickd.handlers.alert_scanner.scan import ScanResult, scan
from tickd.handlers.product_store import Doc, ProductStore
from tickd.scheduler.logs import FIELDS, JsonFormatter
from tickd.scheduler.ports.clock import FakeClock

SCANNER_LOG = "tickd.handler.alert_scanner"
UNDEFINED_PAIR = "operator gt is not defined for compliance rules"


def broken_rule() -> Doc:
    """An undefined pair, checked at every scan (no cooldown), as in the demo data."""
    return rule("r1", "compliance", "gt", "RoHS=NO", cooldownMinutes=0)


async def scan_later(products: ProductStore, outbox: Outbox, clock: FakeClock) -> ScanResult:
    clock.advance(60)
    return await scan(products, outbox.mailer, clock)


async def rule_error(products: ProductStore) -> object:
    found = await products.get_alert("alert-1")
    assert found is not None
    return found.doc["rules"][0].get("lastError")


def events(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level]


async def test_a_broken_rule_is_reported_once_and_keeps_its_error_until_it_works(
    products: ProductStore, outbox: Outbox, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=SCANNER_LOG)
    await products.upsert_parts([part()])
    await products.upsert_alerts([alert("alert-1", broken_rule())])

    first = await scan_later(products, outbox, clock)
    assert (first.errors, first.new_errors) == (1, 1)
    assert events(caplog, logging.WARNING) == ["alert_scan.rule_error"]
    assert events(caplog, logging.INFO) == ["alert_scan.finished"]
    assert await rule_error(products) == UNDEFINED_PAIR

    caplog.clear()
    again = await scan_later(products, outbox, clock)
    assert (again.errors, again.new_errors) == (1, 0), "still broken, nothing new"
    assert events(caplog, logging.WARNING) == events(caplog, logging.INFO) == []
    assert events(caplog, logging.DEBUG) == ["alert_scan.finished"]
    assert await rule_error(products) == UNDEFINED_PAIR

    # The product fixes the rule: the next check clears its error.
    await products.upsert_alerts([alert("alert-1", broken_rule() | {"operator": "changed"})])
    fixed = await scan_later(products, outbox, clock)
    assert (fixed.errors, fixed.evaluated) == (0, 1)
    assert await rule_error(products) is None


async def test_a_rule_that_fails_for_another_reason_is_reported_again(
    products: ProductStore, outbox: Outbox, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    await products.upsert_parts([part()])
    await products.upsert_alerts([alert("alert-1", broken_rule())])
    await scan_later(products, outbox, clock)
    found = await products.get_alert("alert-1")
    assert found is not None
    renamed = found.doc["rules"][0] | {"type": "price_drop"}
    await products.upsert_alerts([alert("alert-1", renamed)])

    caplog.clear()
    result = await scan_later(products, outbox, clock)
    assert (result.errors, result.new_errors) == (1, 1)
    [reported] = [r for r in caplog.records if r.getMessage() == "alert_scan.rule_error"]
    assert getattr(reported, FIELDS) == {
        "alert": "alert-1",
        "rule": "r1",
        "error": "type: 'price_drop' is not a rule type",
    }


async def test_a_scan_line_in_json_carries_its_counts_and_the_runs_fields(
    products: ProductStore, outbox: Outbox, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=SCANNER_LOG)
    await products.upsert_parts([part(price=20)])
    await products.upsert_alerts([alert("alert-1", price_rule()), alert("alert-2", broken_rule())])
    # As the runner gives it to a handler: the run's fields on an adapter.
    run_fields = {"job": "alert_scanner", "execution": "e-1", "attempt": 1}
    logger = logging.LoggerAdapter(logging.getLogger(SCANNER_LOG), {FIELDS: run_fields})

    await scan(products, outbox.mailer, clock, logger=logger)

    [record] = [r for r in caplog.records if r.getMessage() == "alert_scan.finished"]
    line = json.loads(JsonFormatter().format(record))
    assert line["event"] == "alert_scan.finished"
    assert (line["job"], line["execution"], line["attempt"]) == ("alert_scanner", "e-1", 1)
    assert (line["alerts_read"], line["evaluated"], line["triggered"]) == (2, 2, 1)
    assert (line["errors"], line["new_errors"], line["notifications"]) == (1, 1, 1)
    assert line["error_samples"] == [UNDEFINED_PAIR]
