"""Partitions: the assignment every instance computes from the live instances (balanced within
one partition, few moves when one comes or goes), and each instance's keeper taking and freeing
its share in the store as instances join, leave and die, holding nothing once it cannot beat for
half the heartbeat timeout, and taking what it waits for as soon as its holder frees it, but
freeing none while a fetch that may have read it claims; the backlog gauges counting only the
partitions held."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import T0, EngineFactory, make_job
from tickd.scheduler.lock.memory import MemoryLock
from tickd.scheduler.maintenance.backlog import BacklogGauges
from tickd.scheduler.maintenance.heartbeat import Heartbeat
from tickd.scheduler.maintenance.partitions import PartitionKeeper
from tickd.scheduler.metrics import Metrics
from tickd.scheduler.model import Job
from tickd.scheduler.partitions import PartitionTurns, assignment, owned_by, partition_of
from tickd.scheduler.plugin.api import HandlerContext, Result
from tickd.scheduler.ports.backends import Backlog
from tickd.scheduler.ports.clock import FakeClock
from tickd.scheduler.store.sqlite import SQLiteStore

P = 64
HOLD = 5.0
names = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=20)


@settings(max_examples=60, deadline=None)
@given(st.sets(names, min_size=1, max_size=8), st.sampled_from([1, 7, 64, 256]))
def test_every_partition_has_one_owner_and_shares_differ_by_one_at_most(
    instances: set[str], count: int
) -> None:
    owners = assignment(count, instances)
    assert sorted(owners) == list(range(count))
    loads = Counter(owners.values())
    shares = [loads.get(instance, 0) for instance in instances]
    assert max(shares) - min(shares) <= 1
    # Every instance computes the same map, whatever order it read the others in.
    assert assignment(count, sorted(instances, reverse=True)) == owners


@settings(max_examples=40, deadline=None)
@given(st.sets(names, min_size=2, max_size=6), names)
def test_a_join_moves_about_the_newcomers_share(instances: set[str], newcomer: str) -> None:
    if newcomer in instances:
        return
    before = assignment(P, instances)
    after = assignment(P, {*instances, newcomer})
    moved = sum(before[part] != after[part] for part in range(P))
    share = P // (len(instances) + 1)
    # Rendezvous alone moves exactly the newcomer's share; balancing costs a few more.
    assert share <= moved <= 2 * share + len(instances)


def test_a_jobs_partition_is_crc32_of_its_id() -> None:
    # Stable across processes and languages: the IEEE CRC-32 of the id's bytes, whose check
    # value for "123456789" is 0xCBF43926.
    assert partition_of("123456789", 64) == 0xCBF43926 % 64
    assert partition_of("123456789", 1000) == 0xCBF43926 % 1000
    assert {partition_of(f"job-{i}", 8) for i in range(200)} == set(range(8))


async def keeper(
    store: SQLiteStore, clock: FakeClock, instance: str, *, metrics: Metrics | None = None
) -> PartitionKeeper:
    await store.beat(instance, T0)
    return PartitionKeeper(store, clock, instance, hold_seconds=HOLD, metrics=metrics or Metrics())


async def test_two_instances_read_disjoint_halves_and_a_leaver_hands_its_half_over(
    sqlite_store: SQLiteStore,
) -> None:
    clock = FakeClock(T0)
    a = await keeper(sqlite_store, clock, "a")
    b_metrics = Metrics()
    b = await keeper(sqlite_store, clock, "b", metrics=b_metrics)
    assert a.readable() is None  # never kept: reads everything (a drain, a test)
    await a.keep(["a"])
    assert a.readable() is None  # every partition held
    # b joins: a still holds b's share until a's next keep frees it.
    await b.keep(["a", "b"])
    assert b.readable() == []
    await a.keep(["a", "b"])
    await b.keep(["a", "b"])
    a_reads, b_reads = set(a.readable() or ()), set(b.readable() or ())
    assert len(a_reads) == len(b_reads) == P // 2
    assert a_reads.isdisjoint(b_reads)
    assert a_reads == owned_by("a", P, ["a", "b"])
    # a leaves: b takes everything at its next keep. Each partition moved twice (to a at
    # first, then to b: b's share when b joined, a's now), and each move raised its epoch.
    await a.leave()
    await sqlite_store.forget_instances({"a": T0})
    await b.keep(["b"])
    assert b.readable() is None
    assert b.held() == dict.fromkeys(range(P), 2)
    metrics = b_metrics.registry
    assert metrics.get_sample_value("tickd_partitions_owned") == P
    assert metrics.get_sample_value("tickd_partition_epoch") == 2
    taken = metrics.get_sample_value("tickd_partition_moves_total", {"direction": "taken"})
    assert taken == P  # half when it joined, the other half when a left


async def test_a_dead_instances_partitions_move_once_it_is_forgotten(
    sqlite_store: SQLiteStore,
) -> None:
    clock = FakeClock(T0)
    a = await keeper(sqlite_store, clock, "a")
    b = await keeper(sqlite_store, clock, "b")
    await a.keep(["a", "b"])
    await b.keep(["a", "b"])
    # a is killed: while its record stands, b may not take its share.
    await b.keep(["a", "b"])
    assert len(b.readable() or ()) == P // 2
    await sqlite_store.forget_instances({"a": T0})  # found dead by b's heartbeat
    await b.keep(["b"])
    assert b.readable() is None


async def test_an_instance_that_cannot_keep_stops_reading_before_others_may_take_over(
    sqlite_store: SQLiteStore,
) -> None:
    clock = FakeClock(T0)
    a = await keeper(sqlite_store, clock, "a")
    await a.keep(["a", "b"])
    held = a.readable()
    assert held is not None and len(held) == P // 2
    clock.advance(HOLD)
    assert a.readable() == held
    clock.advance(0.001)  # its beats failed for longer than the hold: it reads nothing
    assert a.readable() == ()
    await a.keep(["a", "b"])  # the store back
    assert a.readable() == held


async def test_a_keep_with_nothing_to_move_asks_the_store_only_after_a_gap_or_a_change(
    sqlite_store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beats less than the hold apart: no one can have taken what it holds meanwhile."""
    clock = FakeClock(T0)
    a = await keeper(sqlite_store, clock, "a")
    await a.keep(["a", "b"])
    held = a.readable()
    asked: list[str] = []
    take = sqlite_store.take_partitions

    async def counted(instance: str, parts: Sequence[int]) -> dict[int, int]:
        asked.append(instance)
        return await take(instance, parts)

    monkeypatch.setattr(sqlite_store, "take_partitions", counted)
    for _ in range(3):
        clock.advance(HOLD)
        await a.keep(["a", "b"])
    assert asked == []
    assert a.readable() == held, "each keep holds on for another hold"
    clock.advance(HOLD + 0.001)  # a gap: its record may have been forgotten meanwhile
    await a.keep(["a", "b"])
    assert asked == ["a"]
    await a.keep(["a"])  # b left: its share is to be taken
    assert asked == ["a", "a"]
    assert a.readable() is None


