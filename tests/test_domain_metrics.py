"""Metrics by domain: a run's fire lag, its end and its dead letter are counted under its job's
domain, beside the labels they had before."""

from __future__ import annotations

import pytest

from tests.conftest import EngineFactory, make_job
from tests.test_dead_letters import broken
from tests.test_engine import noop

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
