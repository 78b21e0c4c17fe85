"""A job's domain in the store, on every backend: it round-trips, it is `default` when the job
names none, a job stored before domains existed reads as `default`, and the jobs lists and the
due reads keep exactly the jobs of the domains asked for."""

from __future__ import annotations

import sqlite3
from collections import Counter
from dataclasses import replace
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import asyncpg
from pymongo import AsyncMongoClient

from tests.conftest import T0, make_job
from tests.fixtures.stores import opened
from tickd.scheduler.codec import Doc
from tickd.scheduler.model import Job, Priority, new_id
from tickd.scheduler.partitions import partition_of
from tickd.scheduler.ports.backends import (
    DueFilter,
    JobChange,
    JobQuery,
    JobSearch,
    LeaseTerms,
    Store,
)
from tickd.scheduler.ports.store_operations import STORE_OPERATIONS
from tickd.scheduler.urls import local_path

# PostgreSQL's schema version that added jobs.domain: a database from before domains is at the
# one below it (the domains' settings came later still).
JOB_DOMAINS_VERSION = 3
LEASE = LeaseTerms(owner="instance-a", margin_seconds=30.0)


async def test_a_jobs_domain_round_trips_and_defaults_to_default(store: Store) -> None:
    named = make_job("payments-sync", domain="payments")
    unnamed = make_job("cleanup")
    await store.insert_missing_jobs([named, unnamed])

    assert await store.get_job(named.id) == named
    assert await store.get_job_by_name("payments-sync") == named
    read = await store.get_job(unnamed.id)
    assert read is not None and read.domain == "default"


async def test_a_replaced_job_moves_to_its_new_domain(store: Store) -> None:
    job = make_job("report", domain="team-a")
    await store.insert_job(job)
    moved = {"domain": {"from": "team-a", "to": "team-b.eu"}}
    change = JobChange(
        id=new_id(), job_id=job.id, job_name=job.name, at=T0, actor="ops", action="update",
        changes=moved,
    )  # fmt: skip
    stored = await store.replace_job(replace(job, domain="team-b.eu"), job.revision, change)
    assert stored is not None and stored.domain == "team-b.eu"
    read = await store.get_job(job.id)
    assert read is not None and read.domain == "team-b.eu"


async def test_the_jobs_lists_keep_exactly_the_jobs_of_a_domain(store: Store) -> None:
    await store.insert_missing_jobs(
        [
            make_job("a.sync", "ping", domain="payments"),
            make_job("b.export", "sleep", domain="payments"),
            make_job("c.sync", "ping", domain="search"),
            make_job("d.sync", "ping"),
            make_job("e.paused", "ping", domain="payments", enabled=False),
        ]
    )

    async def listed(**filters: Any) -> list[str]:
        return [job.name for job in await store.list_jobs(JobQuery(**filters))]

    async def searched(**filters: Any) -> list[str]:
        return [job.name for job in await store.search_jobs(JobSearch(**filters))]

    payments = ["a.sync", "b.export", "e.paused"]
    assert await listed(domain="payments") == payments
    assert await searched(domain="payments") == payments
    assert await store.count_jobs(JobSearch(domain="payments")) == 3
    assert await listed(domain="default") == await searched(domain="default") == ["d.sync"]
    assert await listed(domain="payments", handler="ping", enabled=True) == ["a.sync"]
    assert await searched(domain="search", text="SYNC") == ["c.sync"]
    assert await listed(domain="payments", limit=1, after_name="a.sync") == ["b.export"]
    assert await listed(domain="nobody") == await searched(domain="nobody") == []
    assert await store.count_jobs(JobSearch(domain="nobody")) == 0


def due_in_three_domains() -> list[Job]:
    """Jobs of payments, search and the default domain, due at T0 but one, each of a priority
    and a time that puts it between the others' in the order of the due reads."""

    def job(name: str, domain: str, priority: Priority, seconds_ago: int) -> Job:
        due = T0 - timedelta(seconds=seconds_ago)
        return make_job(name, domain=domain, priority=priority, next_run_at=due)

    return [
        job("pay-critical", "payments", Priority.CRITICAL, 1),
        job("pay-normal", "payments", Priority.NORMAL, 3),
        job("pay-low", "payments", Priority.LOW, 5),
        job("pay-later", "payments", Priority.CRITICAL, -60),  # not due
        job("search-high", "search", Priority.HIGH, 2),
        job("search-normal", "search", Priority.NORMAL, 4),
        job("search-old", "search", Priority.LOW, 7),
        job("plain", "default", Priority.NORMAL, 6),
    ]


