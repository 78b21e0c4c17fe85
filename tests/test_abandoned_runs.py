"""The engine end to end: a run whose instance dies each time it runs is run again only within
its job's retries (max_retries + 1 attempts in all), then it is the occurrence's dead letter."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from tests.conftest import T0, EngineFactory, make_job
from tickd.scheduler.model import DeadLetter, Execution, Job, Status, new_id
from tickd.scheduler.plugin.api import HandlerContext, Result
from tickd.scheduler.ports.backends import ExecutionQuery, RunRequest, Store

WAIT = 10.0
TIMEOUT = 60
MARGIN = 30
# Each instance that takes the run over dies too; a store that never gives up stops here.
ENOUGH_INSTANCES = 30


async def hang(ctx: HandlerContext) -> Result:
    """A run that kills its instance: it never ends, and its instance writes nothing more."""
    await asyncio.Event().wait()
    return None


async def occurrence_runs(store: Store, job: Job) -> list[Execution]:
    found = await store.list_executions(ExecutionQuery(job_id=job.id, limit=1000))
    return sorted((e for e in found if e.scheduled_at == T0), key=lambda e: e.token or 0)


async def instances_die_running(make_engine: EngineFactory, job: Job) -> list[Execution]:
    """Instance after instance takes the occurrence over and dies running it, until none
    takes it any more; its runs, in the order they ran."""
    for n in range(ENOUGH_INSTANCES):
        instance = make_engine({"work": hang}, instance_id=f"dies-{n}", lease_margin_seconds=MARGIN)
        instance.clock.advance(TIMEOUT + MARGIN + 1)  # the last one's lease expired
        instance.engine.start()
        await asyncio.wait_for(instance.engine.tick(), WAIT)
        runs = await occurrence_runs(instance.store, job)
        if not runs or runs[-1].status is not Status.RUNNING:
            return runs
    return await occurrence_runs(instance.store, job)


async def test_a_triggered_run_with_no_retries_whose_instance_dies_runs_once_then_dead_letters(
    make_engine: EngineFactory,
) -> None:
    first = make_engine({"work": hang}, instance_id="dies-first", lease_margin_seconds=MARGIN)
    later = T0 + timedelta(days=1)  # not due by its schedule: only the trigger runs it
    job = await first.add(
        make_job("work", "work", timeout_seconds=TIMEOUT, next_run_at=later, max_retries=0)
    )
    trigger = RunRequest(
        id=new_id(), job_id=job.id, scheduled_at=T0, reason="trigger", not_before=T0, created_at=T0
    )
    await first.store.insert_run_requests([trigger])
    first.engine.start()
    assert (await first.engine.tick()).claimed == 1

    runs = await instances_die_running(make_engine, job)

    assert [(e.owner, e.status, e.dead_letter) for e in runs] == [
        ("dies-first", Status.ABANDONED, DeadLetter.OPEN)
    ]
    assert runs[0].error is not None and runs[0].error.type == "Abandoned"
    assert await first.store.due_run_requests(later, 10) == [], "the trigger is spent"
    after = await first.store.get_job(job.id)
    assert after is not None and after.next_run_at == later and after.lease is None


async def test_a_scheduled_run_with_two_retries_whose_instance_dies_runs_three_times_at_most(
    make_engine: EngineFactory,
) -> None:
    first = make_engine({"work": hang}, instance_id="dies-first", lease_margin_seconds=MARGIN)
    job = await first.add(make_job("work", "work", timeout_seconds=TIMEOUT, max_retries=2))
    first.engine.start()
    assert (await first.engine.tick()).claimed == 1

    runs = await instances_die_running(make_engine, job)

    assert [(e.status, e.dead_letter) for e in runs] == [
        (Status.ABANDONED, None),
        (Status.ABANDONED, None),
        (Status.ABANDONED, DeadLetter.OPEN),
    ]
    assert runs[-1].error is not None and "abandoned 3 times" in runs[-1].error.message
    after = await first.store.get_job(job.id)
    assert after is not None and after.next_run_at is not None and after.next_run_at > T0
