"""The partitions' contract, on every store backend, with two store objects on one database as
two instances would have: how many a new store makes, taking, releasing, a live owner's that
cannot be taken, a dead owner's that can, and the due read and backlog of a few partitions."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import replace
from datetime import timedelta

import pytest

from tests.conftest import T0, make_job
from tests.fixtures.stores import opened
from tickd.scheduler.model import Job, Priority
from tickd.scheduler.partitions import partition_of
from tickd.scheduler.ports.backends import Backlog, DueFilter, Store
from tickd.scheduler.store import open_store
from tickd.scheduler.store.mongodb import MongoStore
from tickd.scheduler.store.sqlite import SQLiteStore


@pytest.fixture
async def two(store_url: str) -> AsyncIterator[tuple[Store, Store]]:
    """Two instances' stores on one new database of 8 partitions."""
    async with AsyncExitStack() as stack:
        stores = []
        for _ in range(2):
            store = open_store(store_url, partitions=8)
            await store.open()
            stack.push_async_callback(store.close)
            stores.append(store)
        yield stores[0], stores[1]


async def test_a_new_store_makes_its_partitions_and_keeps_their_count(store_url: str) -> None:
    first = open_store(store_url, partitions=8)
    await first.open()
    try:
        assert first.partition_count == 8
        owners = await first.partition_owners()
        assert [(o.part, o.owner, o.epoch) for o in owners] == [(p, None, 0) for p in range(8)]
    finally:
        await first.close()
    # The count is the store's, fixed when it was made: a later open asking for more keeps it.
    async with opened(store_url) as again:
        assert again.partition_count == 8


async def test_a_partition_is_taken_once_and_its_epoch_counts_the_moves(
    two: tuple[Store, Store],
) -> None:
    a, b = two
    await a.beat("a", T0)
    await b.beat("b", T0)
    assert await a.take_partitions("a", [0, 1, 2]) == {0: 1, 1: 1, 2: 1}
    # Held by a live instance: b gets only the free one, and a keeps its epochs.
    assert await b.take_partitions("b", [2, 3]) == {3: 1}
    assert await a.take_partitions("a", [0, 1, 2]) == {0: 1, 1: 1, 2: 1}
    await a.release_partitions("a", [2])
    await b.release_partitions("b", [0])  # not b's: nothing changes
    assert await b.take_partitions("b", [0, 2, 3]) == {2: 2, 3: 1}
    owners = {o.part: (o.owner, o.epoch) for o in await a.partition_owners()}
    assert owners[0] == ("a", 1)
    assert owners[2] == ("b", 2)
    assert owners[4] == (None, 0)


async def test_a_dead_owners_partitions_are_taken_once_it_is_forgotten(
    two: tuple[Store, Store],
) -> None:
    a, b = two
    await a.beat("a", T0)
    await b.beat("b", T0)
    assert await a.take_partitions("a", [5, 6]) == {5: 1, 6: 1}
    assert await b.take_partitions("b", [5, 6]) == {}
    await b.forget_instances({"a": T0})  # found dead by b's heartbeat
    assert await b.take_partitions("b", [5, 6]) == {5: 2, 6: 2}
    # The old owner, back, finds them gone: it stops reading them.
    await a.beat("a", T0)
    assert await a.take_partitions("a", [5, 6]) == {}


async def test_the_due_read_of_some_partitions_has_every_due_job_of_them(
    two: tuple[Store, Store],
) -> None:
    a, _ = two
    jobs = [make_job(f"job-{i}") for i in range(40)]
    await a.insert_missing_jobs(jobs)
    part = {job.id: partition_of(job.id, a.partition_count) for job in jobs}
    some = [1, 4, 6]
    read = await a.due_jobs(T0, 100, DueFilter(partitions=some))
    ids = {job.id for job in read}
    assert len(ids) == len(read)
    assert {job.id for job in jobs if part[job.id] in some} <= ids
    if not isinstance(a, MongoStore):
        return
    # Its instances' reads would collide: it reads only those, at once or one at a time.
    for in_turn in (False, True):
        read = await a.due_jobs(T0, 100, DueFilter(partitions=some, in_turn=in_turn))
        assert {job.id for job in read} == {job.id for job in jobs if part[job.id] in some}
        few = await a.due_jobs(T0, 3, DueFilter(partitions=some, in_turn=in_turn))
        assert len(few) == 3
        assert {part[job.id] for job in few} <= set(some)


