"""Jobs due at one instant, more of them than the pool holds (a thousand on `* * * * * *`, the
hourly ones at the top of the hour): claimed ahead, armed, fired together at their time, started
before the ends of other runs are written. Driven by the injected clock; the store's calls are
watched, never timed."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.conftest import T0, EngineFactory, Harness, make_job
from tests.fixtures.due_reads import spy_on_due_reads
from tests.test_engine import WAIT, _until, crashed_mid_run, executions, noop
from tickd.scheduler.model import CronSchedule, Execution, IntervalSchedule, Job, Status
from tickd.scheduler.plugin.api import HandlerContext, Result
from tickd.scheduler.ports.backends import RunEnd, Store, StoreError
from tickd.scheduler.run.ledger import RECORDED_AHEAD_SECONDS
from tickd.scheduler.run.states import RunState

DUE = T0 + timedelta(seconds=5)
# A bound, not a measure, for draining hundreds of runs: FerretDB writes some 40 runs a
# second on this machine's slow spells, so WAIT's five seconds is too short for 250 of them.
WAIT_FOR_HUNDREDS = 60.0
# Room for four runs in the pool, batches of ten, and a lookahead past DUE.
SMALL_POOL: dict[str, Any] = {
    "workers": 2,
    "queue_size": 2,
    "batch_size": 10,
    "lookahead_seconds": 10,
}


async def _arm(h: Harness) -> None:
    """Ticks at T0 until nothing more is claimed: what the dispatcher does before the instant."""
    h.engine.start()
    for _ in range(100):
        if (await h.engine.tick()).claimed == 0:
            return
    raise AssertionError("still claiming after 100 ticks")


async def _leased(store: Store, names: Sequence[str]) -> int:
    jobs = [await store.get_job_by_name(name) for name in names]
    return sum(1 for job in jobs if job is not None and job.lease is not None)


async def test_jobs_due_at_one_instant_beyond_the_pools_room_are_all_claimed_before_it(
    make_engine: EngineFactory,
) -> None:
    h = make_engine({"noop": noop}, **SMALL_POOL)  # fifty due at one instant, 5 s ahead
    names = [f"hourly-{i:02}" for i in range(50)]
    for name in names:
        await h.add(make_job(name, next_run_at=DUE))
    await _arm(h)
    assert h.engine.ledger.armed_count() == 50, "all armed, not just the pool's room"
    assert await _leased(h.store, names) == 50
    assert await executions(h.store) == [], "nothing recorded before its time"

    h.clock.advance(5)
    await h.engine.drain()
    ran = await executions(h.store)
    assert sorted(e.job_name for e in ran) == names, "each once"
    assert {(e.status, e.started_at) for e in ran} == {(Status.SUCCESS, DUE)}


async def test_the_runs_armed_ahead_are_bounded_and_the_rest_run_after_the_instant(
    make_engine: EngineFactory,
) -> None:
    h = make_engine({"noop": noop}, **SMALL_POOL, lookahead_limit=20)
    names = [f"hourly-{i:02}" for i in range(50)]
    for name in names:
        await h.add(make_job(name, next_run_at=DUE))
    await _arm(h)
    assert h.engine.ledger.armed_count() == 20
    assert await _leased(h.store, names) == 20, "the others are left to any instance"

    h.clock.advance(5)
    await h.engine.drain()
    assert sorted(e.job_name for e in await executions(h.store)) == names


async def test_runs_due_now_beyond_the_pools_room_are_left_unclaimed(
    make_engine: EngineFactory,
) -> None:
    """A backlog is claimed as the pool makes room, so another instance with room takes the
    rest meanwhile; and while behind, nothing more is armed ahead of it."""
    gate = asyncio.Event()

    async def gated(ctx: HandlerContext) -> Result:
        await gate.wait()
        return None

    h = make_engine({"gated": gated}, workers=1, queue_size=1, batch_size=10, lookahead_seconds=10)
    due_now = [f"now-{i}" for i in range(6)]
    for name in due_now:
        await h.add(make_job(name, "gated"))
    await h.add(make_job("later", "gated", next_run_at=DUE))
    h.engine.start()
    try:
        tick = await h.engine.tick()
        assert (tick.fetched, tick.claimed) == (7, 3), "the pool's room, and the one armed"
        assert await _leased(h.store, due_now) == 2, "the pool's room, of those due now"
        assert h.engine.ledger.armed_count() == 1
        await h.add(make_job("later-still", "gated", next_run_at=DUE))
        assert (await h.engine.tick()).claimed == 0, "no room: nothing more taken"
        assert await _leased(h.store, [*due_now, "later-still"]) == 2
    finally:
        gate.set()
    await asyncio.wait_for(h.engine.drain(), WAIT)
    assert len(await executions(h.store)) == 6


async def test_runs_fired_together_start_before_the_ends_of_others_are_written(
    make_engine: EngineFactory, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thousand runs due at one instant share the loop with their own ends: the ends wait
    for the starts, or the last run starts twice as late. Seen here as the order of handler
    starts and end batches written, with ends let go as soon as the writer gets a turn."""
    order: list[str] = []

    async def record(ctx: HandlerContext) -> Result:
        order.append("start")
        return None

    write = store.write_ends

    async def written(finishes: Sequence[RunEnd], **kwargs: Any) -> list[bool]:
        order.append("ends")
        return await write(finishes, **kwargs)

    monkeypatch.setattr(store, "write_ends", written)
    # Room in the pool for all forty: they fire at once.
    settings = SMALL_POOL | {"queue_size": 40, "finish_linger_seconds": 0}
    h = make_engine({"record": record}, **settings)
    for i in range(40):
        await h.add(make_job(f"minutely-{i:02}", "record", next_run_at=DUE))
    await _arm(h)
    h.clock.advance(5)
    await asyncio.wait_for(h.engine.drain(), WAIT)
    assert order.count("start") == 40
    assert order.index("ends") == 40, "every fired run started before the first end was written"
    assert [e.status for e in await executions(store)] == [Status.SUCCESS] * 40