def names(jobs: list[Job]) -> list[str]:
    return [job.name for job in jobs]


async def test_a_due_read_keeps_the_jobs_of_the_domains_asked_for_most_urgent_first(
    store: Store,
) -> None:
    await store.insert_missing_jobs(due_in_three_domains())

    async def due(limit: int = 10, **filters: Any) -> list[str]:
        return names(await store.due_jobs(T0, limit, DueFilter(**filters)))

    every = ["pay-critical", "search-high", "plain", "search-normal", "pay-normal", "search-old"]
    assert await due() == [*every, "pay-low"]
    payments = ["pay-critical", "pay-normal", "pay-low"]
    assert await due(domains=["payments"]) == payments
    assert await due(2, domains=["payments"]) == payments[:2]
    others = ["search-high", "plain", "search-normal", "search-old"]
    assert await due(domains=["search", "default"]) == others
    assert await due(exclude_domains=["payments"]) == others
    assert await due(domains=["payments", "search"], exclude_domains=["search"]) == payments
    assert await due(domains=["default"]) == ["plain"]
    assert await due(exclude_domains=["default", "search"]) == payments
    assert await due(domains=["nobody"]) == await due(domains=[]) == []

    # Where the store claims as it reads, the claim takes what the read would, and only that.
    search = await store.claim_due_jobs(
        T0,
        T0,
        10,
        lease=LEASE,
        where=DueFilter(domains=["search", "default"], exclude_domains=["default"]),
    )
    if search is None:  # the store reads with due_jobs, then claims
        return
    assert names(search) == ["search-high", "search-normal", "search-old"]
    assert all(job.lease is not None and job.lease.owner == LEASE.owner for job in search)
    rest = await store.claim_due_jobs(
        T0, T0, 10, lease=LEASE, where=DueFilter(exclude_domains=["payments"])
    )
    assert rest is not None and names(rest) == ["plain"]
    assert await due() == payments


async def test_the_domains_asked_for_hold_in_every_read_of_a_due_read(store: Store) -> None:
    """The jobs named first, the starved, the rest by urgency: each read would bring a job of
    another domain without the filter. So would each partition's read, and the urgent jobs'
    across them, where a store reads the partitions in turn (FerretDB)."""
    jobs = due_in_three_domains()
    await store.insert_missing_jobs(jobs)
    by_name = {job.name: job for job in jobs}
    reads: dict[str, Any] = {
        "first": [by_name["pay-low"].id, by_name["search-normal"].id],
        "starved_before": T0 - timedelta(seconds=2.5),
    }

    async def due(**filters: Any) -> list[str]:
        return names(await store.due_jobs(T0, 10, DueFilter(**reads, **filters)))

    search = ["search-normal", "search-old", "search-high"]
    not_search = ["pay-low", "plain", "pay-normal", "pay-critical"]
    assert await due(domains=["search"]) == search
    assert await due(exclude_domains=["search"]) == not_search
    parts = sorted({partition_of(job.id, store.partition_count) for job in jobs})
    in_turn = {"partitions": parts, "in_turn": True}  # an order of its own on FerretDB
    assert sorted(await due(domains=["search"], **in_turn)) == sorted(search)
    assert sorted(await due(exclude_domains=["search"], **in_turn)) == sorted(not_search)

    claimed = await store.claim_due_jobs(
        T0, T0, 10, lease=LEASE, where=DueFilter(**reads, domains=["search"], partitions=parts)
    )
    if claimed is not None:  # the store claims as it reads
        assert names(claimed) == search
        rest = await store.claim_due_jobs(
            T0, T0, 10, lease=LEASE, where=DueFilter(exclude_domains=["payments"])
        )
        assert rest is not None and names(rest) == ["plain"]


