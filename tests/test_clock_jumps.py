"""The wall clock jumping an hour forward and back (an NTP step, a VM restored from a snapshot),
injected through the fake clock: its wall time moves, its monotonic time does not. No occurrence
runs twice, none is lost beyond its misfire policy, and a run in flight keeps its lease."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from tests.conftest import T0, EngineFactory, Harness, make_job
from tests.test_engine import _until
from tickd.scheduler.model import (
    CronSchedule,
    Execution,
    IntervalSchedule,
    Misfire,
    MisfirePolicy,
    OnceSchedule,
    Status,
)
from tickd.scheduler.plugin.api import HandlerContext, Result
from tickd.scheduler.ports.backends import ExecutionQuery, Store
from tickd.scheduler.run.ledger import RECORDED_AHEAD_SECONDS
from tickd.scheduler.run.states import RunState

WAIT = 5.0
HOUR = 3600.0


async def noop(ctx: HandlerContext) -> Result:
    return None


async def executions(store: Store) -> list[Execution]:
    return list(reversed(await store.list_executions(ExecutionQuery(limit=1000))))


async def in_flight(h: Harness, gate: asyncio.Event, started: asyncio.Event) -> None:
    h.engine.start()
    assert (await h.engine.tick()).claimed == 1
    await asyncio.wait_for(started.wait(), WAIT)


def gated() -> tuple[asyncio.Event, asyncio.Event, object]:
    gate, started = asyncio.Event(), asyncio.Event()

    async def slow(ctx: HandlerContext) -> Result:
        started.set()
        await gate.wait()
        return None

    return gate, started, slow


@pytest.mark.parametrize("jump", [HOUR, -HOUR], ids=["forward", "back"])
async def test_a_run_in_flight_across_a_jump_runs_once_and_its_duration_is_real(
    make_engine: EngineFactory, jump: float
) -> None:
    gate, started, slow = gated()
    h = make_engine({"slow": slow}, lease_margin_seconds=30)
    job = await h.add(make_job("slow", "slow", schedule=CronSchedule(expr="0 * * * * *")))
    await in_flight(h, gate, started)
    h.clock.jump(jump)
    await h.engine.tick()  # the reaper looks at the lease with the new wall time
    gate.set()
    await asyncio.wait_for(h.engine.settled(), WAIT)
    await asyncio.wait_for(h.engine.drain(), WAIT)

    run, *after = await executions(h.store)
    assert (run.status, run.scheduled_at, run.token) == (Status.SUCCESS, T0, 1)
    assert run.duration_ms is not None and 0 <= run.duration_ms < WAIT * 1000
    # Forward, the missed hour is one coalesced run (the default policy); back, nothing more.
    assert [(e.status, e.scheduled_at) for e in after] == (
        [(Status.SUCCESS, T0 + timedelta(minutes=1))] if jump > 0 else []
    )
    stored = await h.store.get_job(job.id)
    assert stored is not None and stored.lease is None
    assert h.engine.metrics.leases_reaped._value.get() == 0


@pytest.mark.parametrize(
    ("policy", "status"),
    [
        (MisfirePolicy.COALESCE, Status.SUCCESS),
        (MisfirePolicy.RUN_ALL, Status.SUCCESS),
        (MisfirePolicy.SKIP, Status.SKIPPED),
    ],
)
async def test_a_run_armed_ahead_of_a_forward_jump_fires_once_by_its_misfire_policy(
    make_engine: EngineFactory, policy: MisfirePolicy, status: Status
) -> None:
    h = make_engine({"noop": noop}, lookahead_seconds=10)
    job = await h.add(
        make_job(
            schedule=IntervalSchedule(every_seconds=HOUR),
            next_run_at=T0 + timedelta(seconds=5),
            misfire=Misfire(policy=policy, grace_seconds=60),
        )
    )
    h.engine.start()
    assert (await h.engine.tick()).claimed == 1, "armed"
    h.clock.jump(HOUR)
    await asyncio.wait_for(h.engine.drain(), WAIT)
    await asyncio.wait_for(h.engine.drain(), WAIT)

    [run] = await executions(h.store)
    assert (run.status, run.scheduled_at) == (status, T0 + timedelta(seconds=5))
    stored = await h.store.get_job(job.id)
    assert stored is not None and stored.lease is None and stored.next_run_at is not None
    assert stored.next_run_at > h.clock.now(), "the schedule moved on past the jump"


async def test_a_run_armed_ahead_of_a_backward_jump_is_given_back_and_fires_once_as_late(
    make_engine: EngineFactory,
) -> None:
    """Armed for 5 s later when the wall clock steps an hour back: it fires 5 s after the step,
    once, not an hour and 5 s later."""
    h = make_engine({"noop": noop}, lookahead_seconds=10)
    job = await h.add(make_job(next_run_at=T0 + timedelta(seconds=5)))
    h.engine.start()
    assert (await h.engine.tick()).claimed == 1, "armed"
    stepped = h.clock.jump(-HOUR)
    await asyncio.wait_for(h.engine.drain(), WAIT)
    h.clock.advance(5)
    await asyncio.wait_for(h.engine.drain(), WAIT)
    await asyncio.wait_for(h.engine.drain(), WAIT)

    [run] = await executions(h.store)
    assert (run.status, run.scheduled_at) == (Status.SUCCESS, stepped + timedelta(seconds=5))
    stored = await h.store.get_job(job.id)
    assert stored is not None and stored.lease is None


async def test_after_a_three_hour_step_back_an_every_ten_seconds_job_fires_within_ten_seconds(
    make_engine: EngineFactory,
) -> None:
    """The wall clock steps 3 h back between two runs of an every-10-seconds job: its next run
    comes 10 s after the step (as it would have without it), not 3 h later; the step is counted
    and the move is in the job's history."""
    h = make_engine({"noop": noop})
    job = await h.add(make_job(schedule=IntervalSchedule(every_seconds=10), next_run_at=T0))
    for _ in range(2):
        await asyncio.wait_for(h.engine.drain(), WAIT)
        h.clock.advance(10)
    await asyncio.wait_for(h.engine.drain(), WAIT)  # the third run, at T0 + 20 s
    stepped = h.clock.jump(-3 * HOUR)
    await asyncio.wait_for(h.engine.drain(), WAIT)
    h.clock.advance(10)
    await asyncio.wait_for(h.engine.drain(), WAIT)

    [after] = [e for e in await executions(h.store) if e.scheduled_at < T0]
    assert (after.status, after.scheduled_at) == (Status.SUCCESS, stepped + timedelta(seconds=10))
    assert h.engine.metrics.clock_steps_back._value.get() == 1
    assert h.engine.metrics.rescheduled_after_clock_step._value.get() == 1
    moved = next(c for c in await h.store.list_changes(job.id) if c.action == "reschedule")
    assert moved.actor == "tickd" and moved.changes["clock_stepped_back_seconds"] == 3 * HOUR


