"""A job's concurrency key and limit in the store, on every backend: they round-trip, a job
stored before keys names none, a keyed job's partition follows its key, and the reads the
owner of a key's partition admits its runs by (scheduler/keys.py)."""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest
from pymongo import AsyncMongoClient

from tests.conftest import T0, make_job
from tests.fixtures.stores import opened
from tickd.scheduler.codec import Doc
from tickd.scheduler.model import Job, Priority, new_id
from tickd.scheduler.partitions import job_partition, partition_of
from tickd.scheduler.ports.backends import (
    Claim,
    DueFilter,
    JobChange,
    LeaseTerms,
    RunRequest,
    Store,
)
from tickd.scheduler.ports.store_operations import STORE_OPERATIONS
from tickd.scheduler.store.sqlite import SQLiteStore
from tickd.scheduler.urls import local_path

VENDOR = "endpoint:api.vendor.com"
MAPS = "endpoint:maps.example.org"
LEASE = LeaseTerms(owner="instance-a", margin_seconds=30.0)


def keyed(name: str, key: str, limit: int = 2, **fields: Any) -> Job:
    return make_job(name, concurrency_key=key, concurrency_limit=limit, **fields)


def change_of(job: Job) -> JobChange:
    return JobChange(
        id=new_id(), job_id=job.id, job_name=job.name, at=T0, actor="ops", action="update",
        changes={"concurrency_key": {"from": None, "to": job.concurrency_key}},
    )  # fmt: skip


async def test_a_jobs_key_and_limit_round_trip_and_default_to_none(store: Store) -> None:
    limited, plain = keyed("vendor-sync", VENDOR, 3), make_job("cleanup")
    await store.insert_missing_jobs([limited, plain])

    assert await store.get_job(limited.id) == limited
    assert await store.get_job_by_name("vendor-sync") == limited
    read = await store.get_job(plain.id)
    assert read is not None and read.concurrency_key is None and read.concurrency_limit is None


async def test_a_replace_sets_changes_and_drops_a_jobs_key(store: Store) -> None:
    job = make_job("report")
    await store.insert_job(job)
    revision = job.revision
    for key, limit in ((VENDOR, 1), (MAPS, 5), (None, None)):
        wanted = replace(job, concurrency_key=key, concurrency_limit=limit)
        stored = await store.replace_job(wanted, revision, change_of(wanted))
        assert stored is not None
        assert (stored.concurrency_key, stored.concurrency_limit) == (key, limit)
        assert await store.get_job(job.id) == stored
        revision = stored.revision


async def stored_part(url: str, job_id: str) -> int | None:
    """The partition the database at `url` keeps the job in (`part`)."""
    if urlsplit(url).scheme == "postgresql":
        connection = await asyncpg.connect(url)
        try:
            return await connection.fetchval("SELECT part FROM jobs WHERE id = $1", job_id)  # type: ignore[no-any-return]
        finally:
            await connection.close()
    client: AsyncMongoClient[Doc] = AsyncMongoClient(url)
    try:
        doc = await client.get_default_database()["jobs"].find_one({"_id": job_id})
        assert doc is not None
        return doc["part"]  # type: ignore[no-any-return]
    finally:
        await client.close()