async def test_a_partition_is_freed_only_once_the_claims_of_a_fetch_that_read_it_are_stored(
    make_engine: EngineFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its next owner counts the runs in flight of the keys that live in it from the leases in
    the store: a claim landing after the move would take a key over its limit."""

    async def call(ctx: HandlerContext) -> Result:
        return None

    h = make_engine({"call": call})
    await h.add(make_job("job", "call", next_run_at=T0))
    engine = h.engine
    keeper = engine.heartbeat.partitions
    await h.store.beat("test-instance", T0)
    await keeper.keep(["test-instance"])  # alone: it holds every partition
    claim, claiming, landed = engine.claimer.claim, asyncio.Event(), asyncio.Event()

    async def slow_claim(*args: object, **kwargs: object) -> object:
        claiming.set()
        await landed.wait()
        return await claim(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(engine.claimer, "claim", slow_claim)
    ticking = asyncio.create_task(engine.tick())
    await asyncio.wait_for(claiming.wait(), 5)
    keeping = asyncio.create_task(keeper.keep(["test-instance", "b"]))  # b joined
    for _ in range(50):
        await asyncio.sleep(0)
    assert all(o.owner == "test-instance" for o in await h.store.partition_owners())
    landed.set()
    tick = await asyncio.wait_for(ticking, 5)
    await asyncio.wait_for(keeping, 5)
    assert tick.claimed == 1
    freed = {o.part for o in await h.store.partition_owners() if o.owner is None}
    assert freed == owned_by("b", keeper.count, ["test-instance", "b"])


def heartbeat(store: SQLiteStore, clock: FakeClock, instance: str) -> Heartbeat:
    keeper = PartitionKeeper(store, clock, instance, hold_seconds=HOLD)
    return Heartbeat(
        store,
        clock,
        instance,
        lock=MemoryLock(),
        every_seconds=3.0,
        lapse_seconds=2 * HOLD,
        partitions=keeper,
    )


async def test_a_newcomer_takes_its_share_within_a_pause_of_its_holder_freeing_it(
    sqlite_store: SQLiteStore,
) -> None:
    clock = FakeClock(T0)
    a, b = heartbeat(sqlite_store, clock, "a"), heartbeat(sqlite_store, clock, "b")
    await a.beat_if_due()
    assert a.partitions.readable() is None  # alone: it holds them all
    clock.advance(1.0)
    await b.beat_if_due()  # b joins; a holds b's share until its next beat
    assert b.partitions.waiting()
    assert b.partitions.readable() == []
    clock.advance(2.0)
    await a.beat_if_due()  # a sees b and frees b's share
    clock.advance(0.5)
    await b.beat_if_due()  # 2.5 s after b's beat, not a beat: it takes what it waits for
    assert not b.partitions.waiting()
    assert len(b.partitions.readable() or ()) == P // 2


async def test_a_dead_instances_share_is_taken_within_a_pause_of_its_lapse(
    sqlite_store: SQLiteStore,
) -> None:
    """Not at the survivor's next beat, up to a beat later: a SIGKILL's partitions are owned
    again within the heartbeat timeout, the time its last beat took to be seen, and a pause."""
    clock = FakeClock(T0)
    a, b = heartbeat(sqlite_store, clock, "a"), heartbeat(sqlite_store, clock, "b")
    for _ in range(5):  # both beat for 15 s: b may judge others
        await a.beat_if_due()
        await b.beat_if_due()
        clock.advance(3.0)
    assert len(b.partitions.readable() or ()) == P // 2
    lapse = 2 * HOLD
    # a is killed now; b saw its last beat 3 s ago. b beats 3 s from now, then every 3 s.
    dead_at = clock.monotonic() - 3.0 + lapse
    while clock.monotonic() < dead_at - 0.5:
        await b.beat_if_due()
        assert len(b.partitions.readable() or ()) == P // 2, "alive until a whole lapse"
        clock.advance(0.5)
    while clock.monotonic() < dead_at + 0.5 and b.partitions.readable() is not None:
        await b.beat_if_due()
        clock.advance(0.5)
    assert b.partitions.readable() is None, "all of a's share taken at the pause after its lapse"
    assert set(await sqlite_store.instances()) == {"b"}


class Held:
    """Partitions 0-5 of 8, as a keeper would hold them."""

    count = 8

    def readable(self) -> list[int]:
        return [0, 1, 2, 3, 4, 5]


def job_in(part: int) -> Job:
    return next(
        job for i in range(1000) if partition_of((job := make_job(f"j{part}-{i}")).id, 8) == part
    )


def test_a_backlog_reads_in_turn_from_where_it_stopped_passing_over_drained_partitions() -> None:
    turns = PartitionTurns(Held(), in_turn=True, quiet=timedelta(seconds=1))
    assert turns.order(T0, backlogged=False) == [0, 1, 2, 3, 4, 5]  # one read of them all
    order = turns.order(T0, backlogged=True)
    assert order == [0, 1, 2, 3, 4, 5]
    # A full fetch that stopped in 3, having found nothing in 0 and 2 (1 gave some).
    turns.read(order, [job_in(1), job_in(3)], T0)
    assert turns.order(T0, backlogged=True) == [3, 4, 5, 1]
    later = T0 + timedelta(seconds=1)
    assert turns.order(later, backlogged=True) == [3, 4, 5, 0, 1, 2]  # a tick on: read again
    turns.read([3, 4, 5, 0, 1, 2], [job_in(3)], later)
    assert turns.order(later, backlogged=False) == [0, 1, 2, 3, 4, 5]  # caught up: forgotten
    assert turns.order(later, backlogged=True) == [3, 4, 5, 0, 1, 2]


def test_each_lane_walks_its_partitions_apart() -> None:
    """A partition drained of one domain's jobs may still hold another's: a lane's read passes
    over only the partitions it found drained of its own domain."""
    turns = PartitionTurns(Held(), in_turn=True, quiet=timedelta(seconds=1))
    order = turns.order(T0, backlogged=True, lane="a")
    assert order == [0, 1, 2, 3, 4, 5]
    # Lane a's full read stopped in 4, having found none of a's in 0 to 3.
    turns.read(order, [job_in(4)], T0, lane="a")
    assert turns.order(T0, backlogged=True, lane="a") == [4, 5]
    assert turns.order(T0, backlogged=True, lane="b") == [0, 1, 2, 3, 4, 5]
    assert turns.order(T0, backlogged=True) == [0, 1, 2, 3, 4, 5]  # every domain's read
    # A keyed job lives in its key's partition, not its id's.
    key = next(f"k{i}" for i in range(1000) if partition_of(f"k{i}", 8) == 2)
    keyed_jobs = (make_job(f"k-{i}", concurrency_key=key, concurrency_limit=1) for i in range(99))
    keyed = next(job for job in keyed_jobs if partition_of(job.id, 8) not in (2, 3))
    turns.read([0, 1, 2, 3, 4, 5], [keyed], T0, lane="b")
    assert turns.order(T0, backlogged=True, lane="b") == [2, 3, 4, 5]
    # Caught up: every lane's drained partitions are forgotten.
    assert turns.order(T0, backlogged=False) == [0, 1, 2, 3, 4, 5]
    assert turns.order(T0, backlogged=True, lane="a") == [4, 5, 0, 1, 2, 3]


class CountingBacklog:
    """The store's backlog count, answering which partitions it was asked for."""

    def __init__(self) -> None:
        self.asked: list[Sequence[int] | None] = []

    async def due_backlog(self, now: datetime, *, partitions: Sequence[int] | None) -> Backlog:
        self.asked.append(partitions)
        return Backlog(due=7, oldest_due_at=now - timedelta(seconds=30))


class NoneHeld:
    """A keeper whose last keep is older than its hold."""

    count = 8

    def readable(self) -> tuple[int, ...]:
        return ()


async def test_the_backlog_gauges_count_only_the_partitions_held() -> None:
    store, metrics, clock = CountingBacklog(), Metrics(), FakeClock(T0)
    gauges = BacklogGauges(store, clock, metrics, every_seconds=5, partitions=Held())  # type: ignore[arg-type]
    await gauges.refresh(T0)
    assert store.asked == [[0, 1, 2, 3, 4, 5]]
    assert metrics.registry.get_sample_value("tickd_due_backlog") == 7
    assert metrics.registry.get_sample_value("tickd_oldest_due_age_seconds") == 30
    # Holding none (its beats fail): nothing is its to count, and the store is not asked.
    gauges = BacklogGauges(store, clock, metrics, every_seconds=5, partitions=NoneHeld())  # type: ignore[arg-type]
    await gauges.refresh(T0)
    assert len(store.asked) == 1
    assert metrics.registry.get_sample_value("tickd_due_backlog") == 0
    assert metrics.registry.get_sample_value("tickd_oldest_due_age_seconds") == 0