async def test_after_a_step_back_a_cron_job_fires_at_its_next_time_after_the_new_wall_clock(
    make_engine: EngineFactory,
) -> None:
    """A quarter-hourly cron job whose next fire time was computed 3 h ahead fires at the next
    quarter hour of the wall clock as it is now."""
    h = make_engine({"noop": noop})
    await h.add(make_job(schedule=CronSchedule(expr="0 */15 * * * *"), next_run_at=T0))
    await asyncio.wait_for(h.engine.drain(), WAIT)
    h.clock.advance(60)
    await asyncio.wait_for(h.engine.drain(), WAIT)
    h.clock.jump(-3 * HOUR)  # T0 + 1 min - 3 h
    await asyncio.wait_for(h.engine.drain(), WAIT)
    h.clock.advance(14 * 60)
    await asyncio.wait_for(h.engine.drain(), WAIT)

    assert {(e.status, e.scheduled_at) for e in await executions(h.store)} == {
        (Status.SUCCESS, T0),
        (Status.SUCCESS, T0 + timedelta(minutes=15) - timedelta(hours=3)),
    }


async def test_a_step_back_leaves_a_once_job_and_a_running_job_where_they_are(
    make_engine: EngineFactory,
) -> None:
    gate, started, slow = gated()
    h = make_engine({"slow": slow, "noop": noop}, lease_margin_seconds=30)
    once = await h.add(
        make_job(
            "once",
            schedule=OnceSchedule(at=T0 + timedelta(hours=1)),
            next_run_at=T0 + timedelta(hours=1),
        )
    )
    running = await h.add(make_job("running", "slow"))
    await in_flight(h, gate, started)
    h.clock.jump(-HOUR)
    await h.engine.tick()
    gate.set()
    await asyncio.wait_for(h.engine.drain(), WAIT)

    assert h.engine.metrics.rescheduled_after_clock_step._value.get() == 0
    stored = await h.store.get_job(once.id)
    assert stored is not None and stored.next_run_at == once.next_run_at
    [run] = await executions(h.store)
    assert (run.job_name, run.status, run.scheduled_at) == ("running", Status.SUCCESS, T0)
    after = await h.store.get_job(running.id)
    assert after is not None and after.next_run_at == h.clock.now() + timedelta(seconds=60)


