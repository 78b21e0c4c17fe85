"""The stores a system test runs its daemons on, and what the tests read and write in them.

Each test gets a database of its own on one of them: on FerretDB (over PostgreSQL) or on
PostgreSQL itself. What the tests read goes through tickd's own store roles (list_executions,
list_jobs, replace_job, outbox_backlog...), the same on every store; the few reads that would
decode thousands of documents a poll on FerretDB are its own queries, in FerretDB below.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import ClassVar, Literal
from urllib.parse import urlsplit, urlunsplit

import asyncpg
from pymongo import AsyncMongoClient
from pymongo.errors import PyMongoError

from tests.fixtures.services import MONGODB_URL, POSTGRESQL_URL, service_missing
from tickd.scheduler.codec import Doc
from tickd.scheduler.model import Execution, Job, new_id
from tickd.scheduler.ports.backends import ExecutionQuery, JobChange, JobQuery, Store
from tickd.scheduler.store.mongodb import MongoStore

StoreKind = Literal["ferretdb", "postgresql"]
# The stores a test parametrised over them runs on, each in turn (their ids too).
STORES: tuple[StoreKind, ...] = ("ferretdb", "postgresql")
REACH_MS = 2_000
# Rows a read takes at a time: every test's executions in one page on FerretDB, as its own
# query read them.
PAGE = 5_000


def with_path(url: str, path: str) -> str:
    """`url` with its path replaced (its query kept)."""
    return urlunsplit(urlsplit(url)._replace(path=f"/{path}"))


class Database:
    """A test's database on one store. The reads and writes here use the store's roles only."""

    kind: ClassVar[StoreKind]

    def __init__(self, name: str) -> None:
        self.name = name

    @property
    def store_url(self) -> str:
        raise NotImplementedError

    async def require(self) -> None:
        """Skip (fail under TICKD_REQUIRE_SERVICES=1) unless the store's server answers."""
        raise NotImplementedError

    def daemon_env(self, workdir: Path, name: str) -> dict[str, str]:
        """What a daemon on this store needs in its environment besides the store's URL."""
        return {}

    async def create(self) -> None:
        """Make the database, before the store first opens it."""

    async def drop(self) -> None:
        """Remove the database and everything in it (best effort: see Sandbox.clean)."""
        raise NotImplementedError

    async def executions(self, store: Store, *, handler: str | None = None) -> list[Execution]:
        """Every execution (of `handler`'s jobs), newest first, page after page."""
        found: list[Execution] = []
        before: tuple[datetime, str] | None = None
        while True:
            query = ExecutionQuery(handler=handler, before=before, limit=PAGE)
            page = await store.list_executions(query)
            found += page
            if len(page) < PAGE:
                return found
            before = (page[-1].scheduled_at, page[-1].id)

    async def jobs(self, store: Store) -> list[Job]:
        """Every job, the system jobs the daemons seed included, by name."""
        found: list[Job] = []
        after: str | None = None
        while True:
            page = await store.list_jobs(JobQuery(after_name=after, limit=PAGE))
            found += page
            if len(page) < PAGE:
                return found
            after = page[-1].name

    async def statuses(self, store: Store, handler: str) -> Counter[str]:
        """How many executions of `handler`'s jobs are in each status."""
        return Counter(str(e.status) for e in await self.executions(store, handler=handler))

    async def held_leases(self, store: Store) -> int:
        return sum(1 for job in await self.jobs(store) if job.lease is not None)

    async def pause_jobs(self, store: Store) -> None:
        """Every job paused (as ops pause one, with its history entry): none is due any more."""
        now = datetime.now(UTC)
        for job in await self.jobs(store):
            if not job.enabled:
                continue
            paused = replace(job, enabled=False, paused_reason="paused by the test", updated_at=now)
            change = JobChange(
                id=new_id(),
                job_id=job.id,
                job_name=job.name,
                at=now,
                actor="test",
                action="pause",
                changes={"enabled": {"from": True, "to": False}},
            )
            written = await store.replace_job(paused, job.revision, change, read=job)
            assert written is not None, f"{job.name} changed while no daemon ran"

    async def unsent_before(self, store: Store, when: datetime) -> int:
        """Events in the outbox written before `when` and not yet sent."""
        backlog = await store.outbox_backlog()
        events = await store.unsent_events(max(backlog.unsent, 1))
        return sum(1 for event in events if event.written_at < when)


