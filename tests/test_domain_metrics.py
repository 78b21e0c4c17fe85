"""Metrics by domain: a run's fire lag, its end and its dead letter are counted under its job's
domain, beside the labels they had before; each domain's runs in flight are read off the
ledger; each domain's lag objective follows its stored settings."""

from __future__ import annotations

import asyncio

import pytest

from tests.conftest import EngineFactory, make_job
from tests.test_dead_letters import broken
from tests.test_engine import noop
from tickd.scheduler.domain_settings import DomainSettings
from tickd.scheduler.maintenance.objectives import LagObjectives
from tickd.scheduler.metrics import Metrics
from tickd.scheduler.plugin.api import HandlerContext, Result
from tickd.scheduler.ports.backends import Store

pytestmark = pytest.mark.parametrize("store", ["sqlite"], indirect=True)


async def test_a_runs_fire_lag_and_end_are_counted_under_its_jobs_domain(
    make_engine: EngineFactory,
) -> None:
    h = make_engine({"noop": noop})
    await h.add(make_job("pay", domain="payments"))
    await h.add(make_job("find", domain="search"))
    await h.add(make_job("plain"))
    await h.engine.drain()

    sample = h.engine.metrics.registry.get_sample_value
    for domain in ("payments", "search", "default"):
        lag = {"handler": "noop", "priority": "normal", "domain": domain}
        assert sample("tickd_fire_lag_seconds_count", lag) == 1, domain
        ended = {"handler": "noop", "status": "success", "domain": domain}
        assert sample("tickd_executions_total", ended) == 1, domain


async def test_a_run_that_failed_for_good_is_a_dead_letter_of_its_jobs_domain(
    make_engine: EngineFactory,
) -> None:
    h = make_engine({"broken": broken, "noop": noop})
    await h.add(make_job("charge", "broken", domain="payments"))
    await h.add(make_job("fine", domain="payments"))
    await h.engine.drain()

    sample = h.engine.metrics.registry.get_sample_value
    dead = {"handler": "broken", "domain": "payments"}
    assert sample("tickd_runs_dead_lettered_total", dead) == 1
    assert sample("tickd_runs_dead_lettered_total", {**dead, "handler": "noop"}) is None
    failed = {"handler": "broken", "status": "failed", "domain": "payments"}
    assert sample("tickd_executions_total", failed) == 1


async def test_a_domains_runs_in_flight_count_until_their_ends_are_written(
    make_engine: EngineFactory,
) -> None:
    release = asyncio.Event()

    async def held(ctx: HandlerContext) -> Result:
        await release.wait()
        return None

    h = make_engine({"held": held}, workers=4)
    for i in range(3):
        await h.add(make_job(f"pay-{i}", "held", domain="payments"))
    await h.add(make_job("find", "held", domain="search"))
    in_flight = h.engine.metrics.registry.get_sample_value
    assert in_flight("tickd_runs_in_flight", {"domain": "payments"}) is None

    h.engine.start()
    await h.engine.tick()
    assert in_flight("tickd_runs_in_flight", {"domain": "payments"}) == 3
    assert in_flight("tickd_runs_in_flight", {"domain": "search"}) == 1

    release.set()
    await h.engine.settled()
    assert in_flight("tickd_runs_in_flight", {"domain": "payments"}) == 0
    assert in_flight("tickd_runs_in_flight", {"domain": "search"}) == 0


async def test_each_domains_lag_objective_follows_its_stored_settings(store: Store) -> None:
    metrics = Metrics()
    objectives = LagObjectives(store, metrics)
    objective = metrics.registry.get_sample_value
    name = "tickd_domain_lag_objective_seconds"
    await store.put_domain(DomainSettings(name="payments", lag_objective_seconds=2.5))
    await store.put_domain(DomainSettings(name="search", lag_objective_seconds=30))
    await store.put_domain(DomainSettings(name="batch", weight=2))  # sets no objective

    await objectives.refresh()
    assert objective(name, {"domain": "payments"}) == 2.5
    assert objective(name, {"domain": "search"}) == 30
    assert objective(name, {"domain": "batch"}) is None

    await store.put_domain(DomainSettings(name="payments", lag_objective_seconds=1))
    await store.put_domain(DomainSettings(name="search"))  # its objective cleared
    await objectives.refresh()
    assert objective(name, {"domain": "payments"}) == 1
    assert objective(name, {"domain": "search"}) is None


async def test_a_deleted_domain_loses_its_objective(store: Store) -> None:
    metrics = Metrics()
    objectives = LagObjectives(store, metrics)
    await store.put_domain(DomainSettings(name="payments", lag_objective_seconds=2.5))
    await objectives.refresh()

    assert await store.delete_domain("payments")
    await objectives.refresh()
    exported = metrics.registry.get_sample_value
    assert exported("tickd_domain_lag_objective_seconds", {"domain": "payments"}) is None