async def test_a_run_recorded_ahead_of_a_forward_jump_keeps_its_lease_and_runs_once(
    make_engine: EngineFactory,
) -> None:
    """Recorded `running` just before its time, it is this instance's run as much as one in
    flight: its lease is renewed across the jump, so the reaper leaves it be while it waits
    for the one worker, busy with another run."""
    gate, started, slow = gated()
    h = make_engine({"slow": slow, "noop": noop}, workers=1, queue_size=2, lookahead_seconds=10)
    await h.add(make_job("busy", "slow"))
    await h.add(make_job("next", next_run_at=T0 + timedelta(seconds=5)))
    h.engine.start()
    assert (await h.engine.tick()).claimed == 2, "one runs, one is armed"
    await asyncio.wait_for(started.wait(), WAIT)
    h.clock.set(T0 + timedelta(seconds=5 - RECORDED_AHEAD_SECONDS / 2))
    await h.engine.tick()
    assert h.engine.ledger.count(RunState.RECORDED) == 1, "recorded ahead"
    h.clock.jump(HOUR)
    await h.engine.tick()  # released, queued behind the busy worker
    h.engine.leases.reap_soon()  # the reaper looks at once, as when an instance died
    await h.engine.tick()
    gate.set()
    await asyncio.wait_for(h.engine.drain(), WAIT)

    runs = [e for e in await executions(h.store) if e.job_name == "next"]
    assert [(e.status, e.scheduled_at) for e in runs] == [
        (Status.SUCCESS, T0 + timedelta(seconds=5))
    ]
    assert h.engine.metrics.leases_reaped._value.get() == 0


async def test_a_run_whose_end_waits_for_the_store_across_a_forward_jump_runs_once(
    make_engine: EngineFactory, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run is over but its end waits for the store (a batch behind) when the wall clock
    steps forward: its lease is renewed with those of the runs in flight. Before, it had left
    the pool, and this instance's own reaper abandoned it and ran the occurrence again."""
    write = store.write_ends
    store_back = asyncio.Event()

    async def behind(*args: Any, **kwargs: Any) -> list[bool]:
        await store_back.wait()
        return await write(*args, **kwargs)

    monkeypatch.setattr(store, "write_ends", behind)
    h = make_engine({"noop": noop}, lease_margin_seconds=30)
    await h.add(make_job("ended", schedule=CronSchedule(expr="0 0 * * * *")))
    h.engine.start()
    await h.engine.tick()
    await asyncio.wait_for(_until(lambda: len(h.engine.ledger.ending()) == 1), WAIT)
    h.clock.jump(HOUR)
    await h.engine.tick()
    h.engine.leases.reap_soon()  # the reaper looks at once
    await h.engine.tick()
    store_back.set()
    await asyncio.wait_for(h.engine.drain(), WAIT)

    assert [(e.status, e.scheduled_at) for e in await executions(h.store)] == [
        (Status.SUCCESS, T0),
        (Status.SUCCESS, T0 + timedelta(hours=1)),
    ], "T0 once, then the hour the jump crossed (coalesced)"
    assert h.engine.metrics.leases_reaped._value.get() == 0


@pytest.mark.parametrize("jump", [HOUR, -HOUR], ids=["forward", "back"])
async def test_a_cron_job_across_a_jump_runs_each_occurrence_once(
    make_engine: EngineFactory, jump: float
) -> None:
    """Every minute for ten minutes, a jump in the middle: no minute twice, and after a forward
    jump the missed hour is one coalesced run (the default policy), not sixty."""
    h = make_engine({"noop": noop}, lookahead_seconds=10)
    await h.add(make_job(schedule=CronSchedule(expr="0 * * * * *"), next_run_at=T0))
    for minute in range(10):
        if minute == 5:
            h.clock.jump(jump)
        await asyncio.wait_for(h.engine.drain(), WAIT)
        h.clock.advance(60)
    await asyncio.wait_for(h.engine.drain(), WAIT)
    runs = await executions(h.store)
    times = [run.scheduled_at for run in runs]
    assert len(times) == len(set(times)), "no occurrence ran twice"
    assert all(run.status is Status.SUCCESS for run in runs)
    # Back: the schedule carries on from the new wall time (the minute the step lands on is
    # not "after" it); forward: the missed hour is one coalesced run.
    expected = 11 if jump > 0 else 10
    assert len(runs) == expected, times