class FerretDB(Database):
    """A MongoDB database on FerretDB. Counting and pausing are the server's own aggregate and
    updates: through the store's roles, each poll of a 2,000-job burst would fetch and decode
    every execution, slower than the aggregate, which already takes FerretDB a second or more on
    a busy machine (see mid_burst in test_crashes.py); and the pause would write each job and
    its history entry, one after another."""

    kind = "ferretdb"

    @property
    def store_url(self) -> str:
        return with_path(MONGODB_URL, self.name)

    async def require(self) -> None:
        admin: AsyncMongoClient[Doc] = AsyncMongoClient(
            MONGODB_URL, serverSelectionTimeoutMS=REACH_MS
        )
        try:
            await admin.admin.command("ping")
        except PyMongoError as exc:
            service_missing(f"no MongoDB-compatible server at {MONGODB_URL} ({type(exc).__name__})")
        finally:
            await admin.close()

    async def drop(self) -> None:
        admin: AsyncMongoClient[Doc] = AsyncMongoClient(
            MONGODB_URL, serverSelectionTimeoutMS=REACH_MS, timeoutMS=30_000
        )
        try:
            await admin.drop_database(self.name)
        finally:
            await admin.close()

    async def statuses(self, store: Store, handler: str) -> Counter[str]:
        pipeline: list[Doc] = [
            {"$match": {"handler": handler}},
            {"$group": {"_id": "$status", "n": {"$sum": 1}}},
        ]
        docs = await (await mongo(store).executions.aggregate(pipeline)).to_list()
        return Counter({doc["_id"]: int(doc["n"]) for doc in docs})

    async def held_leases(self, store: Store) -> int:
        return await mongo(store).jobs.count_documents({"lease": {"$ne": None}})

    async def pause_jobs(self, store: Store) -> None:
        await mongo(store).jobs.update_many({}, {"$set": {"enabled": False}})

    async def unsent_before(self, store: Store, when: datetime) -> int:
        written = {"$lt": int(when.timestamp() * 1_000_000)}
        return await mongo(store).outbox.count_documents(
            {"sent_at_us": None, "written_us": written}
        )


def mongo(store: Store) -> MongoStore:
    assert isinstance(store, MongoStore), type(store)
    return store


class PostgreSQL(Database):
    """A database of its own on the PostgreSQL server FerretDB runs on, made before the store
    opens it (the store creates its tables, not its database)."""

    kind = "postgresql"

    @property
    def store_url(self) -> str:
        return with_path(POSTGRESQL_URL, self.name)

    def daemon_env(self, workdir: Path, name: str) -> dict[str, str]:
        # The alert domain's product store, which every daemon opens at its start and keeps
        # beside the jobs by default, has no PostgreSQL backend: a SQLite file of the daemon's
        # own (no test here scans alerts on PostgreSQL).
        return {"TICKD_RESOURCE_URLS__PRODUCTS": f"sqlite:///{workdir}/products-{name}.db"}

    async def require(self) -> None:
        try:
            await (await admin_connection()).close()
        except (OSError, TimeoutError, asyncpg.PostgresError) as exc:
            service_missing(f"no PostgreSQL server at {POSTGRESQL_URL} ({type(exc).__name__})")

    async def create(self) -> None:
        db = await admin_connection()
        try:
            # Made already when a first open of the store failed after it.
            with contextlib.suppress(asyncpg.DuplicateDatabaseError):
                await db.execute(f'CREATE DATABASE "{self.name}"')
        finally:
            await db.close()

    async def drop(self) -> None:
        db = await admin_connection()
        try:
            # FORCE: a daemon the test killed may have left its connections open.
            await db.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
        finally:
            await db.close()


async def admin_connection() -> asyncpg.Connection:
    return await asyncpg.connect(POSTGRESQL_URL, timeout=REACH_MS / 1000)


def database(kind: StoreKind, name: str) -> Database:
    return {"ferretdb": FerretDB, "postgresql": PostgreSQL}[kind](name)
