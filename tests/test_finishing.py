"""Runs end in batches without holding their workers: a worker hands its run's end over and
takes the next run; the job stays leased until the end is written; workers wait only once the
store is behind. The store's batch write is held by the test, never timed."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any

import pytest

from tests.conftest import T0, EngineFactory, make_job
from tests.test_engine import WAIT, _until, executions, noop
from tickd.scheduler.lock.memory import MemoryLock
from tickd.scheduler.model import CronSchedule, Execution, Job, Misfire, MisfirePolicy, Status
from tickd.scheduler.plugin.api import HandlerContext, Result
from tickd.scheduler.ports.backends import RunEnd, Store, StoreError
from tickd.scheduler.ports.clock import FakeClock
from tickd.scheduler.run.fired_runs import FiredRuns
from tickd.scheduler.run.write import CLOSING_ATTEMPTS, Writer


@pytest.fixture
def held(
    store: Store, make_engine: EngineFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[asyncio.Event]:
    """The store writes no run's end until the event is set (at the latest when the test ends,
    before its engines shut down)."""
    gate = asyncio.Event()
    write = store.write_ends

    async def when_let(finishes: Sequence[RunEnd], **kwargs: Any) -> list[bool]:
        if finishes:  # runs' ends; an empty batch holds none
            await gate.wait()
        return await write(finishes, **kwargs)

    monkeypatch.setattr(store, "write_ends", when_let)
    yield gate
    gate.set()


async def test_a_worker_takes_its_next_run_while_the_last_ones_end_is_being_written(
    make_engine: EngineFactory, store: Store, held: asyncio.Event
) -> None:
    ran: list[str] = []

    async def record(ctx: HandlerContext) -> Result:
        ran.append(ctx.job_name)
        return None

    h = make_engine({"record": record}, workers=1, queue_size=1)
    jobs = [await h.add(make_job(name, "record")) for name in ("first", "second")]
    h.engine.start()

    assert (await h.engine.tick()).claimed == 2
    await asyncio.wait_for(_until(lambda: ran == ["first", "second"]), WAIT)
    # Not written yet: both jobs are still leased, so neither is taken again meanwhile.
    for job in jobs:
        stored = await store.get_job(job.id)
        assert stored is not None and stored.lease is not None
    assert (await h.engine.tick()).fetched == 0
    assert [e.status for e in await executions(store)] == [Status.RUNNING, Status.RUNNING]

    held.set()
    await asyncio.wait_for(h.engine.pool.join(), WAIT)  # the ends are written, then it returns
    assert [e.status for e in await executions(store)] == [Status.SUCCESS, Status.SUCCESS]
    finished = [(name, status) for hook, name, status in h.observed.heard if hook == "finished"]
    assert finished == [("first", "success"), ("second", "success")]
    for job in jobs:
        stored = await store.get_job(job.id)
        assert stored is not None and stored.lease is None


async def test_workers_wait_once_the_store_is_two_batches_behind(
    make_engine: EngineFactory, store: Store, held: asyncio.Event
) -> None:
    ran: list[str] = []

    async def record(ctx: HandlerContext) -> Result:
        ran.append(ctx.job_name)
        return None

    h = make_engine({"record": record}, workers=1, queue_size=1, batch_size=1)
    for i in range(8):
        await h.add(make_job(f"job-{i}", "record"))
    h.engine.start()

    # One end being written, two waiting: the fourth run's worker waits to hand its end over.
    for _ in range(4):
        await h.engine.tick()
        await asyncio.wait_for(_until(lambda: h.engine.pool.free_slots() > 0), WAIT)
    await asyncio.wait_for(_until(lambda: len(ran) == 4), WAIT)
    assert h.engine.pool.busy == 1
    assert (await h.engine.tick()).claimed == 1  # queued: no worker is free for it
    for _ in range(100):  # turns of the event loop, enough for a free worker to run it
        await asyncio.sleep(0)
    assert len(ran) == 4

    held.set()
    await asyncio.wait_for(h.engine.drain(), WAIT)
    assert len(ran) == 8
    assert [e.status for e in await executions(store)] == [Status.SUCCESS] * 8


async def test_a_job_behind_is_taken_again_once_its_end_is_written_not_a_tick_later(
    make_engine: EngineFactory, store: Store, held: asyncio.Event, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's hand-over wakes the dispatcher while the job is still leased; the end being
    written is what makes the job claimable again, so that must wake it too. (Otherwise a job due
    every second is taken once a tick, a tick and a query apart, and falls behind for good.)"""
    ran: list[str] = []

    async def record(ctx: HandlerContext) -> Result:
        ran.append(ctx.job_name)
        return None

    answers: list[int] = []
    due_jobs = store.due_jobs

    async def counted(*args: Any, **kwargs: Any) -> list[Job]:
        jobs = await due_jobs(*args, **kwargs)
        answers.append(len(jobs))
        return jobs

    monkeypatch.setattr(store, "due_jobs", counted)
    # A tick of a minute: only a wake-up runs the occurrences waiting in time.
    h = make_engine({"record": record}, tick_seconds=60)
    behind = make_job(
        "behind",
        "record",
        schedule=CronSchedule(expr="* * * * * *"),  # every second: its next is due too
        next_run_at=T0 - timedelta(seconds=10),
        misfire=Misfire(policy=MisfirePolicy.RUN_ALL),
    )
    await h.add(behind)
    stop = asyncio.Event()
    running = asyncio.create_task(h.engine.run(stop))
    try:
        # The first run ended; the dispatcher, woken by its worker, found the job still leased.
        await asyncio.wait_for(_until(lambda: len(ran) == 1 and 0 in answers), WAIT)
        held.set()
        await asyncio.wait_for(_until(lambda: len(ran) >= 3), WAIT)
    finally:
        stop.set()
        await asyncio.wait_for(running, WAIT)