async def test_a_take_answers_with_a_single_operation_let_through_at_once(
    two: tuple[Store, Store],
) -> None:
    """On FerretDB the store lets only a few operations through at once (its gate): a take that
    waited for a second place while holding one would wait for ever once every place was held
    that way, and with it every other call of the instance."""
    a, _ = two
    if not isinstance(a, MongoStore):
        pytest.skip("only the MongoDB store gates its operations")
    a.gate = asyncio.Semaphore(1)
    await a.beat("a", T0)
    assert await asyncio.wait_for(a.take_partitions("a", [0, 1]), timeout=10) == {0: 1, 1: 1}


async def test_the_backlog_of_each_instances_partitions_adds_up_to_the_stores(
    two: tuple[Store, Store],
) -> None:
    """Each instance counts the partitions it holds: the sum of the counts is the store's, the
    oldest of their oldest the store's (SQLite, one process's, counts them all)."""
    a, _ = two
    due_at = {f"job-{i}": T0 - timedelta(minutes=i) for i in range(40)}
    jobs = [replace(make_job(name), next_run_at=at) for name, at in due_at.items()]
    await a.insert_missing_jobs(jobs)
    count = a.partition_count
    halves = [list(range(0, count, 2)), list(range(1, count, 2))]
    whole = await a.due_backlog(T0)
    counts = [await a.due_backlog(T0, partitions=half) for half in halves]
    assert whole.due == 40 and whole.oldest_due_at == T0 - timedelta(minutes=39)
    if isinstance(a, SQLiteStore):
        assert counts == [whole, whole]
        return
    for half, backlog in zip(halves, counts, strict=True):
        mine = [job for job in jobs if partition_of(job.id, count) in half]
        assert backlog.due == len(mine)
        assert backlog.oldest_due_at == min(due_at[job.name] for job in mine)
    assert await a.due_backlog(T0, partitions=[]) == Backlog(due=0, oldest_due_at=None)


async def test_one_partition_at_a_time_reads_critical_and_high_jobs_first(
    two: tuple[Store, Store],
) -> None:
    """Where a store reads the partitions in turn (FerretDB), a critical job of the last
    partition still comes before the normal ones of the first; so does a high one an older
    tickd wrote without a partition."""
    a, _ = two
    count = a.partition_count
    # Ids are random: jobs are made until the first partition has 3 and the last 4.
    by_part: dict[int, list[Job]] = {0: [], count - 1: []}
    for i in range(100_000):
        job = make_job(f"job-{i}")
        by_part.get(partition_of(job.id, count), []).append(job)
        if len(by_part[0]) >= 3 and len(by_part[count - 1]) >= 4:
            break
    first, last = by_part[0][:3], by_part[count - 1]
    urgent = [
        replace(last[0], priority=Priority.CRITICAL),
        replace(last[1], priority=Priority.HIGH),
    ]
    await a.insert_missing_jobs([*first, *urgent, *last[2:]])
    if isinstance(a, MongoStore):
        await a.jobs.update_one({"_id": urgent[1].id}, {"$unset": {"part": ""}})
    order = list(range(count))
    read = await a.due_jobs(T0, 4, DueFilter(partitions=order, in_turn=True))
    assert [job.id for job in read[:2]] == [job.id for job in urgent]
    assert len(read) == 4
    if a.reads_partitions_in_turn:  # then the first partition's, in order
        assert {job.id for job in read[2:]} <= {job.id for job in first}