async def test_runs_due_beyond_what_the_workers_can_start_stay_armed_not_recorded_running(
    make_engine: EngineFactory,
) -> None:
    """A fired run is recorded `running`: one that would wait seconds for a worker (slow
    handlers) stays armed, and fires as room frees, so the record tells when it ran and a
    crash does not find it in flight."""
    gate = asyncio.Event()

    async def slow(ctx: HandlerContext) -> Result:
        await gate.wait()
        return None

    h = make_engine({"slow": slow}, **SMALL_POOL)
    names = [f"hourly-{i:02}" for i in range(10)]
    for name in names:
        await h.add(make_job(name, "slow", next_run_at=DUE))
    await _arm(h)
    h.clock.advance(5)
    try:
        assert (await h.engine.tick()).fired == 4, "the pool's room"
        assert [e.status for e in await executions(h.store)] == [Status.RUNNING] * 4
        assert h.engine.ledger.armed_count() == 6, "still armed, due"
        assert h.engine._until_next_timer() == 1.0, "a freed worker wakes the dispatcher"
    finally:
        gate.set()
    await asyncio.wait_for(h.engine.drain(), WAIT)
    ran = await executions(h.store)
    assert sorted(e.job_name for e in ran) == names
    assert {e.status for e in ran} == {Status.SUCCESS}


