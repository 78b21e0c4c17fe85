"""A job's domain in the store, on every backend: it round-trips, it is `default` when the job
names none, a job stored before domains existed reads as `default`, and the jobs lists keep
exactly the jobs of the domain asked for."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

import asyncpg
from pymongo import AsyncMongoClient

from tests.conftest import T0, make_job
from tests.fixtures.stores import opened
from tickd.scheduler.codec import Doc
from tickd.scheduler.model import new_id
from tickd.scheduler.ports.backends import JobChange, JobQuery, JobSearch, Store
from tickd.scheduler.urls import local_path

# PostgreSQL's schema version that added jobs.domain: a database from before domains is at the
# one below it (the domains' settings came later still).
JOB_DOMAINS_VERSION = 3


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


async def as_before_domains(url: str) -> None:
    """The database at `url` as a tickd from before domains left it: no domain on the jobs, no
    domains' settings."""
    scheme = urlsplit(url).scheme
    if scheme == "sqlite":
        db = sqlite3.connect(local_path(url))
        try:
            db.executescript(
                "DROP INDEX jobs_by_domain; ALTER TABLE jobs DROP COLUMN domain; "
                "DROP TABLE domains;"
            )
        finally:
            db.close()
    elif scheme == "postgresql":
        connection = await asyncpg.connect(url)
        try:
            await connection.execute("DROP TABLE domains")
            await connection.execute("ALTER TABLE jobs DROP COLUMN domain")  # and its index
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
