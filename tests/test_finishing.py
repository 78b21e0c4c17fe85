"""Runs end in batches without holding their workers: a worker hands its run's end over and
takes the next run; the job stays leased until the end is written; workers wait only once the
store is behind. The store's batch write is held by the test, never timed."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterator, Sequence
from datetime import timedelta
from typing import Any

import pytest

from tests.conftest import T0, EngineFactory, RecordingObserver, make_job
from tests.fixtures.due_reads import spy_on_due_reads
from tests.test_engine import WAIT, _until, executions, noop
from tickd.scheduler.lock.memory import MemoryLock
from tickd.scheduler.model import CronSchedule, Execution, Job, Misfire, MisfirePolicy, Status
from tickd.scheduler.plugin.api import HandlerContext, Result
from tickd.scheduler.ports.backends import RunEnd, Store, StoreError
from tickd.scheduler.ports.clock import FakeClock
from tickd.scheduler.run.ledger import DueRun, Ledger
from tickd.scheduler.run.states import RunState
from tickd.scheduler.run.write import CLOSING_ATTEMPTS, Ended, Writer


def writer_of(store: Store, ledger: Ledger, clock: FakeClock | None = None) -> Writer:
    """The write stage alone, on the store, with an in-process lock."""
    return Writer(
        store=store,
        lock=MemoryLock(),
        clock=clock or FakeClock(T0),
        ledger=ledger,
        observer=RecordingObserver(),
        batch_size=10,
        linger_seconds=0,
    )


def ended(name: str, ledger: Ledger) -> Ended:
    """A run of job `name` that succeeded, held by `ledger` until its end is written."""
    job = make_job(name)
    execution = Execution(
        job_id=job.id,
        job_name=name,
        handler="noop",
        scheduled_at=T0,
        status=Status.SUCCESS,
        started_at=T0,
        finished_at=T0,
    )
    ledger.ended(DueRun(job))
    return Ended(DueRun(job), RunEnd(execution, None), "token")


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
    await asyncio.wait_for(h.engine.settled(), WAIT)  # the ends are written, then it returns
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
        await asyncio.wait_for(_until(lambda: h.engine.ledger.on_workers() < 2), WAIT)
    await asyncio.wait_for(_until(lambda: len(ran) == 4), WAIT)
    assert h.engine.ledger.count(RunState.ENDED) == 4, "none written: the fourth's worker waits"
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

    async def counted(limit: int, read: Awaitable[list[Job]]) -> list[Job]:
        jobs = await read
        answers.append(len(jobs))
        return jobs

    spy_on_due_reads(monkeypatch, store, counted)
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
    h.engine.ledger.fired_coming(1)  # a fired run waiting to be queued, for good
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
    work_out = h.engine.ender._ended

    def broken_for_one(task: Any, *args: Any) -> Any:
        if task.job.name == "broken":
            raise RuntimeError("a bug")
        return work_out(task, *args)

    monkeypatch.setattr(h.engine.ender, "_ended", broken_for_one)
    broken = await h.add(make_job("broken"))
    await h.add(make_job("fine"))
    await asyncio.wait_for(h.engine.drain(), WAIT)
    statuses = {e.job_name: e.status for e in await executions(store)}
    assert statuses == {"broken": Status.RUNNING, "fine": Status.SUCCESS}
    still = await store.get_job(broken.id)
    assert still is not None and still.lease is not None, "held until the reaper gives it back"
    assert "worker.task_crashed" in caplog.text
    assert h.engine.ledger.own_runs() == [], "let go: the reaper, not this instance, ends it"


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
    ledger = Ledger()
    writer = writer_of(store, ledger)
    for i in range(35):
        writer.write_later(ended(f"job-{i}", ledger))
    await asyncio.wait_for(_until(lambda: batches == [10]), WAIT)  # the first, being written
    assert not writer.has_room(), "two batches and a half behind it: the workers wait"

    ledger.fired_coming(1)
    held.set()
    await asyncio.wait_for(_until(writer.has_room), WAIT)
    assert batches == [10], "let go while the ends wait for the fired runs"
    ledger.none_coming()
    await asyncio.wait_for(writer.settled(), WAIT)
    assert batches == [10, 10, 10, 5]
    assert ledger.count(RunState.ENDED) == 0, "every run let go once its end was written"


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
    ledger = Ledger()
    writer = writer_of(store, ledger, clock)
    ending = asyncio.ensure_future(writer.write(ended("nightly", ledger)))
    await asyncio.wait_for(_until(lambda: len(tries) >= 20), WAIT)
    assert clock.monotonic() > 60, "a minute and more of refusals, and still trying"
    assert not ending.done()
    assert len(ledger.ending()) == 1, "held, its lease kept, while the store refuses"

    tried_before_closing = len(tries)
    await asyncio.wait_for(writer.close(), WAIT)
    # One more may start while the close is under way.
    assert len(tries) - tried_before_closing <= CLOSING_ATTEMPTS + 1
    outcome = await ending
    assert not outcome.applied and "database or disk is full" in str(outcome.error)
