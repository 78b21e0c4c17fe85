"""Executions, dead letters and the operations endpoints through either client."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.api.conftest import READ, Api
from tests.client.conftest import Calls, connected
from tests.conftest import T0
from tickd.api.models import IntervalScheduleIn, JobCreate, JobOut
from tickd.client import Forbidden, Unauthorized
from tickd.scheduler.ports.backends import InstanceStatus

EVERY_MINUTE = IntervalScheduleIn(kind="interval", every_seconds=60)


async def failing_job(tickd: Calls, api: Api, name: str, runs: int, retries: int = 0) -> JobOut:
    """A job whose `runs` first occurrences have failed for good, each after `retries`."""
    job = JobCreate(name=name, handler="boom", schedule=EVERY_MINUTE, max_retries=retries)
    created: JobOut = await tickd.create_job(job)
    for _ in range(runs):
        api.clock.advance(60)
        await api.harness.engine.drain()
    return created


async def test_executions_are_listed_page_by_page_and_read_with_their_attempts(
    tickd: Calls, api: Api
) -> None:
    job = await failing_job(tickd, api, "retried", runs=3, retries=1)
    page = await tickd.list_executions(limit=2)
    assert len(page.items) == 2 and page.next_cursor
    every = await tickd.all("iter_executions", limit=2)
    assert len(every) == 3 and {e.job_id for e in every} == {job.id}
    assert [e.id for e in await tickd.all("iter_job_executions", job.id, limit=1)] == [
        e.id for e in every
    ]
    assert (await tickd.job_executions(job.id, status="failed")).items[0].id == every[0].id

    run = await tickd.get_execution(every[0].id)
    assert run.attempts == 2 and run.attempt_log is not None
    assert [a.number for a in run.attempt_log] == [1, 2]
    assert run.error is not None and "raise RuntimeError" in (run.error.traceback or "")
    again = await tickd.retry_execution(run.id)
    assert again.job_id == job.id and again.reason == "retry"


async def test_dead_letters_are_listed_redriven_and_discarded(tickd: Calls, api: Api) -> None:
    job = await failing_job(tickd, api, "dead", runs=3)
    first = await tickd.list_dead_letters(limit=2)
    assert len(first.items) == 2 and first.next_cursor
    open_letters = await tickd.all("iter_dead_letters", limit=2)
    assert len(open_letters) == 3 and {d.job_id for d in open_letters} == {job.id}
    newest, middle, oldest = open_letters

    one = await tickd.redrive_dead_letter(newest.id)
    assert one.reason == "redrive" and one.job_id == job.id
    discarded = await tickd.discard_dead_letter(oldest.id)
    assert discarded.dead_letter == "discarded"
    batch = await tickd.redrive_dead_letters(job_id=job.id)
    assert [r.scheduled_at for r in batch.requests] == [middle.scheduled_at] and not batch.more
    assert (await tickd.list_dead_letters(state="discarded")).items[0].id == oldest.id


async def test_the_operations_endpoints_are_read(tickd: Calls, api: Api) -> None:
    await failing_job(tickd, api, "counted", runs=1)
    stats = await tickd.get_stats(window=600)
    assert stats.window_seconds == 600 and stats.totals.get("failed") == 1
    handlers = await tickd.list_handlers()
    assert {"ping", "boom", "sleep"} <= {h.name for h in handlers.items}
    session = await tickd.session()
    assert (session.actor, session.scope) == ("root", "admin")
    assert (await tickd.health()).status == "ok"
    assert (await tickd.readiness()).ready
    assert "tickd_" in await tickd.metrics()
    assert "paths" in await tickd.openapi()
    assert "<table>" in await tickd.docs_page()


async def test_the_instances_are_read_with_what_each_one_said(tickd: Calls, api: Api) -> None:
    started = T0 - timedelta(hours=1)
    await api.store.beat("worker-a", T0, InstanceStatus("1.4.0", started, 2))
    await api.store.take_partitions("worker-a", [3, 5])
    await api.store.beat("worker-b", T0)

    listed = {one.id: one for one in (await tickd.instances()).items}

    a, b = listed["worker-a"], listed["worker-b"]
    assert (a.version, a.started_at, a.partitions, a.runs_in_flight) == ("1.4.0", started, 2, 2)
    assert (b.version, b.started_at, b.partitions, b.runs_in_flight) == (None, None, 0, None)
    assert (a.last_beat_at, a.running) == (T0, 0)


async def test_bounces_are_listed_and_cleared(tickd: Calls, api: Api) -> None:
    address = "ops+alerts@example.com"
    await api.harness.products.record_bounce(address, error="550 no such user", at=api.clock.now())
    [bounce] = (await tickd.list_bounces()).items
    assert bounce.address == address and bounce.count == 1
    await tickd.clear_bounces(address)
    assert (await tickd.list_bounces()).items == []


async def test_a_missing_token_and_a_low_scope_raise_their_own_errors(api: Api) -> None:
    for blocking in (True, False):
        async with connected(api, None, blocking=blocking) as anonymous:
            with pytest.raises(Unauthorized) as unknown:
                await anonymous.list_jobs()
            assert unknown.value.status == 401
        async with connected(api, READ, blocking=blocking) as reader:
            with pytest.raises(Forbidden) as too_low:
                await reader.pause_job("any")
            assert "write" in str(too_low.value.detail)


async def test_the_lists_of_runs_take_a_domain(tickd: Calls, api: Api) -> None:
    for name, domain in (("alpha", "team-a"), ("bravo", "team-b")):
        job = JobCreate(name=name, handler="boom", schedule=EVERY_MINUTE, domain=domain)
        await tickd.create_job(job)
    api.clock.advance(60)
    await api.harness.engine.drain()
    runs = await tickd.list_executions(domain="team-b")
    assert [e.job_name for e in runs.items] == ["bravo"]
    dead = await tickd.list_dead_letters(domain="team-a")
    assert [e.job_name for e in dead.items] == ["alpha"]
    assert (await tickd.get_stats(domain="team-a")).totals == {"failed": 1}
    assert (await tickd.running(domain="team-a")).items == []