async def test_a_jobs_partition_follows_its_key_through_every_write(store_url: str) -> None:
    """Inserted with a key, in the key's partition; a replace that changes the key moves it to
    the new key's, one that drops the key back to its own (by id). SQLite keeps no partition:
    one process reads them all."""
    if urlsplit(store_url).scheme == "sqlite":
        pytest.skip("SQLite keeps no partition")
    # An id whose partition is neither key's, so that each move shows.
    job, seeded = keyed("vendor-sync", VENDOR, id="vendor-sync-job"), keyed("seeded", MAPS)
    async with opened(store_url) as store:
        count = store.partition_count
        parts = {partition_of(name, count) for name in (VENDOR, MAPS, job.id)}
        assert len(parts) == 3
        await store.insert_job(job)
        await store.insert_missing_jobs([seeded])
        assert await stored_part(store_url, job.id) == partition_of(VENDOR, count)
        assert await stored_part(store_url, seeded.id) == partition_of(MAPS, count)

        last = job
        for key, limit in ((MAPS, 1), (None, None), (VENDOR, 4)):
            wanted = replace(job, concurrency_key=key, concurrency_limit=limit)
            stored = await store.replace_job(wanted, last.revision, change_of(wanted))
            assert stored is not None
            assert await stored_part(store_url, job.id) == job_partition(wanted, count)
            last = stored
        # A replace given the job as read writes only the schedule state it changes; the
        # partition, whenever.
        moved = replace(last, concurrency_key=MAPS)
        assert await store.replace_job(moved, last.revision, change_of(moved), read=last)
        assert await stored_part(store_url, job.id) == partition_of(MAPS, count)


async def test_a_job_stored_before_keys_names_none(store_url: str) -> None:
    """A database an older tickd wrote: SQLite's jobs table without the columns (added at the
    next open), PostgreSQL's without them and the record of the migration that adds them,
    MongoDB's job documents without the fields (which an older instance keeps writing)."""
    older, newer = make_job("older"), keyed("newer", VENDOR)
    async with opened(store_url) as store:
        await store.insert_missing_jobs([older])
    await as_before_keys(store_url)

    async with opened(store_url) as store:
        read = await store.get_job(older.id)
        assert read is not None
        assert (read.concurrency_key, read.concurrency_limit) == (None, None)
        assert read == older
        await store.insert_job(newer)
        assert await store.get_job(newer.id) == newer


# PostgreSQL's schema version that adds the jobs' concurrency key and limit.
JOB_KEYS_VERSION = 6


async def as_before_keys(url: str) -> None:
    """The database at `url` as a tickd from before keys left it: no key nor limit on the jobs."""
    scheme = urlsplit(url).scheme
    if scheme == "sqlite":
        db = sqlite3.connect(local_path(url))
        try:
            db.executescript(
                "DROP INDEX jobs_keyed_leased; ALTER TABLE jobs DROP COLUMN concurrency_key; "
                "ALTER TABLE jobs DROP COLUMN concurrency_limit;"
            )
        finally:
            db.close()
    elif scheme == "postgresql":
        connection = await asyncpg.connect(url)
        try:
            await connection.execute(
                "ALTER TABLE jobs DROP COLUMN concurrency_key, DROP COLUMN concurrency_limit"
            )
            await connection.execute(
                "DELETE FROM schema_version WHERE version = $1", JOB_KEYS_VERSION
            )
        finally:
            await connection.close()
    else:
        client: AsyncMongoClient[Doc] = AsyncMongoClient(url)
        try:
            jobs = client.get_default_database()["jobs"]
            await jobs.update_many({}, {"$unset": {"concurrency_key": "", "concurrency_limit": ""}})
        finally:
            await client.close()


def claim_of(job: Job, owner: str = "instance-a", *, minutes: int = 5) -> Claim:
    until = T0 + timedelta(minutes=minutes)
    return Claim(
        job_id=job.id, revision=job.revision, next_run_at=job.next_run_at, owner=owner, until=until
    )


def round_trips() -> Counter[tuple[str, str]]:
    return Counter(STORE_OPERATIONS.snapshot())


