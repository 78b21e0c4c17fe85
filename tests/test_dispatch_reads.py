"""What a busy dispatcher asks the store: a burst's batches are as large as the pool has room
for, and the rare work (expired leases, run requests) is looked for once in a while, not per
batch.
Counted with the injected clock and gated handlers, never timed."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.conftest import T0, EngineFactory, make_job
from tests.fixtures.due_reads import spy_on_due_reads
from tests.test_engine import WAIT, _until, executions, noop, trigger
from tickd.scheduler.model import Execution, Job, Status
from tickd.scheduler.plugin.api import HandlerContext, Result
from tickd.scheduler.ports.backends import RunRequest, Store
from tickd.scheduler.run.fetch import REQUESTS_EVERY


def count_reaps(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[datetime]:
    """The times the store was asked for expired leases."""
    asked: list[datetime] = []
    reap = store.reap_expired_leases

    async def counted(now: datetime, **kwargs: Any) -> list[Execution]:
        asked.append(now)
        return await reap(now, **kwargs)

    monkeypatch.setattr(store, "reap_expired_leases", counted)
    return asked


async def test_a_busy_dispatcher_looks_for_expired_leases_once_a_heartbeat(
    make_engine: EngineFactory, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = make_engine({"noop": noop}, batch_size=2, tick_seconds=1, heartbeat_seconds=3)
    for i in range(10):
        await h.add(make_job(f"job-{i}"))
    asked = count_reaps(store, monkeypatch)

    await h.engine.drain()  # five full batches, back to back, in the same instant
    assert len(await executions(store)) == 10
    assert asked == [h.clock.now()]

    for _ in range(2):  # ticks a second apart: not each a look
        h.clock.advance(1.0)
        await h.engine.tick()
    assert len(asked) == 1
    h.clock.advance(1.0)
    await h.engine.tick()
    assert asked[1:] == [h.clock.now()]


async def test_a_busy_dispatcher_reads_the_run_requests_every_quarter_second_not_each_batch(
    make_engine: EngineFactory, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = make_engine({"noop": noop}, batch_size=2, tick_seconds=1)
    for i in range(10):
        await h.add(make_job(f"job-{i}"))
    triggered = await h.add(make_job("triggered", next_run_at=T0 + timedelta(days=1)))
    asked: list[datetime] = []
    due_run_requests = store.due_run_requests

    async def counted(now: datetime, limit: int, **kwargs: Any) -> list[tuple[RunRequest, Job]]:
        asked.append(now)
        return await due_run_requests(now, limit, **kwargs)

    monkeypatch.setattr(store, "due_run_requests", counted)
    h.engine.start()
    for _ in range(3):  # full batches, back to back, in the same instant
        assert (await h.engine.tick()).full
    assert asked == [T0]
    await store.insert_run_requests([trigger(triggered.id)])
    h.clock.advance(REQUESTS_EVERY.total_seconds())
    assert (await h.engine.tick()).claimed == 2  # the trigger, before the next due job
    assert asked[1:] == [h.clock.now()]
    await h.engine.drain()
    assert [e.status for e in await executions(store, triggered.id)] == [Status.SUCCESS]
    assert len(await executions(store)) == 11


async def test_with_more_due_than_room_the_dispatcher_waits_for_room_for_a_worthwhile_batch(
    make_engine: EngineFactory, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch costs the same round trips whatever its size: under a backlog, one freed slot
    is no reason to fetch; room for half of what the pool holds is."""
    started: list[str] = []
    gates: dict[str, asyncio.Event] = {}

    async def gated(ctx: HandlerContext) -> Result:
        started.append(ctx.job_name)
        await gates.setdefault(ctx.job_name, asyncio.Event()).wait()
        return None

    limits: list[int] = []

    async def recorded(limit: int, read: Awaitable[list[Job]]) -> list[Job]:
        limits.append(limit)
        return await read

    spy_on_due_reads(monkeypatch, store, recorded)
    # Two workers and a queue of two: a batch worth fetching has room for two.
    h = make_engine({"gated": gated}, workers=2, queue_size=2, batch_size=4, tick_seconds=60)
    for i in range(12):
        await h.add(make_job(f"job-{i:02}", "gated"))

    def release(name: str) -> None:
        gates.setdefault(name, asyncio.Event()).set()

    stop = asyncio.Event()
    running = asyncio.create_task(h.engine.run(stop))
    try:
        await asyncio.wait_for(_until(lambda: len(started) == 2), WAIT)
        assert limits == [4]  # the pool is full: two running, two queued
        release(started[0])
        await asyncio.wait_for(_until(lambda: len(started) == 3), WAIT)  # a queued one started
        for _ in range(100):  # turns of the event loop: time for a woken dispatcher to fetch
            await asyncio.sleep(0)
        assert limits == [4]  # one free slot: not worth a batch
        release(started[1])
        await asyncio.wait_for(_until(lambda: len(limits) >= 2), WAIT)
        # A batch of two; under a backlog, a read of one may follow it, for the domains not
        # read apart (scheduler/admission/fair_share.py).
        assert limits[:2] == [4, 2] and limits[2:] in ([], [1])
    finally:
        for i in range(12):
            release(f"job-{i:02}")
        stop.set()
        await asyncio.wait_for(running, WAIT)
