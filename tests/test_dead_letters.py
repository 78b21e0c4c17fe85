"""Dead letters end to end on every store: a run that failed for good is one, the job's policy
re-drives it a bounded number of times with a doubling backoff, and housekeeping prunes around
the unhandled ones and reports them, all on the fake clock."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from tests.conftest import T0, EngineFactory, Harness, make_job
from tests.test_engine import WAIT, noop
from tickd.scheduler.maintenance.retention import Housekeeper
from tickd.scheduler.model import DeadLetter, Execution, OnceSchedule, RedrivePolicy, Status
from tickd.scheduler.plugin.api import HandlerContext, Result
from tickd.scheduler.ports.backends import ExecutionQuery, Store


async def runs(store: Store, job_id: str) -> list[Execution]:
    """Oldest first."""
    found = await store.list_executions(ExecutionQuery(job_id=job_id, limit=1000))
    return sorted(found, key=lambda e: e.id)


async def broken(ctx: HandlerContext) -> Result:
    raise RuntimeError("upstream down")


async def drain_until(h: Harness, seconds: float) -> None:
    """Drain, then move the clock a second at a time up to `seconds` later, draining each."""
    await h.engine.drain()
    for _ in range(int(seconds)):
        h.clock.advance(1)
        await h.engine.drain()


async def test_a_run_that_failed_for_good_is_an_open_dead_letter(
    make_engine: EngineFactory,
) -> None:
    h = make_engine({"broken": broken})
    job = await h.add(make_job("no-policy", "broken", max_retries=1, next_run_at=T0))
    await h.engine.drain()
    [run] = await runs(h.store, job.id)
    assert (run.status, run.attempts, run.dead_letter) == (Status.FAILED, 2, DeadLetter.OPEN)
    assert await h.store.count_dead_letters() == {("broken", "default"): 1}
    assert await h.store.due_run_requests(T0 + timedelta(days=1), 10) == []


async def test_the_policy_redrives_with_a_doubling_backoff_up_to_its_bound(
    make_engine: EngineFactory,
) -> None:
    h = make_engine({"broken": broken})
    policy = RedrivePolicy(max_attempts=3, backoff_seconds=10)
    once = OnceSchedule(at=T0)
    job = await h.add(make_job("flaky", "broken", schedule=once, redrive=policy, next_run_at=T0))

    await drain_until(h, 200)

    occurrence = [r for r in await runs(h.store, job.id) if r.scheduled_at == T0]
    started = [(r.started_at - T0).total_seconds() for r in occurrence if r.started_at]
    assert started == [0, 10, 30, 70], "the first run, then re-drives 10 s, 20 s and 40 s apart"
    assert [r.dead_letter for r in occurrence] == [DeadLetter.REDRIVEN] * 3 + [DeadLetter.OPEN]
    assert await h.store.count_dead_letters() == {("broken", "default"): 1}, "one per occurrence"
    history = await h.store.list_changes(job.id)
    assert [(c.action, c.actor, c.changes["redrive"]) for c in reversed(history)] == [
        ("redrive", "tickd", 1),
        ("redrive", "tickd", 2),
        ("redrive", "tickd", 3),
    ]


async def test_a_redrive_that_succeeds_settles_the_dead_letter(make_engine: EngineFactory) -> None:
    calls = 0

    async def fails_once(ctx: HandlerContext) -> Result:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("first time unlucky")
        return {"ok": True}

    h = make_engine({"once": fails_once})
    policy = RedrivePolicy(max_attempts=5, backoff_seconds=5)
    job = await h.add(make_job("once", "once", redrive=policy, next_run_at=T0))
    await drain_until(h, 10)
    first, second = [r for r in await runs(h.store, job.id) if r.scheduled_at == T0]
    assert (first.status, first.dead_letter) == (Status.FAILED, DeadLetter.REDRIVEN)
    assert (second.status, second.dead_letter) == (Status.SUCCESS, None)
    assert await h.store.count_dead_letters() == {}


async def test_housekeeping_prunes_around_dead_letters_and_reports_them(
    make_engine: EngineFactory,
) -> None:
    h = make_engine({"broken": broken}, retention_days=1, retention_max_executions_per_job=0)
    job = await h.add(make_job("old", "broken", next_run_at=T0))
    await h.engine.drain()  # an open dead letter at T0
    done = [
        Execution(
            job_id=job.id,
            job_name=job.name,
            handler="broken",
            scheduled_at=T0 + timedelta(minutes=i),
            status=Status.SUCCESS,
            finished_at=T0 + timedelta(minutes=i),
        )
        for i in range(1, 4)
    ]
    await h.store.insert_executions(done)
    h.clock.advance(2 * 86400)
    metrics = h.engine.metrics
    keeper = Housekeeper(h.settings, h.store, h.clock, metrics)

    pruned = await keeper.run_once()

    assert pruned.executions == 2, "the dead letter and the job's newest stay"
    kept = {e.scheduled_at for e in await runs(h.store, job.id)}
    assert kept == {T0, T0 + timedelta(minutes=3)}
    assert metrics.registry.get_sample_value("tickd_pruned_total", {"kind": "executions"}) == 2
    gauge = {"handler": "broken", "domain": "default"}
    assert metrics.registry.get_sample_value("tickd_dead_letters", gauge) == 1
    [dead] = await h.store.list_executions(ExecutionQuery(dead_letter=DeadLetter.OPEN))
    await h.store.mark_dead_letters([dead.id], states=[DeadLetter.OPEN], to=DeadLetter.DISCARDED)
    await keeper.run_once()
    assert metrics.registry.get_sample_value("tickd_dead_letters", gauge) == 0


async def test_a_run_fenced_off_that_then_fails_queues_no_redrive(
    make_engine: EngineFactory,
) -> None:
    """A paused process comes back to find its lease taken over and the occurrence run again,
    and succeeded, elsewhere. Its own run then fails: that end is fenced off, and it must not
    queue a re-drive, which would run the occurrence a third time."""
    started, gate = asyncio.Event(), asyncio.Event()

    async def slow_then_fails(ctx: HandlerContext) -> Result:
        started.set()
        await gate.wait()
        raise RuntimeError("came back too late")

    policy = RedrivePolicy(max_attempts=3, backoff_seconds=1)
    stalled = make_engine({"work": slow_then_fails}, instance_id="stalled", lease_margin_seconds=1)
    # One retry: the run abandoned while it stalled runs again, rather than a dead letter.
    work = make_job("work", "work", redrive=policy, next_run_at=T0, max_retries=1)
    job = await stalled.add(work)
    stalled.engine.start()
    await stalled.engine.tick()
    await asyncio.wait_for(started.wait(), WAIT)
    stalled.clock.advance(job.timeout_seconds + 2)  # its lease lapsed while it stalled
    taker = make_engine({"work": noop}, instance_id="taker")
    await asyncio.wait_for(taker.engine.drain(), WAIT)
    gate.set()
    await asyncio.wait_for(stalled.engine.settled(), WAIT)
    await drain_until(taker, 30)

    ran = [
        (r.owner, r.status, r.dead_letter)
        for r in await runs(taker.store, job.id)
        if r.scheduled_at == T0
    ]
    assert sorted(ran) == [
        ("stalled", Status.FAILED, DeadLetter.OPEN),  # for ops: not left `redriving`
        ("taker", Status.SUCCESS, None),
    ]
    assert await taker.store.due_run_requests(T0 + timedelta(days=1), 10) == []
