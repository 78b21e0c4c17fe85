"""Heartbeats: an instance silent past the timeout is taken for dead, but only by an instance
that has itself been beating for that long (after a store outage every beat is old)."""

from __future__ import annotations

from datetime import timedelta

from scheduler.clock import FakeClock
from scheduler.heartbeat import Heartbeat
from scheduler.lock.memory import MemoryLock
from scheduler.ports import Store
from tests.conftest import T0, make_job
from tests.contract.test_store import claim_of


async def test_the_first_beat_after_an_outage_takes_no_one_for_dead(store: Store) -> None:
    job = make_job("held")
    await store.insert_job(job)
    await store.claim_jobs([claim_of(job, owner="other", until=T0 + timedelta(hours=1))], T0)
    await store.beat("other", T0)
    clock = FakeClock(T0)
    heartbeat = Heartbeat(store, clock, "me", lock=MemoryLock(), every_seconds=3, lapse_seconds=10)
    assert await heartbeat.beat(T0) == 0
    # The store was away for 30 s: no instance could beat, "other" is as alive as we are.
    back = T0 + timedelta(seconds=30)
    assert await heartbeat.beat(back) == 0, "not judged before a whole lapse of our own beats"
    await store.beat("other", back + timedelta(seconds=1))
    for seconds in (5, 11):
        assert await heartbeat.beat(back + timedelta(seconds=seconds)) == 0, "it beat: alive"
    assert await heartbeat.beat(back + timedelta(seconds=16)) == 1, "silent 15 s since: dead"