async def test_an_end_waits_for_fired_runs_only_a_moment_not_until_they_have_all_started(
    make_engine: EngineFactory, store: Store
) -> None:
    """Ends give way to runs fired at their time (tests/test_lookahead.py), but a queue of them
    that never drains must not keep ends from the store."""
    h = make_engine({"noop": noop})
    h.engine.fired.queued()  # a fired run waiting in the queue, for good
    await h.add(make_job("ended"))
    await asyncio.wait_for(h.engine.drain(), WAIT)
    assert [e.status for e in await executions(store)] == [Status.SUCCESS]


async def test_an_end_that_cannot_be_worked_out_is_left_to_the_reaper_and_the_others_written(
    make_engine: EngineFactory,
    store: Store,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = make_engine({"noop": noop})
    end_at = h.engine.runner.completer.end_at

    def broken_for_one(task: Any, *args: Any) -> Any:
        if task.job.name == "broken":
            raise RuntimeError("a bug")
        return end_at(task, *args)

    monkeypatch.setattr(h.engine.runner.completer, "end_at", broken_for_one)
    broken = await h.add(make_job("broken"))
    await h.add(make_job("fine"))
    await asyncio.wait_for(h.engine.drain(), WAIT)
    statuses = {e.job_name: e.status for e in await executions(store)}
    assert statuses == {"broken": Status.RUNNING, "fine": Status.SUCCESS}
    still = await store.get_job(broken.id)
    assert still is not None and still.lease is not None, "held until the reaper gives it back"
    assert "finisher.end_failed" in caplog.text


async def test_workers_held_back_by_a_store_behind_are_let_go_once_runs_are_fired(
    store: Store, held: asyncio.Event, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers wait to hand ends over while the store is two batches behind; once runs are
    fired and wait for them, they must go on (the ends wait instead), or nothing starts and the
    ends go one batch per deferral: the dispatcher falls seconds behind."""
    written = store.write_ends  # held until the test lets it go
    batches: list[int] = []

    async def counted(finishes: Sequence[RunEnd], **kwargs: Any) -> list[bool]:
        batches.append(len(finishes))
        return await written(finishes, **kwargs)

    monkeypatch.setattr(store, "write_ends", counted)
    fired = FiredRuns()
    finisher = Writer(store, MemoryLock(), batch_size=10, linger_seconds=0, fired=fired)
    for i in range(35):
        ended = Execution(
            job_id=f"job-{i}",
            job_name=f"job-{i}",
            handler="noop",
            scheduled_at=T0,
            status=Status.SUCCESS,
            started_at=T0,
            finished_at=T0,
        )
        finisher.hand_over_then(RunEnd(ended, None), "token", lambda _: None)
    await asyncio.wait_for(_until(lambda: batches == [10]), WAIT)  # the first, being written
    assert not finisher.has_room(), "two batches and a half behind it: the workers wait"

    fired.coming(1)
    fired.queued()
    held.set()
    await asyncio.wait_for(_until(finisher.has_room), WAIT)
    assert batches == [10], "let go while the ends wait for the fired runs"
    fired.started()
    await asyncio.wait_for(finisher.settled(), WAIT)
    assert batches == [10, 10, 10, 5]


async def test_ends_the_store_refuses_are_tried_until_it_takes_them_but_not_past_shutdown(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk: an end is tried again for as long as the daemon runs (time passes on the
    injected clock), and a shutdown waits for a few more tries only, then says why it is not
    written (its lease expires and its occurrence is given back)."""
    tries: list[int] = []

    async def disk_full(finishes: Sequence[RunEnd], **kwargs: Any) -> list[bool]:
        tries.append(len(finishes))
        raise StoreError("sqlite: database or disk is full")

    monkeypatch.setattr(store, "write_ends", disk_full)
    finisher = Writer(store, MemoryLock(), batch_size=10, linger_seconds=0, sleep=clock.sleep)
    ended = Execution(
        job_id="job-1",
        job_name="nightly",
        handler="noop",
        scheduled_at=T0,
        status=Status.SUCCESS,
        started_at=T0,
        finished_at=T0,
    )
    ending = finisher.hand_over(RunEnd(ended, None), "token")
    await asyncio.wait_for(_until(lambda: len(tries) >= 20), WAIT)
    assert clock.monotonic() > 60, "a minute and more of refusals, and still trying"
    assert not ending.done()

    tried_before_closing = len(tries)
    await asyncio.wait_for(finisher.close(), WAIT)
    # One more may start while the close is under way.
    assert len(tries) - tried_before_closing <= CLOSING_ATTEMPTS + 1
    outcome = await ending
    assert not outcome.applied and "database or disk is full" in str(outcome.error)