async def test_the_runs_of_some_keys_are_the_leased_jobs_naming_them(store: Store) -> None:
    """Counted in one round trip: the jobs of the keys asked that hold a lease, live or expired,
    of any owner; not the free ones, nor other keys', nor the jobs that name none."""
    vendor = [keyed(f"vendor-{i}", VENDOR) for i in range(4)]
    maps, other, plain = keyed("maps", MAPS), keyed("other", "other-key"), make_job("plain")
    await store.insert_missing_jobs([*vendor, maps, other, plain])
    assert await store.running_by_key([VENDOR, MAPS]) == {}

    held = [vendor[0], vendor[1], maps, other, plain]
    won = await store.claim_jobs([claim_of(job) for job in held], T0)
    assert len(won) == len(held)
    # Another instance's lease, expired and not reaped yet, counts as the caller's do.
    assert await store.claim_jobs([claim_of(vendor[2], "instance-b", minutes=-1)], T0)

    before = round_trips()
    assert await store.running_by_key([VENDOR, MAPS, "nobody"]) == {VENDOR: 3, MAPS: 1}
    assert sum((round_trips() - before).values()) == 1
    assert await store.running_by_key(["other-key"]) == {"other-key": 1}
    before = round_trips()
    assert await store.running_by_key([]) == {}
    assert round_trips() == before

    given_back = next(job for job in won if job.id == vendor[0].id)
    assert given_back.lease is not None
    await store.give_back([(given_back.id, given_back.lease.token)])
    assert await store.running_by_key([VENDOR, MAPS]) == {VENDOR: 2, MAPS: 1}


def due_with_keys() -> list[Job]:
    """Jobs due at T0, of two keys and of none, each of a priority and a time that puts it
    between the others' in the order of the due reads."""

    def job(name: str, key: str | None, priority: Priority, seconds_ago: int) -> Job:
        due = T0 - timedelta(seconds=seconds_ago)
        limit = None if key is None else 2
        return make_job(
            name, concurrency_key=key, concurrency_limit=limit, priority=priority, next_run_at=due
        )

    return [
        job("vendor-critical", VENDOR, Priority.CRITICAL, 1),
        job("vendor-starved", VENDOR, Priority.NORMAL, 4),
        job("vendor-low", VENDOR, Priority.LOW, 5),
        job("maps-high", MAPS, Priority.HIGH, 2),
        job("maps-old", MAPS, Priority.LOW, 7),
        job("plain-normal", None, Priority.NORMAL, 3),
        job("plain-old", None, Priority.LOW, 6),
    ]


def names(jobs: Sequence[Job]) -> list[str]:
    return [job.name for job in jobs]


async def test_a_due_read_leaves_out_the_jobs_of_the_keys_excluded(store: Store) -> None:
    """In each read (the jobs named first, the starved, the rest by urgency), before the limit:
    a job of an excluded key never takes the place of one that could run."""
    jobs = due_with_keys()
    await store.insert_missing_jobs(jobs)
    by_name = {job.name: job for job in jobs}

    async def due(limit: int = 10, **filters: Any) -> list[str]:
        return names(await store.due_jobs(T0, limit, DueFilter(**filters)))

    every = [
        "vendor-critical", "maps-high", "vendor-starved", "plain-normal", "maps-old", "plain-old",
        "vendor-low",
    ]  # fmt: skip
    assert await due() == await due(exclude_keys=["nobody"]) == every
    assert await due(exclude_keys=[VENDOR]) == [
        "maps-high",
        "plain-normal",
        "maps-old",
        "plain-old",
    ]
    assert await due(2, exclude_keys=[VENDOR]) == ["maps-high", "plain-normal"]
    assert await due(exclude_keys=[VENDOR, MAPS]) == ["plain-normal", "plain-old"]

    reads: dict[str, Any] = {
        "first": [by_name["vendor-low"].id, by_name["maps-old"].id],
        "starved_before": T0 - timedelta(seconds=2.5),
    }
    assert await due(**reads) == [
        "maps-old", "vendor-low", "plain-old", "vendor-starved", "plain-normal", "vendor-critical",
        "maps-high",
    ]  # fmt: skip
    kept = ["maps-old", "plain-old", "plain-normal", "maps-high"]
    assert await due(exclude_keys=[VENDOR], **reads) == kept
    parts = sorted({job_partition(job, store.partition_count) for job in jobs})
    in_turn: dict[str, Any] = {"partitions": parts, "in_turn": True}  # FerretDB's own order
    assert sorted(await due(exclude_keys=[VENDOR], **reads, **in_turn)) == sorted(kept)

    # Where the store claims as it reads, the claim leaves them out as the read does.
    claimed = await store.claim_due_jobs(
        T0, T0, 2, lease=LEASE, where=DueFilter(exclude_keys=[VENDOR])
    )
    if claimed is None:  # the store reads with due_jobs, then claims
        return
    assert names(claimed) == ["maps-high", "plain-normal"]
    rest = await store.claim_due_jobs(
        T0, T0, 10, lease=LEASE, where=DueFilter(**reads, exclude_keys=[MAPS])
    )
    assert rest is not None
    assert names(rest) == ["vendor-low", "plain-old", "vendor-starved", "vendor-critical"]
    assert await due() == ["maps-old"]