async def test_lanes_claimed_at_once_each_take_what_their_own_claims_would(store: Store) -> None:
    """Where a store claims every lane of a fetch in one round trip (PostgreSQL), each lane
    takes the head its own read would, cut at its own limit, in that order, and claims it; the
    next such claim takes what is left. The others answer None: each lane is read apart."""
    jobs = due_in_three_domains()
    await store.insert_missing_jobs(jobs)
    by_name = {job.name: job for job in jobs}
    reads: dict[str, Any] = {  # each read of a lane holds its domains and its limit
        "first": [by_name["pay-low"].id],
        "starved_before": T0 - timedelta(seconds=4.5),
    }
    lanes = [
        (2, DueFilter(domains=["payments"], **reads)),
        (2, DueFilter(domains=["search"], **reads)),
        (10, DueFilter(exclude_domains=["payments", "search"], **reads)),
    ]

    async def heads() -> list[list[str]]:
        return [names(await store.due_jobs(T0, limit, where)) for limit, where in lanes]

    expected = await heads()
    assert expected == [["pay-low", "pay-critical"], ["search-old", "search-high"], ["plain"]]
    before = STORE_OPERATIONS.snapshot()
    claimed = await store.claim_due_lanes(T0, T0, lanes, lease=LEASE)
    if claimed is None:
        assert not store.claim_is_the_lock, "a store that claims as it reads claims lanes too"
        return
    spent = Counter(STORE_OPERATIONS.snapshot()) - Counter(before)
    assert spent == Counter({("postgresql", "statement"): 1})
    assert [names(lane) for lane in claimed] == expected
    assert all(job.lease and job.lease.owner == LEASE.owner for lane in claimed for job in lane)
    left = await heads()
    assert left == [["pay-normal"], ["search-normal"], []]
    again = await store.claim_due_lanes(T0, T0, lanes, lease=LEASE)
    assert again is not None and [names(lane) for lane in again] == left


async def test_a_job_stored_before_domains_reads_as_default(store_url: str) -> None:
    """A database an older tickd wrote: SQLite's jobs table without the column (added at the
    next open), PostgreSQL's schema before the migration that adds it, MongoDB's job documents
    without the field (which an older instance still running keeps writing)."""
    older, newer = make_job("older"), make_job("newer", domain="payments")
    async with opened(store_url) as store:
        await store.insert_missing_jobs([older])
    await as_before_domains(store_url)

    async with opened(store_url) as store:
        read = await store.get_job(older.id)
        assert read is not None and read.domain == "default"
        assert [job.name for job in await store.list_jobs(JobQuery(domain="default"))] == ["older"]
        assert await store.count_jobs(JobSearch(domain="default")) == 1
        await store.insert_job(newer)
        assert await store.get_job(newer.id) == newer
        assert [job.name for job in await store.search_jobs(JobSearch(domain="payments"))] == [
            "newer"
        ]
        # So it is to the due reads, and to a claim at the read.
        assert names(await store.due_jobs(T0, 10, DueFilter(domains=["default"]))) == ["older"]
        assert names(await store.due_jobs(T0, 10, DueFilter(exclude_domains=["default"]))) == [
            "newer"
        ]
        assert names(await store.due_jobs(T0, 10, DueFilter(exclude_domains=["payments"]))) == [
            "older"
        ]
        claimed = await store.claim_due_jobs(
            T0, T0, 10, lease=LEASE, where=DueFilter(domains=["default"])
        )
        assert claimed is None or names(claimed) == ["older"]


async def as_before_domains(url: str) -> None:
    """The database at `url` as a tickd from before domains left it: no domain on the jobs, no
    domains' settings."""
    scheme = urlsplit(url).scheme
    if scheme == "sqlite":
        db = sqlite3.connect(local_path(url))
        try:
            db.executescript(
                "DROP INDEX jobs_by_domain; DROP INDEX jobs_due_by_domain; "
                "ALTER TABLE jobs DROP COLUMN domain; DROP TABLE domains;"
            )
        finally:
            db.close()
    elif scheme == "postgresql":
        connection = await asyncpg.connect(url)
        try:
            await connection.execute("DROP TABLE domains")
            await connection.execute("ALTER TABLE jobs DROP COLUMN domain")  # and its indexes
            # Nor concurrency keys, which came after (their index goes with them).
            await connection.execute(
                "ALTER TABLE jobs DROP COLUMN concurrency_key, DROP COLUMN concurrency_limit"
            )
            await connection.execute(
                "DELETE FROM schema_version WHERE version >= $1", JOB_DOMAINS_VERSION
            )
        finally:
            await connection.close()
    else:
        client: AsyncMongoClient[Doc] = AsyncMongoClient(url)
        try:
            database = client.get_default_database()
            await database["jobs"].update_many({}, {"$unset": {"domain": ""}})
            await database.drop_collection("domains")
        finally:
            await client.close()