@pytest.mark.parametrize(
    ("failing", "started"), [(1, 0), (2, 10), (3, 110)], ids=["first", "second", "third"]
)
async def test_fired_runs_the_store_would_not_record_are_armed_again_and_run_once(
    make_engine: EngineFactory,
    store: Store,
    monkeypatch: pytest.MonkeyPatch,
    failing: int,
    started: int,
) -> None:
    """The first batch is recorded alone, the rest ten batches to an insert: the runs of a
    failed insert, and of any after it, did not start, and fire once the store takes writes
    again."""
    insert = store.insert_executions
    calls = 0

    async def one_fails(executions: Sequence[Execution], **kwargs: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == failing:
            raise StoreError("disk full")
        await insert(executions, **kwargs)

    h = make_engine(
        {"noop": noop}, batch_size=10, queue_size=300, lookahead_seconds=10, lookahead_limit=250
    )  # room for all 250 in the pool: they fire at once
    names = [f"every-second-{i:03}" for i in range(250)]
    for name in names:
        await h.add(make_job(name, schedule=CronSchedule(expr="* * * * * *"), next_run_at=DUE))
    await _arm(h)
    assert h.engine.ledger.armed_count() == 250
    monkeypatch.setattr(store, "insert_executions", one_fails)
    h.clock.advance(5)
    with pytest.raises(StoreError):
        await h.engine.tick()
    await asyncio.wait_for(_until(lambda: h.engine.ledger.on_workers() == 0), WAIT)
    assert len(await executions(store)) == started
    assert h.engine.ledger.armed_count() == 250 - started, (
        "the rest armed again, for the same instant"
    )

    await h.engine.drain()
    ran = await executions(store)
    assert sorted(e.job_name for e in ran) == names, "each once"
    assert {e.scheduled_at for e in ran} == {DUE}


async def test_expired_leases_are_reaped_even_when_every_tick_fires_runs(
    make_engine: EngineFactory,
) -> None:
    """The reaper's read waits while fired runs start, but a tick at most: a dispatcher whose
    every tick fires still gives a dead instance's runs back."""
    work = await crashed_mid_run(make_engine)

    survivor = make_engine({"work": noop, "noop": noop}, instance_id="survivor")
    # Two jobs half a second apart, a tick every half second: each tick fires one, armed by
    # the tick before, and arms the other.
    await survivor.add(
        make_job("on-the-second", schedule=CronSchedule(expr="* * * * * *"), next_run_at=T0)
    )
    half = timedelta(milliseconds=500)
    every_second = IntervalSchedule(every_seconds=1)
    await survivor.add(make_job("on-the-half", schedule=every_second, next_run_at=T0 + half))
    survivor.engine.start()
    await survivor.engine.tick()
    await asyncio.wait_for(survivor.engine.settled(), WAIT)
    fired = []
    for halves in range(1, 2 * (60 + 30 + 3)):
        survivor.clock.advance(0.5)
        fired.append((await survivor.engine.tick()).fired)
        await asyncio.wait_for(survivor.engine.settled(), WAIT)
        if halves == 2 * (60 + 30):  # the lease's expiry: the run's timeout and the margin
            [run] = await executions(survivor.store, work.id)
            assert run.status is Status.RUNNING, "not judged before its time"
    assert set(fired[2:]) == {1}, "every tick fired a run"
    statuses = [e.status for e in await executions(survivor.store, work.id)]
    assert statuses[0] is Status.ABANDONED, "given back within two ticks of its expiry"


async def test_runs_armed_ahead_are_recorded_just_before_their_time_and_start_at_it(
    make_engine: EngineFactory,
) -> None:
    """A thousand runs due at one instant would wait at it for their own insert: they are
    recorded RECORDED_AHEAD_SECONDS before it, `running` from their time, and released to the
    workers at that time, never before."""
    seen: list[datetime] = []

    async def clocked(ctx: HandlerContext) -> Result:
        seen.append(ctx.clock.now())
        return None

    h = make_engine({"clocked": clocked}, **SMALL_POOL | {"queue_size": 40})
    names = [f"minutely-{i:02}" for i in range(40)]
    for name in names:
        await h.add(make_job(name, "clocked", next_run_at=DUE))
    await _arm(h)
    h.clock.set(DUE - timedelta(seconds=RECORDED_AHEAD_SECONDS / 2))
    assert (await h.engine.tick()).fired == 0
    staged = await executions(h.store)
    assert {(e.status, e.started_at) for e in staged} == {(Status.RUNNING, DUE)}
    assert len(staged) == 40 and (
        h.engine.ledger.count(RunState.RECORDED),
        h.engine.ledger.armed_count(),
    ) == (
        40,
        0,
    )
    assert h.engine._until_next_timer() == pytest.approx(RECORDED_AHEAD_SECONDS / 2)

    h.clock.set(DUE - timedelta(milliseconds=1))
    assert (await h.engine.tick()).fired == 0
    await asyncio.sleep(0)
    assert seen == [], "not released before its time"

    h.clock.set(DUE)
    assert (await h.engine.tick()).fired == 40
    await asyncio.wait_for(h.engine.drain(), WAIT)
    assert seen == [DUE] * 40
    ran = await executions(h.store)
    assert sorted(e.job_name for e in ran) == names, "each once, recorded once"
    assert {(e.status, e.started_at) for e in ran} == {(Status.SUCCESS, DUE)}


async def test_runs_recorded_ahead_that_never_started_are_given_back_at_shutdown(
    make_engine: EngineFactory,
) -> None:
    """Recorded `running` but never started: on shutdown they are recorded abandoned, not
    started, and their occurrences are given back, to run once after the restart."""
    h = make_engine({"noop": noop}, **SMALL_POOL)
    names = [f"hourly-{i}" for i in range(3)]
    for name in names:
        await h.add(make_job(name, next_run_at=DUE))
    await _arm(h)
    h.clock.set(DUE - timedelta(seconds=RECORDED_AHEAD_SECONDS / 2))
    await h.engine.tick()
    assert h.engine.ledger.count(RunState.RECORDED) == 3
    await h.engine.shutdown()
    given_back = await executions(h.store)
    assert {(e.status, e.error.message if e.error else None) for e in given_back} == {
        (Status.ABANDONED, "not started")
    }
    assert h.observed.of(names[0]) == [
        ("recorded", "running"),
        ("finished", "abandoned"),
    ], "never started"
    for name in names:
        job = await h.store.get_job_by_name(name)
        assert job is not None and job.lease is None and job.next_run_at == DUE

    restarted = make_engine({"noop": noop}, **SMALL_POOL)
    restarted.clock.set(DUE)
    await asyncio.wait_for(restarted.engine.drain(), WAIT)
    ran = [e for e in await executions(h.store) if e.status is Status.SUCCESS]
    assert sorted((e.job_name, e.scheduled_at) for e in ran) == [(n, DUE) for n in names]


async def test_runs_released_at_their_time_start_before_the_ticks_store_calls(
    make_engine: EngineFactory, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each of the tick's store calls after the release (the reaper's, the claims ahead) is a
    transaction on the loop's thread: the runs released wait for none of them."""
    h = make_engine({"noop": noop}, **SMALL_POOL | {"queue_size": 40})
    for i in range(40):
        await h.add(make_job(f"minutely-{i:02}", next_run_at=DUE))
    await _arm(h)

    async def due(limit: int, read: Awaitable[list[Job]]) -> list[Job]:
        h.observed.heard.append(("due query", "", ""))
        return await read

    spy_on_due_reads(monkeypatch, store, due)
    h.clock.set(DUE - timedelta(seconds=RECORDED_AHEAD_SECONDS / 2))
    await h.engine.tick()
    h.observed.heard.clear()
    h.clock.set(DUE)
    assert (await h.engine.tick()).fired == 40
    hooks = [hook for hook, _, _ in h.observed.heard]
    assert "due query" in hooks, "the tick looked ahead after the release"
    assert hooks.index("due query") > max(i for i, hook in enumerate(hooks) if hook == "started")
    assert hooks.count("started") == 40
    await asyncio.wait_for(h.engine.drain(), WAIT)


async def test_runs_fired_late_start_part_by_part_before_the_next_parts_insert(
    make_engine: EngineFactory, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs recorded at their instant (none could be recorded ahead) are recorded in parts:
    each part's runs start before the next part's insert, a transaction on the loop's thread
    on SQLite, so the first (the most urgent, fetched first) wait for no later part."""
    insert = store.insert_executions
    h = make_engine(
        {"noop": noop}, batch_size=10, queue_size=300, lookahead_seconds=10, lookahead_limit=250
    )

    async def noted(executions: Sequence[Execution], **kwargs: Any) -> None:
        h.observed.heard.append(("insert", "", str(len(executions))))
        await insert(executions, **kwargs)

    names = [f"every-second-{i:03}" for i in range(250)]
    for name in names:
        await h.add(make_job(name, schedule=CronSchedule(expr="* * * * * *"), next_run_at=DUE))
    await _arm(h)
    monkeypatch.setattr(store, "insert_executions", noted)
    h.observed.heard.clear()
    h.clock.set(DUE)  # straight to the instant: nothing was recorded ahead
    assert (await h.engine.tick()).fired == 250
    order = [
        hook if hook == "started" else f"{hook} {detail}" for hook, _, detail in h.observed.heard
    ]
    order = [step for step in order if step.startswith(("insert", "started"))]
    assert order[:12] == ["insert 10", *["started"] * 10, "insert 100"]
    assert order[12 + 100] == "insert 100", "the second part's runs started before the third"
    await asyncio.wait_for(h.engine.drain(), WAIT_FOR_HUNDREDS)


async def test_runs_recorded_ahead_count_against_their_handlers_limit(
    make_engine: EngineFactory,
) -> None:
    """Staged runs hold their handler's slots until they have run: a job falling due
    meanwhile is not claimed past the limit."""
    h = make_engine({"noop": noop}, **SMALL_POOL, handler_concurrency={"noop": 2})
    for name in ("first", "second"):
        await h.add(make_job(name, next_run_at=DUE))
    await _arm(h)
    h.clock.set(DUE - timedelta(seconds=RECORDED_AHEAD_SECONDS / 2))
    await h.engine.tick()
    assert (h.engine.ledger.count(RunState.RECORDED), h.engine.ledger.armed_count()) == (2, 0)
    await h.add(make_job("third", next_run_at=DUE))
    assert (await h.engine.tick()).claimed == 0, "the handler's two slots are taken"
    assert await _leased(h.store, ["third"]) == 0

    h.clock.set(DUE)
    await asyncio.wait_for(h.engine.drain(), WAIT)
    assert sorted(e.job_name for e in await executions(h.store)) == ["first", "second", "third"]


async def test_runs_recorded_ahead_take_the_pools_room_from_those_recorded_after_them(
    make_engine: EngineFactory,
) -> None:
    """Staged runs will take the pool's room at their time: a second tick before it records
    no more than the room left, so none is recorded `running` to wait for a worker."""
    h = make_engine({"noop": noop}, **SMALL_POOL)  # room for four
    for i in range(10):
        await h.add(make_job(f"hourly-{i}", next_run_at=DUE))
    await _arm(h)
    h.clock.set(DUE - timedelta(seconds=RECORDED_AHEAD_SECONDS / 2))
    await h.engine.tick()
    h.clock.set(DUE - timedelta(seconds=RECORDED_AHEAD_SECONDS / 4))
    await h.engine.tick()
    assert (h.engine.ledger.count(RunState.RECORDED), h.engine.ledger.armed_count()) == (4, 6)
    assert len(await executions(h.store)) == 4

    h.clock.set(DUE)
    await asyncio.wait_for(h.engine.drain(), WAIT)
    assert len({e.job_name for e in await executions(h.store)}) == 10
