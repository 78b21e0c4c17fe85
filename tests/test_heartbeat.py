"""Heartbeats: an instance whose beat has not changed for the timeout (of the observer's
monotonic time) is taken for dead, but only by an instance that has itself been beating for that
long (after a store outage no beat has changed for a while). Never by comparing the beats' wall
times: each was written by another clock, which may be hours apart."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import pytest

from tests.conftest import T0, make_job
from tests.contract.test_store import claim_of
from tickd.scheduler.lock.memory import MemoryLock
from tickd.scheduler.maintenance.heartbeat import Heartbeat
from tickd.scheduler.maintenance.partitions import PartitionKeeper
from tickd.scheduler.ports.backends import Store
from tickd.scheduler.ports.clock import FakeClock

HOUR = 3600.0
WAIT = 5.0
EVERY, LAPSE = 3.0, 10.0


def observer(store: Store, clock: FakeClock) -> Heartbeat:
    partitions = PartitionKeeper(store, clock, "me", hold_seconds=LAPSE / 2)
    return Heartbeat(
        store,
        clock,
        "me",
        lock=MemoryLock(),
        every_seconds=EVERY,
        lapse_seconds=LAPSE,
        partitions=partitions,
    )


async def held_by_other(store: Store, until_seconds: float = HOUR) -> None:
    job = make_job("held")
    await store.insert_job(job)
    until = T0 + timedelta(seconds=until_seconds)
    await store.claim_jobs([claim_of(job, owner="other", until=until)], T0)


async def test_the_first_beat_after_an_outage_takes_no_one_for_dead(store: Store) -> None:
    await held_by_other(store)
    await store.beat("other", T0)
    clock = FakeClock(T0)
    heartbeat = observer(store, clock)
    assert await heartbeat.beat_if_due() == 0
    clock.advance(30)  # the store was away: no instance could beat, "other" is as alive as we
    assert await heartbeat.beat_if_due() == 0, "not judged before a whole lapse of our own beats"
    clock.advance(1)
    await store.beat("other", clock.now())
    for seconds in (4, 6):
        clock.advance(seconds)
        assert await heartbeat.beat_if_due() == 0, "it beat: alive"
    clock.advance(5)
    assert await heartbeat.beat_if_due() == 1, "silent 15 s since: dead"


@pytest.mark.parametrize("skew", [HOUR, -HOUR], ids=["ahead", "behind"])
async def test_an_instance_whose_clock_is_apart_is_judged_by_its_beats_changing(
    store: Store, skew: float
) -> None:
    """Its beats say an hour ahead or behind ours: alive while they change, dead a lapse after
    they stop, whatever they say."""
    await held_by_other(store, until_seconds=skew + 60)  # its lease, by its clock
    clock = FakeClock(T0)
    heartbeat = observer(store, clock)
    for _ in range(20):  # a minute
        await store.beat("other", clock.now() + timedelta(seconds=skew))
        assert await heartbeat.beat_if_due() == 0, "alive"
        clock.advance(EVERY)
    ended = []
    for _ in range(3):  # 3, 6 and 9 s after its last beat
        ended.append(await heartbeat.beat_if_due())
        clock.advance(EVERY)
    assert ended == [0, 0, 0], "within a lapse of its last beat"
    assert await heartbeat.beat_if_due() == 1, "silent for more than a lapse: dead"


async def test_a_wall_clock_stepped_back_on_the_observer_delays_no_takeover(store: Store) -> None:
    await held_by_other(store)
    await store.beat("other", T0)
    clock = FakeClock(T0)
    heartbeat = observer(store, clock)
    assert await heartbeat.beat_if_due() == 0
    clock.jump(-HOUR)
    ended = 0
    for _ in range(4):  # 12 s of real time: past the lapse
        clock.advance(EVERY)
        ended += await heartbeat.beat_if_due()
    assert ended == 1


async def test_an_instance_found_dead_is_forgotten_once_its_leases_are_ended(store: Store) -> None:
    """Every restart is a new instance: the records of the dead must not pile up for every beat
    of every instance to read and judge again."""
    await held_by_other(store)
    await store.beat("other", T0)
    clock = FakeClock(T0)
    heartbeat = observer(store, clock)
    ended = 0
    for _ in range(5):  # 15 s: past the lapse
        ended += await heartbeat.beat_if_due()
        clock.advance(EVERY)
    assert ended == 1
    assert set(await store.instances()) == {"me"}
    await store.beat("other", clock.now())  # a paused process come back: alive again
    for _ in range(3):
        clock.advance(EVERY)
        assert await heartbeat.beat_if_due() == 0
    assert set(await store.instances()) == {"me", "other"}


async def test_a_beat_judges_by_the_beats_its_own_write_answered(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each beat of each instance is one round trip where the store can: no read apart."""
    await held_by_other(store)
    await store.beat("other", T0)

    async def read_apart() -> dict[str, datetime]:
        raise AssertionError("the beat's answer has every instance's beat")

    monkeypatch.setattr(store, "instances", read_apart)
    clock = FakeClock(T0)
    heartbeat = observer(store, clock)
    ended = 0
    for _ in range(5):  # 15 s: past the lapse
        ended += await heartbeat.beat_if_due()
        clock.advance(EVERY)
    assert ended == 1, "other, silent all along, found dead"


async def test_its_beating_task_says_when_it_ended_a_dead_instances_leases(store: Store) -> None:
    """The dispatcher reaps at once on that word, not at its next look (tests/test_engine.py)."""
    await held_by_other(store)
    await store.beat("other", T0)
    clock = FakeClock(T0)
    heartbeat = observer(store, clock)
    for seconds in (0, 6):
        clock.advance(seconds)
        assert await heartbeat.beat_if_due() == 0
    assert not heartbeat.lapsed.is_set()
    clock.advance(5)  # "other" silent for 11 s: dead at the next beat, the task's
    stop = asyncio.Event()
    beating = asyncio.create_task(heartbeat.run(stop, pause_seconds=0.01))
    try:
        await asyncio.wait_for(heartbeat.lapsed.wait(), WAIT)
    finally:
        stop.set()
        await asyncio.wait_for(beating, WAIT)
    held = await store.get_job_by_name("held")
    assert held is not None and held.lease is not None
    assert held.lease.until < T0, "its lease ended: expired now, for the reaper"
