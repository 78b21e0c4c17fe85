"""Domains share the workers by weight under saturation, on every store: the engine end to end,
with a fake clock and drain mode."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta

from tests.conftest import T0, EngineFactory, make_job
from tickd.scheduler.domain_settings import DomainSettings
from tickd.scheduler.model import Priority
from tickd.scheduler.plugin.api import HandlerContext, Result

PER_DOMAIN = 120


async def test_weights_one_to_three_share_a_backlog_one_to_three(
    make_engine: EngineFactory,
) -> None:
    started: list[str] = []

    async def record(ctx: HandlerContext) -> Result:
        started.append(ctx.job_name.split("-")[0])
        return None

    h = make_engine({"record": record}, workers=2, queue_size=2, batch_size=8)
    await h.store.put_domain(DomainSettings(name="b", weight=3))
    await h.store.put_domain(DomainSettings(name="idle", weight=6))  # with nothing due
    # Every job of a is due before every job of b: by time alone, a's would all go first.
    for n in range(PER_DOMAIN):
        due_a = T0 - timedelta(seconds=30) + timedelta(milliseconds=n)
        await h.add(make_job(f"a-{n}", "record", domain="a", next_run_at=due_a))
        due_b = T0 - timedelta(seconds=20) + timedelta(milliseconds=n)
        await h.add(make_job(f"b-{n}", "record", domain="b", next_run_at=due_b))
    await h.engine.drain()

    assert Counter(started) == {"a": PER_DOMAIN, "b": PER_DOMAIN}
    # While both have work, after the first fetch (read before the backlog is known): b has
    # three runs for each of a's.
    both = started[8 : 8 + PER_DOMAIN]
    shares = Counter(both)
    assert 2.7 <= shares["b"] / shares["a"] <= 3.3, shares


async def test_a_critical_job_of_a_light_domain_runs_before_a_heavy_domains_normal_ones(
    make_engine: EngineFactory,
) -> None:
    started: list[str] = []

    async def record(ctx: HandlerContext) -> Result:
        started.append(ctx.job_name)
        return None

    h = make_engine({"record": record}, workers=1, queue_size=1, batch_size=4)
    await h.store.put_domain(DomainSettings(name="heavy", weight=1000))
    for n in range(40):
        await h.add(make_job(f"heavy-{n}", "record", domain="heavy", next_run_at=T0))
    h.engine.start()
    assert (await h.engine.tick()).full  # a backlog: the next fetches read by domain
    await h.engine.settled()
    urgent = make_job("light-urgent", "record", domain="light", priority=Priority.CRITICAL)
    await h.add(urgent)
    before = len(started)
    await h.engine.drain()
    # Its domain's share of a fetch is a thousandth of heavy's, but it is critical.
    assert started.index("light-urgent") <= before + 4
    assert len(started) == 41


async def test_a_domain_never_has_more_runs_in_flight_than_its_cap(
    make_engine: EngineFactory,
) -> None:
    in_flight = Counter[str]()
    most = Counter[str]()
    ended: list[str] = []

    async def work(ctx: HandlerContext) -> Result:
        domain = ctx.job_name.split("-")[0]
        in_flight[domain] += 1
        most[domain] = max(most[domain], in_flight[domain])
        for _ in range(20):  # the other workers start their runs meanwhile
            await asyncio.sleep(0)
        in_flight[domain] -= 1
        ended.append(domain)
        return None

    h = make_engine({"work": work}, workers=10, batch_size=20)
    await h.store.put_domain(DomainSettings(name="capped", max_running=2))
    for n in range(10):
        await h.add(make_job(f"capped-{n}", "work", domain="capped", next_run_at=T0))
        await h.add(make_job(f"free-{n}", "work", domain="free", next_run_at=T0))
    await h.engine.drain()

    assert Counter(ended) == {"capped": 10, "free": 10}
    assert most["capped"] == 2
    assert most["free"] > 2  # the other domain's runs are not held back by it