def request_for(job: Job, seconds: int) -> RunRequest:
    at = T0 - timedelta(seconds=seconds)
    return RunRequest(
        id=new_id(), job_id=job.id, scheduled_at=at, reason="trigger", not_before=at, created_at=at
    )


async def test_the_due_requests_leave_out_those_of_the_keys_excluded(store: Store) -> None:
    """Before the limit, as the requests of excluded handlers and domains are."""
    vendor, maps, plain = keyed("vendor", VENDOR), keyed("maps", MAPS), make_job("plain")
    await store.insert_missing_jobs([vendor, maps, plain])
    # Oldest first: vendor's, then maps', then plain's.
    await store.insert_run_requests(
        [
            request_for(vendor, 9),
            request_for(vendor, 8),
            request_for(maps, 7),
            request_for(plain, 6),
        ]
    )

    async def due(limit: int = 10, **filters: Any) -> list[str]:
        pairs = await store.due_run_requests(T0, limit, **filters)
        return [job.name for _, job in pairs]

    assert await due() == ["vendor", "vendor", "maps", "plain"]
    assert await due(exclude_keys=["nobody"]) == ["vendor", "vendor", "maps", "plain"]
    assert await due(2, exclude_keys=[VENDOR]) == ["maps", "plain"]
    assert await due(exclude_keys=[VENDOR, MAPS]) == ["plain"]
    assert await due(1, exclude_keys=[MAPS], exclude_handlers=["noop"]) == []


async def test_the_requests_of_a_keyed_job_are_read_where_its_partition_is(store: Store) -> None:
    """With `partitions`, only the owner of a key's partition reads the requests of its jobs;
    those of the jobs naming no key are read by all. SQLite, one process's, reads them all."""
    count = store.partition_count
    vendor, maps = keyed("vendor", VENDOR), keyed("maps", MAPS)
    plain = make_job("plain", id="plain-job")  # its own partition, neither key's
    assert (
        len({partition_of(VENDOR, count), partition_of(MAPS, count), job_partition(plain, count)})
        == 3
    )
    await store.insert_missing_jobs([vendor, maps, plain])
    await store.insert_run_requests(
        [
            request_for(vendor, 9),
            request_for(maps, 8),
            request_for(plain, 7),
            request_for(vendor, 6),
        ]
    )

    async def due(limit: int = 10, **filters: Any) -> list[str]:
        pairs = await store.due_run_requests(T0, limit, **filters)
        return [job.name for _, job in pairs]

    every = ["vendor", "maps", "plain", "vendor"]
    assert await due() == every
    if isinstance(store, SQLiteStore):
        assert await due(partitions=[]) == every
        return
    assert await due(partitions=[partition_of(VENDOR, count)]) == ["vendor", "plain", "vendor"]
    assert await due(2, partitions=[partition_of(MAPS, count)]) == ["maps", "plain"]
    assert await due(partitions=[job_partition(plain, count)]) == ["plain"]
    assert await due(partitions=[]) == ["plain"]
    both = [partition_of(VENDOR, count), partition_of(MAPS, count)]
    assert await due(partitions=both, exclude_keys=[VENDOR]) == ["maps", "plain"]
