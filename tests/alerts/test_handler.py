"""The `alert_scanner` handler's declaration: params, limits and its system job, seeded by name."""

from __future__ import annotations

import inspect
from dataclasses import replace
from typing import Any

import pytest

from tests.alerts.conftest import Outbox
from tests.fixtures.times import T0
from tickd.handlers.alert_scanner import PARAMS, alert_scanner, limits_from
from tickd.handlers.alert_scanner.delivery import EmailPolicy
from tickd.handlers.alert_scanner.scan import ScanLimits
from tickd.handlers.product_store import PRODUCTS, open_product_store
from tickd.scheduler.config.settings import Settings
from tickd.scheduler.jobspec import JobRules
from tickd.scheduler.model import IntervalSchedule
from tickd.scheduler.plugin.api import SystemJob
from tickd.scheduler.plugin.registry import HandlerRegistry
from tickd.scheduler.plugin.testing import handler_context
from tickd.scheduler.ports.backends import Store
from tickd.seed.demo_products import seed_demo_products
from tickd.seed.jobs import seed_jobs
from tickd.seed.system import system_jobs


def test_the_defaults_are_the_seeds_numbers() -> None:
    limits = limits_from({})
    assert limits == ScanLimits()
    assert (limits.alerts_per_scan, limits.lookup_concurrency, limits.email.concurrency) == (
        200,
        50,
        10,
    )


def test_params_set_the_limits() -> None:
    params = {
        "alerts_per_scan": 50,
        "max_rules": 100,
        "lookup_concurrency": 5,
        "parts_per_lookup": 20,
        "scans_per_run": 7,
        "smtp_concurrency": 2,
        "emails_per_scan": 30,
        "send_attempts": 4,
        "email_scans": 6,
        "from_address": "alerts@tickd.example",
    }
    assert limits_from(params) == ScanLimits(
        alerts_per_scan=50,
        max_rules=100,
        lookup_concurrency=5,
        parts_per_lookup=20,
        scans_per_run=7,
        email=EmailPolicy(
            concurrency=2,
            notifications_per_scan=30,
            send_attempts=4,
            scans_before_giving_up=6,
            from_address="alerts@tickd.example",
        ),
    )


@pytest.mark.parametrize(
    ("params", "error"),
    [
        ({"alerts": 5}, "unknown alerts"),
        ({"alerts_per_scan": 0}, "params.alerts_per_scan: a whole number from 1 to 10000"),
        ({"smtp_concurrency": 51}, "params.smtp_concurrency"),
        ({"max_rules": "100"}, "params.max_rules"),
        ({"send_attempts": True}, "params.send_attempts"),
        ({"from_address": 3}, "params.from_address"),
    ],
)
def test_bad_params_are_named(params: dict[str, Any], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        limits_from(params)


def test_the_schema_accepts_what_limits_from_accepts() -> None:
    jsonschema: Any = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(PARAMS)
    validator.check_schema(PARAMS)
    assert validator.is_valid({})
    assert validator.is_valid({"alerts_per_scan": 10_000, "from_address": "a@b.example"})
    assert not validator.is_valid({"alerts_per_scan": 0})
    assert not validator.is_valid({"alerts": 5})


def test_the_handler_bounds_itself_and_declares_its_system_job() -> None:
    assert alert_scanner.max_concurrency == 1
    assert alert_scanner.params_schema is PARAMS
    assert alert_scanner.system_job == SystemJob(
        schedule=IntervalSchedule(every_seconds=300), timeout_seconds=600, max_retries=0
    )


async def test_the_system_job_is_seeded_once_and_ops_changes_are_kept(store: Store) -> None:
    registry = HandlerRegistry()
    registry.register("alert_scanner", alert_scanner)
    (job,) = system_jobs(JobRules(registry, Settings()), T0)
    assert (job.name, job.handler, job.system) == ("alert_scanner", "alert_scanner", True)
    assert (job.timeout_seconds, job.max_retries) == (600, 0)
    assert job.schedule == IntervalSchedule(every_seconds=300)
    assert await seed_jobs(store, [job]) == [job]

    # Ops runs it hourly; a restart seeds again and keeps that.
    await store.delete_job(job.id)
    hourly = replace(job, schedule=IntervalSchedule(every_seconds=3600))
    await store.insert_job(hourly)
    assert await seed_jobs(store, system_jobs(JobRules(registry, Settings()), T0)) == []
    kept = await store.get_job_by_name("alert_scanner")
    assert kept is not None and kept.schedule == IntervalSchedule(every_seconds=3600)


async def test_the_handler_scans_with_the_contexts_ports(outbox: Outbox) -> None:
    products = open_product_store("sqlite:///:memory:")
    await products.open()
    async with handler_context(
        params={"from_address": "alerts@tickd.example"},
        outbox=str(outbox.folder),
        resources={PRODUCTS: products},
    ) as ctx:
        await seed_demo_products(ctx.resource(PRODUCTS))
        outcome = alert_scanner(ctx)
        assert inspect.isawaitable(outcome)
        result = await outcome
    await products.close()
    assert result is not None and result["triggered"] == 9 and result["emails_sent"] == 3
    assert len(outbox.messages()) == 3
